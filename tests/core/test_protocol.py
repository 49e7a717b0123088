"""The round contract (fedray.core.protocol): the runtime runs a protocol's client operations by
the names the protocol registers, and a type checker holds every protocol to the declared members."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedray.core.protocol import OneStep, RoundBlock, SampledRounds
from fedray.plan import make_plan
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

ROOT = Path(__file__).resolve().parents[2]
# One group holding every unit: ordinary rounds and blocks of rounds per call both run.
JOB = ["data=synthetic", "data.spec.num_silos=7", "data.spec.samples_per_silo=40", "data.spec.dim=4",
       "num_rounds=9", "algorithm.batch_size=10", "privacy.epsilon=8.0", "privacy.enforce_budget=false",
       "evaluate_every=3", "progress=false", "participation=poisson", "participation.probability=0.5"]


def _run(*overrides: str):
    plan = make_plan(compose(*JOB, *overrides))
    return run(plan, inline=True, groups=InlineGroups(plan))


def test_operations_under_names_of_the_protocols_choosing_run_bit_identically(monkeypatch):
    """The runtime looks each spec's operation up in ``operations``: renamed handlers (as a Flower
    app names its own) give the same run, blocks of rounds included."""
    reference = _run()
    configure, rounds, round_in = SampledRounds.configure, SampledRounds.rounds, SampledRounds.round_in
    monkeypatch.setattr(SampledRounds, "operations", property(
        lambda self: {"train": OneStep(self.client_step), "train_many": RoundBlock(self.client_rounds)}))
    monkeypatch.setattr(SampledRounds, "configure",
                        lambda self, state, keys: replace(configure(self, state, keys), operation="train"))
    monkeypatch.setattr(SampledRounds, "rounds",
                        lambda self, state, keys, steps: replace(rounds(self, state, keys, steps), operation="train_many"))
    monkeypatch.setattr(SampledRounds, "round_in", lambda self, block, i, state: (
        lambda spec, keys: (replace(spec, operation="train"), keys))(*round_in(self, block, i, state)))
    renamed = _run()
    assert np.array_equal(renamed.last_iterate, reference.last_iterate)
    assert [sorted(h) for h in renamed.history] == [sorted(h) for h in reference.history]
    for a, b in zip(renamed.history, reference.history):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_an_unregistered_operation_is_refused_by_name(monkeypatch):
    configure = SampledRounds.configure
    monkeypatch.setattr(SampledRounds, "configure",
                        lambda self, state, keys: replace(configure(self, state, keys), operation="evaluate_only"))
    with pytest.raises(ValueError, match=r"RoundSpec.operation='evaluate_only' is not registered by SampledRounds; "
                                         r"it registers \['client_rounds', 'client_step'\]"):
        _run("runtime.rounds_per_call=1")       # every round from configure


def _mypy_errors(module) -> tuple[list[str], str]:
    """mypy's error lines on ``module`` under the project's configuration, and its whole report."""
    found = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(module)],
                           cwd=ROOT, capture_output=True, text=True)
    return [line for line in found.stdout.splitlines() if ": error:" in line], found.stdout


@pytest.mark.slow
def test_the_type_checker_refuses_a_protocol_missing_a_declared_member(tmp_path):
    """mypy (CI runs it over every protocol) flags a class lacking a member the runtime reads, and
    accepts a built-in shape."""
    module = tmp_path / "incomplete_protocol.py"
    module.write_text(textwrap.dedent("""
        from fedray.core.protocol import RoundProtocol, SampledRounds, SequentialSteps, StepBlocks


        def runs(protocol: RoundProtocol) -> None: ...


        def blocks(protocol: StepBlocks) -> None: ...


        class OnlyInit:
            # a protocol written without the contract: no configure, aggregate, operations, ...

            def init(self) -> None: ...


        def check(sampled: SampledRounds, sequential: SequentialSteps) -> None:
            runs(sampled)
            blocks(sequential)
            runs(OnlyInit())
            blocks(sampled)       # not a StepBlocks: no step_units, one_step
    """))
    errors, report = _mypy_errors(module)
    assert len(errors) == 2, report
    assert '"OnlyInit"' in errors[0] and '"RoundProtocol"' in errors[0]
    assert '"SampledRounds"' in errors[1] and '"StepBlocks"' in errors[1]


@pytest.mark.slow
def test_the_type_checker_refuses_a_server_half_without_its_rounds_keys(tmp_path):
    """The declared algorithm contracts hold the server half to the keys it is handed: a
    ``server_step`` without ``keys`` is refused for the round and the step shapes, one with them
    accepted (each protocol package checks its classes this way)."""
    module = tmp_path / "keyless_server.py"
    module.write_text(textwrap.dedent("""
        from typing import Any

        import numpy as np

        from fedray.core.protocol import RoundKeys, RoundsAlgorithm, StepsAlgorithm


        class Halves:
            def init(self, params0: np.ndarray, keys: RoundKeys) -> Any: ...
            def broadcast(self, state: Any) -> Any: ...
            def output(self, state: Any) -> dict[str, np.ndarray]:
                return {}

            def silo_step(self, broadcast: Any, shard: Any, draws: Any) -> np.ndarray:
                return np.zeros(1)


        class KeyedRounds(Halves):
            def server_step(self, state: Any, values: np.ndarray, mask: np.ndarray, keys: RoundKeys) -> Any: ...


        class KeylessRounds(Halves):
            def server_step(self, state: Any, values: np.ndarray, mask: np.ndarray) -> Any: ...


        class KeylessSteps(Halves):
            def server_step(self, state: Any, summed: np.ndarray) -> Any: ...


        keyed: type[RoundsAlgorithm] = KeyedRounds
        keyless: type[RoundsAlgorithm] = KeylessRounds
        steps: type[StepsAlgorithm] = KeylessSteps
    """))
    errors, report = _mypy_errors(module)
    assert len(errors) == 2, report
    assert '"type[KeylessRounds]"' in errors[0] and '"type[RoundsAlgorithm]"' in errors[0]
    assert '"type[KeylessSteps]"' in errors[1] and '"type[StepsAlgorithm]"' in errors[1]
