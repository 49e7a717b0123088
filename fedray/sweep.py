"""Hydra multirun sweeps as one MLflow parent run with a child run per job.

``ParentRun`` is a Hydra callback (``hydra.callbacks`` in an experiment config). On multirun
start it creates the parent run in the store and experiment of ``tracking``, tags it with the
sweep's overrides and directory, and exports its id in ``FEDRAY_PARENT_RUN_ID``; every job of
the sweep (in this process with Hydra's basic launcher, or a child process of it) reads the
variable in ``fedray.cli`` and files its run under the parent, so the MLflow UI shows the sweep
as one expandable row. On multirun end the parent is closed and the variable removed.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

PARENT_ENV = "FEDRAY_PARENT_RUN_ID"


def parent_run_id() -> str | None:
    """The parent run id of the sweep this job belongs to, if any."""
    return os.environ.get(PARENT_ENV) or None


try:  # Hydra is a dependency of the CLI; keep the module importable without it for the report.
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover
    Callback = object  # type: ignore[assignment,misc]


class ParentRun(Callback):
    """Create the sweep's MLflow parent run on multirun start and close it at the end.

    Parameters
    ----------
    name:
        Run name of the parent (the experiment config's name, e.g. ``e1_mnist``).
    """

    def __init__(self, name: str = "sweep") -> None:
        self.name = name
        self._client = None
        self._run_id: str | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from mlflow.entities import RunTag

        from fedray.tracking import MlflowTracker

        tracking = OmegaConf.to_container(config.tracking, resolve=True)
        # The tracker creates the experiment if needed; the run it opens is the parent.
        tracker = MlflowTracker(uri=tracking["uri"], experiment_name=tracking["experiment_name"],
                                artifact_location=tracking.get("artifact_location"))
        tracker.start_run(self.name)
        overrides = " ".join(config.hydra.overrides.task)
        tags = {"sweep": "parent", "sweep.name": self.name, "sweep.overrides": overrides[:5000],
                "sweep.dir": str(config.hydra.sweep.dir), "sweep.command": " ".join(sys.argv)[:5000]}
        tracker.client.log_batch(tracker.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        self._client, self._run_id = tracker.client, tracker.run_id
        os.environ[PARENT_ENV] = tracker.run_id

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._run_id is None:
            return
        children = self._client.search_runs(
            [self._client.get_run(self._run_id).info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self._run_id}'", max_results=50000)
        failed = sum(r.info.status != "FINISHED" for r in children)
        self._client.log_metric(self._run_id, "jobs", len(children))
        self._client.log_metric(self._run_id, "jobs_failed", failed)
        self._client.set_terminated(self._run_id, "FINISHED" if failed == 0 else "FAILED")
        os.environ.pop(PARENT_ENV, None)
        self._run_id = None
