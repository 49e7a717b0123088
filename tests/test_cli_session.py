"""The command line keeps no hidden state: nothing runs at import, and a sweep's parent run reaches
its jobs as a value (``fedray.sweep.ParentRun`` hands it to ``fedray.cli.Jobs``), never through
the environment. The command lines join the test run's shared local Ray (``runtime.address``): where
the jobs' actors run is not what is tested, and a private Ray would cost each a start."""

import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import REPO, mlflow_store, shared_ray_address

SMALL = ["data=synthetic", "data.spec.num_silos=4", "data.spec.samples_per_silo=40", "data.spec.dim=3",
         "participation.silos_per_round=2", "num_rounds=2", "algorithm.batch_size=8", "progress=false",
         "privacy.enforce_budget=false", "runtime.num_cpus=2"]
LEFTOVER = {"FEDRAY_PARENT_RUN_ID": "not-a-run", "FEDRAY_SWEPT_KEYS": "not.a.key"}   # what the old code read


def test_importing_the_command_line_starts_no_ray_no_actor_pool_and_no_thread():
    probe = (
        "import threading, sys\n"
        "from concurrent.futures import Executor\n"
        "import fedray.__main__, fedray.cli, fedray.tracking, fedray.sweep\n"
        "from fedray.runtime.driver import ActorPool\n"
        "import ray\n"
        "held = [f'{m.__name__}.{k}' for m in (fedray.__main__, fedray.cli, fedray.tracking, fedray.sweep)\n"
        "        for k, v in vars(m).items() if isinstance(v, (ActorPool, Executor))]\n"
        "print(threading.active_count(), ray.is_initialized(), held)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[0] == "1 False []"


def _runs(uri: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    return client.search_runs([client.get_experiment_by_name("fedray").experiment_id])


@pytest.mark.slow
def test_a_single_run_is_no_child_whatever_the_environment_says(tmp_path, ray_local, monkeypatch):
    uri = mlflow_store(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "fedray", *SMALL, f"tracking.uri={uri}", f"hydra.run.dir={tmp_path}/out",
         f"runtime.address={shared_ray_address(ray_local, monkeypatch)}"],
        capture_output=True, text=True, cwd=REPO, timeout=300, env={**os.environ, **LEFTOVER},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = _runs(uri)
    assert run.info.status == "FINISHED"
    assert "mlflow.parentRunId" not in run.data.tags and "overrides" not in run.data.tags


@pytest.mark.slow
def test_a_sweeps_jobs_are_children_of_its_parent_whatever_the_environment_says(tmp_path, ray_local, monkeypatch):
    uri = mlflow_store(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "fedray", "-m", *SMALL, "algorithm.step_size=0.1,0.3", f"tracking.uri={uri}",
         f"hydra.sweep.dir={tmp_path}/multirun", f"runtime.address={shared_ray_address(ray_local, monkeypatch)}"],
        capture_output=True, text=True, cwd=REPO, timeout=300, env={**os.environ, **LEFTOVER},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _runs(uri)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    children = [r for r in runs if r is not parent]
    assert len(children) == 2 and parent.data.metrics["jobs"] == 2
    assert all(r.data.tags.get("mlflow.parentRunId") == parent.info.run_id for r in children)
    assert all(r.info.status == "FINISHED" for r in children)        # the last one's finish was waited for
    assert sorted(r.info.run_name.split(" · ")[0] for r in children) == ["step_size=0.1", "step_size=0.3"]
