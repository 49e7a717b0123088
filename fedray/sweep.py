"""Hydra multirun sweeps as one MLflow parent run with a child run per job.

``ParentRun`` is a Hydra callback (``hydra.callbacks`` in an experiment config). On multirun
start it creates the parent run in the store and experiment of ``tracking`` and tags it with the
sweep's overrides and directory. At each job's start it hands the ``Sweep`` (the parent's id and
the swept keys) to the job's task function, if that is a ``SweepMember`` (the command line's
``fedray.cli.Jobs``), which files the job's run under the parent, so the MLflow UI shows the
sweep as one expandable row. The hand-over is a value, not the environment: wherever Hydra runs a
job (this process, or a job worker of the ray_jobs launcher, which receives the callbacks and a
task function of its own when it starts), the job's callback holds the parent. On multirun end the parent is
closed.
"""

from __future__ import annotations

import atexit
import sys
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from omegaconf import DictConfig, OmegaConf


@dataclass(frozen=True)
class Sweep:
    """The sweep a job belongs to: its MLflow parent run and the keys it varies (for run names)."""

    parent_run_id: str
    swept_keys: tuple[str, ...] = ()


@runtime_checkable
class SweepMember(Protocol):
    """A task function that runs a sweep's jobs: ``ParentRun`` hands it the sweep at each job's start
    and waits for its writing at the sweep's end."""

    def join_sweep(self, sweep: Sweep) -> None: ...

    def wait_written(self) -> None: ...

    def launched(self) -> Any:
        """A new task function for a launcher's long-lived job worker (a Ray actor) to run its jobs
        with: it keeps what it keeps between jobs (silo actors, the writing thread) until ``close``."""
        ...

    def close(self) -> None:
        """Wait for the runs' writing (its first failure is raised), then end what was kept."""
        ...


def swept_overrides(overrides: list[str]) -> list[str]:
    """The overrides of a multirun command line that sweep (``key=a,b``, ``range(...)``, ...)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return [o.input_line for o in parsed if o.is_sweep_override()]


def _grid_keys(config: DictConfig) -> list[str]:
    """The keys of the sweeper's own grid: ``params``, and each of fedray's ``grids``' keys."""
    sweeper = config.hydra.sweeper
    keys = [str(key) for key in (sweeper.get("params") or {})]
    for grid in sweeper.get("grids") or ():
        keys += [str(key) for key in grid if str(key) not in keys]
    return keys


def swept_keys(config: DictConfig) -> list[str]:
    """The keys a sweep varies: its sweeping command-line overrides and its sweeper's grid."""
    keys = [line.split("=", 1)[0].lstrip("+~") for line in swept_overrides(config.hydra.overrides.task)]
    return keys + [key for key in _grid_keys(config) if key not in keys]


def sweep_name(config: DictConfig, name: str | None = None) -> str:
    """What a sweep is, for its parent run: the experiment (or ``name``) and what it varies, e.g.
    ``isrl_dp_convex: privacy.epsilon=1,3`` (the sweeper's own grid by its keys)."""
    choices = config.hydra.runtime.choices
    what = name or choices.get("experiment") or choices.get("algorithm") or "fedray"
    swept = swept_overrides(config.hydra.overrides.task)
    swept += [key for key in _grid_keys(config) if not any(line.startswith(f"{key}=") for line in swept)]
    text = f"{what}: {' '.join(swept)}" if swept else what
    return text if len(text) <= 120 else text[:119] + "…"


def job_label(overrides: list[str], keys: tuple[str, ...] | list[str]) -> str:
    """In a sweep's job, the values of the keys the sweep varies (``keys``), each as its last name
    part: ``epsilon=1 step_size=0.3``; empty outside a sweep (no keys)."""
    values = dict(line.lstrip("+~").split("=", 1) for line in overrides if "=" in line)
    return " ".join(f"{key.rsplit('.', 1)[-1].rsplit('/', 1)[-1]}={values[key]}" for key in keys if key in values)


try:  # Hydra is a dependency of the CLI; keep the module importable without it for the report.
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover
    Callback = object  # type: ignore[assignment,misc]


