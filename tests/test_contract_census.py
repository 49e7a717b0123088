"""Issue 42's census (``experiments/contract_census.py``) held to its bounds, and the census's own
detectors shown to catch each regression on a small planted tree."""

from __future__ import annotations

import shutil
import textwrap

import pytest

from experiments import contract_census as census
from tests.conftest import REPO


def test_the_contract_is_the_declared_one_on_this_tree():
    found = census.contract()
    assert found["undeclared"] == [] and 0 < found["used"] <= found["declared"]
    assert census.literal_capability_reads() == []
    assert census.operation_branches() == []
    assert census.import_cycles() == []
    assert census.hydra_internal_imports() == []
    assert census.driver_loop_lines() <= 60
    lines, configs = census.example_lines()
    assert lines <= 150 and configs == 1


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A tree with fedray/core as it is, and a runtime, planner and experiments that break each rule."""
    shutil.copytree(REPO / "fedray" / "core", tmp_path / "fedray" / "core")
    (tmp_path / "fedray" / "__init__.py").write_text("")
    runtime = tmp_path / "fedray" / "runtime"
    runtime.mkdir()
    (runtime / "__init__.py").write_text("")
    loop = "\n".join(f"    x{i} = {i}" for i in range(70))
    (runtime / "driver.py").write_text(textwrap.dedent('''\
        def _rounds(plan, protocol, spec):
            if getattr(protocol, "masked_client", False):
                protocol.secret_flag()
            if spec.operation == "client_block":
                pass
        ''') + loop + "\n")
    (tmp_path / "fedray" / "plan.py").write_text("import hydra._internal.utils\n\ndef f(recipe):\n    return recipe.clip_grid\n")
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "a.py").write_text("def f():\n    from experiments import b\n")
    (experiments / "b.py").write_text("from experiments.a import f\n")
    monkeypatch.setattr(census, "ROOT", tmp_path)
    return tmp_path


def test_the_census_catches_each_regression(planted):
    assert census.contract()["undeclared"] == ["protocol.secret_flag"]     # recipe.clip_grid is declared
    assert census.literal_capability_reads() == ["fedray/runtime/driver.py:2 getattr masked_client"]
    assert census.operation_branches() == ["fedray/runtime/driver.py:4"]
    assert census.import_cycles() == [["experiments.a", "experiments.b"]]
    assert census.hydra_internal_imports() == ["fedray.plan:1"]
    assert census.driver_loop_lines() == 75
