"""fedray's public Python API: compose a config (`config`), plan it (`make_plan`: every check
before Ray starts), run it (`run`) or several (`run_sweep`), in the same terms as the command line.

Examples
--------
A run of ISRL-DP minibatch SGD on a small synthetic federation, in this process:

>>> import fedray
>>> config = fedray.config(["data=synthetic", "participation.silos_per_round=5", "num_rounds=5"])
>>> plan = fedray.make_plan(config)
>>> plan.privacy.summary().split(":")[0]
'isrl_dp'
>>> run = fedray.run(plan, inline=True)
>>> sorted(run.outputs)                          # the released models: last iterate and average
['avg', 'last']
>>> len(run.history), run.statement["unit"]
(5, 'record of one silo')
>>> bool(run.epsilon_spent.max() <= plan.privacy.target_epsilon.max())
True

A bad value is refused by `make_plan`, before any Ray start, naming the key:

>>> fedray.make_plan(["data=synthetic", "participation.silos_per_round=50"])
Traceback (most recent call last):
...
fedray.errors.ConfigError: participation.silos_per_round must be an integer in [1, 10] (num_silos); got 50
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from omegaconf import DictConfig

from fedray.plan import Plan
from fedray.plan import make_plan as plan_config
from fedray.runtime.driver import RunResult


def _override_value(value) -> str:
    """``value`` in Hydra's override grammar, as a user would type it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_override_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str) and not re.fullmatch(r"[\w./+-]+", value):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


def _as_overrides(values: Mapping, prefix: str = "") -> list[str]:
    """Dotted ``key=value`` overrides for a nested mapping (``{"privacy": {"epsilon": 1}}``); a
    group's option is a string value (``{"data": "synthetic"}``)."""
    overrides = []
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and "_target_" not in value:
            overrides += _as_overrides(value, f"{dotted}.")
        else:
            overrides.append(f"{dotted}={_override_value(value)}")
    return overrides


def config(overrides: Sequence[str] | Mapping = ()) -> DictConfig:
    """The config ``python -m fedray <overrides>`` would run.

    Parameters
    ----------
    overrides
        Command-line overrides (``["experiment=isrl_dp_convex", "privacy.epsilon=1"]``), or a
        nested mapping of values (``{"experiment": "isrl_dp_convex", "privacy": {"epsilon": 1}}``).
    """
    from fedray.compose import compose_config

    if isinstance(overrides, Mapping):
        overrides = _as_overrides(overrides)
    return compose_config(list(overrides))


def make_plan(config_or_overrides: DictConfig | Sequence[str] | Mapping) -> Plan:
    """Validate a config, build its protocol and privacy plan and check the budget; every error
    (`fedray.errors.ConfigError`, `fedray.errors.BudgetError`) comes here, before Ray starts.
    Takes a composed config or what `config` takes."""
    if not isinstance(config_or_overrides, DictConfig):
        config_or_overrides = config(config_or_overrides)
    return plan_config(config_or_overrides)


@dataclass(frozen=True)
class Run:
    """A finished run: what it released, its metric history, its privacy spend and statement."""

    plan: Plan
    result: RunResult
    run_id: str | None = None            # the MLflow run, when the run was tracked

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        """The released outputs by name, each with a leading replica axis."""
        return self.result.outputs

    @property
    def history(self) -> list[dict]:
        """One dict of per-replica metric arrays per round."""
        return self.result.history

    @property
    def epsilon_spent(self) -> np.ndarray:
        """(replicas, units): the epsilon each unit spent, from the run's ledger."""
        return self.result.epsilon_spent

    @property
    def statement(self) -> dict:
        """The run's privacy statement: trust model, unit, relation, calibration, spend, and what
        lies outside the guarantee."""
        r = self.result
        return self.plan.privacy.statement(r.epsilon_spent, r.diagnostics, r.stopped)


def run(plan: Plan, *, inline: bool = False, track: bool = False, pool=None) -> Run:
    """Run ``plan``: on a private local Ray (or the cluster at ``runtime.address``), or in this
    process with ``inline=True``. With ``track=True`` the run is logged to the plan's MLflow store
    as the command line logs it. ``pool`` (a `fedray.runtime.driver.ActorPool`) keeps the silo
    actors for the next run on the same records."""
    from fedray.runtime.driver import run as run_plan

    if not track:
        return Run(plan, run_plan(plan, inline=inline, pool=pool))
    from fedray.tracking import run_name, tracker_from_config

    tracker = tracker_from_config(plan.tracking, run_name=run_name(plan))
    try:
        tracker.log_plan(plan)
        result = run_plan(plan, tracker=tracker, inline=inline, pool=pool)
    except BaseException:
        tracker.fail()                 # never leave a run RUNNING
        raise
    tracker.finish(plan, result)
    return Run(plan, result, tracker.run_id)


def run_sweep(jobs: Iterable[Sequence[str] | Mapping], *, track: bool = False) -> list[Run]:
    """Run several jobs one after another on one private local Ray (or the Ray this process has
    joined, left joined), reusing the silo actors of jobs on the same records. Every job is
    planned first, so a bad one stops the sweep before Ray starts."""
    from fedray.compose import job_session

    plans = [make_plan(job) for job in jobs]
    with job_session() as pool:
        return [run(p, track=track, pool=pool) for p in plans]