class ParentRun(Callback):
    """Create the sweep's MLflow parent run on multirun start and close it at the end.

    Parameters
    ----------
    name:
        What the parent's run name starts with (e.g. ``e1_mnist``); by default the experiment
        preset (or the algorithm). The run name goes on with what the sweep varies
        (``isrl_dp_convex: privacy.epsilon=1,3``), so sweeps look different in the runs table.
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._client = None
        self._run_id: str | None = None
        self._sweep: Sweep | None = None
        self._members: list[SweepMember] = []      # the task functions of this process's jobs

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from mlflow.entities import RunTag

        from fedray.errors import ConfigError
        from fedray.preflight import tracking_store
        from fedray.tracking import MlflowTracker

        tracking = OmegaConf.to_container(config.tracking, resolve=True)
        try:
            tracking_store(tracking["uri"])
        except ConfigError as err:      # Hydra turns a callback's exception into a warning: exit here
            print(f"error: {err}", flush=True)
            raise SystemExit(2) from None
        # The tracker creates the experiment if needed; the run it opens is the parent.
        tracker = MlflowTracker(uri=tracking["uri"], experiment_name=tracking["experiment_name"],
                                artifact_location=tracking.get("artifact_location"))
        name = sweep_name(config, self.name)
        tracker.start_run(name)
        overrides = " ".join(config.hydra.overrides.task)
        tags = {"sweep": "parent", "sweep.name": name, "sweep.overrides": overrides[:5000],
                "sweep.dir": str(config.hydra.sweep.dir), "sweep.command": " ".join(sys.argv)[:5000]}
        tracker.client.log_batch(tracker.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        self._client, self._run_id = tracker.client, tracker.run_id
        self._where = (tracker.uri, tracker.experiment_id)
        self._sweep = Sweep(tracker.run_id, tuple(swept_keys(config)))
        atexit.register(self._abandoned)

    def on_job_start(self, config: DictConfig, *, task_function: Any = None, **kwargs: Any) -> None:
        """Hand the sweep to the job's task function (in the job's process: the ray_jobs launcher
        runs this callback, pickled with the parent's id, in the job's Ray worker)."""
        if self._sweep is None or not isinstance(task_function, SweepMember):
            return
        task_function.join_sweep(self._sweep)
        if not any(member is task_function for member in self._members):
            self._members.append(task_function)

    def _abandoned(self) -> None:
        """At exit without ``on_multirun_end`` (the sweep aborted: a launcher error, Ctrl-C): the
        parent ends FAILED rather than RUNNING."""
        if self._run_id is not None:
            self._client.set_terminated(self._run_id, "FAILED")
            self._run_id = None

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._run_id is None:
            return
        for member in self._members:
            member.wait_written()   # the last job's run (a failure leaves the parent to _abandoned: FAILED)
        children = self._client.search_runs(
            [self._client.get_run(self._run_id).info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self._run_id}'", max_results=50000)
        failed = sum(r.info.status != "FINISHED" for r in children)
        self._client.log_metric(self._run_id, "jobs", len(children))
        self._client.log_metric(self._run_id, "jobs_failed", failed)
        if children:
            table = comparison(children)
            self._log_comparison(table)
            print(markdown(table))
        self._client.set_terminated(self._run_id, "FINISHED" if failed == 0 else "FAILED")
        from fedray.tracking import browse_hint

        uri, experiment_id = self._where
        print(f"MLflow parent run {self._run_id} ({len(children)} jobs) in {uri}; "
              f"{browse_hint(uri, experiment_id, self._run_id)}")
        self._run_id, self._sweep, self._members = None, None, []
        if failed:              # the sweep's exit status says so (Hydra turns exceptions here into warnings)
            print(f"error: {failed} of {len(children)} jobs of the sweep failed or were refused (the table above)",
                  flush=True)
            raise SystemExit(1)

    def _log_comparison(self, table) -> None:
        """The parent's artifacts: the table as CSV and Markdown, and the final test error of every
        finished job against the first swept override."""
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            table.to_csv(folder / "sweep_table.csv", index=False)
            (folder / "sweep_table.md").write_text(markdown(table) + "\n")
            swept = _swept_values(table)
            if swept is not None:
                import matplotlib

                matplotlib.use("Agg")
                import matplotlib.pyplot as plt

                key, values = swept
                done = table["status"] == "FINISHED"
                fig, ax = plt.subplots(figsize=(6, 4))
                ax.plot([v for v, d in zip(values, done) if d], table.loc[done, "final_test_error"], "o")
                ax.set(xlabel=key, ylabel="final test error (best replica)", title="sweep: final test error per job")
                fig.tight_layout()
                fig.savefig(folder / "sweep_figure.png", dpi=120)
                plt.close(fig)
            self._client.log_artifacts(self._run_id, str(folder))


# The final metrics the comparison shows, and how a many-replica job's replicas (``/replica_p``,
# or past tracking.replica_curves their ``/min`` and ``/max``) are summarised: its best error and
# loss, its largest spend.
COMPARED = {"final_test_error": min, "final_train_loss": min, "epsilon_spent_max": max, "wall_time_s": max}


def _summary(metrics: dict, key: str) -> float:
    if key in metrics:
        return metrics[key]
    reduce = COMPARED[key]
    reduced = f"{key}/{reduce.__name__}"
    if reduced in metrics:
        return metrics[reduced]
    replicas = [value for name, value in metrics.items() if name.startswith(f"{key}/replica_")]
    return reduce(replicas) if replicas else float("nan")


def comparison(children: list):
    """One row per job, in start order: its name, status, overrides and final metrics."""
    import pandas as pd

    rows = [{"run": r.info.run_name, "status": r.info.status, "overrides": r.data.tags.get("overrides", ""),
             **{key: _summary(r.data.metrics, key) for key in COMPARED}}
            for r in sorted(children, key=lambda r: r.info.start_time)]
    return pd.DataFrame(rows)


def _swept_values(table) -> tuple[str, list] | None:
    """The first override that varies across the jobs, with each job's value."""
    parsed = [dict(item.split("=", 1) for item in text.split() if "=" in item) for text in table["overrides"]]
    for key in parsed[0] if parsed else ():
        values = [job.get(key) for job in parsed]
        if len(set(values)) > 1:
            try:                        # numbers on a numeric axis, in order (matplotlib would treat
                return key, [float(v) for v in values]   # strings as categories in job order)
            except (TypeError, ValueError):
                return key, values
    return None


def markdown(table) -> str:
    """The table as Markdown, numbers to 4 significant digits."""
    cells = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in table.itertuples(index=False)]
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])
