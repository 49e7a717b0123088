"""The default sweeper composes every swept value before the first job, not every job."""

import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

import hydra_plugins.fedray_launcher.covering_sweeper as covering

REPO = Path(__file__).resolve().parents[1]


class RecordingLoader:
    def __init__(self):
        self.composed = []

    def load_sweep_config(self, master_config, sweep_overrides):
        self.composed.append(tuple(sweep_overrides))


def test_each_override_is_composed_once_before_any_job():
    # Hydra's plugin scan re-executes plugin modules in place (new class objects, the base class
    # too), so the class is looked up now, not at import.
    sweeper = covering.CoveringSweeper(max_batch_size=None)
    sweeper.config, sweeper.hydra_context = object(), type("Context", (), {"config_loader": RecordingLoader()})()
    grid = [(f"trial={t}", f"algorithm={a}") for t in range(20) for a in ("x", "y")]
    sweeper.validate_batch_is_legal(grid[:7])
    sweeper.validate_batch_is_legal(grid[7:])          # a later batch checks only what is new
    composed = sweeper.hydra_context.config_loader.composed
    assert len(composed) == 21                           # 20 trials + 2 algorithms - 1, not 40
    assert set().union(*composed) == set().union(*grid)


def test_a_bad_value_anywhere_in_the_grid_stops_the_sweep_before_its_first_job(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fedray", "-m", "experiment=isrl_dp_convex", "trial=0,1,2",
         "algorithm=isrl_dp_mb_sgd,no_such_algorithm", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
         f"hydra.sweep.dir={tmp_path}/multirun"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert proc.returncode != 0
    assert "no_such_algorithm" in proc.stderr
    assert "Started a local Ray instance" not in proc.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("fedray").experiment_id])
    assert [(r.data.tags.get("sweep"), r.info.status) for r in runs] == [("parent", "FAILED")]     # no job ran
