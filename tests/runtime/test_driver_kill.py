"""A driver killed with SIGKILL (issue 17 item 2) and restarted through the command line with
``runtime.resume=true`` ends bit-identical to an uninterrupted run, in the same MLflow run (not a
second one), with every round's metrics logged exactly once and a ledger that charged every round
exactly once. Both command lines join the test run's shared local Ray (``runtime.address``): what
is killed is the driver's process, and the resume reads only the checkpoint and the MLflow store,
whichever Ray the killed driver used (its actors end with its job)."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from fedray.plan import make_plan
from fedray.runtime.driver import run
from tests.conftest import REPO, compose, mlflow_store, shared_ray_address
from tests.runtime.test_checkpoint import BASE

pytestmark = pytest.mark.slow

ROUNDS, EVERY, KILL_AFTER = 200, 4, 30
JOB = [*[o for o in BASE if not o.startswith("runtime.checkpoint_every")], f"num_rounds={ROUNDS}",
       f"runtime.checkpoint_every={EVERY}"]


def _command(tmp_path, address: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "fedray", *JOB, f"runtime.checkpoint_path={tmp_path}/run.ckpt",
            f"tracking.uri={mlflow_store(tmp_path)}", f"tracking.artifact_location={tmp_path}/artifacts",
            "tracking.log_every=1", f"hydra.run.dir={tmp_path}/out", f"runtime.address={address}", *extra]


def _next_round(path) -> int:
    try:
        with open(path, "rb") as f:
            return pickle.load(f).next_round
    except (FileNotFoundError, EOFError, pickle.UnpicklingError):
        return 0


@pytest.mark.long
def test_a_killed_driver_resumes_into_the_same_run_bit_identical(tmp_path, ray_local, monkeypatch):
    address = shared_ray_address(ray_local, monkeypatch)
    reference_path = tmp_path / "reference.ckpt"
    reference = run(make_plan(compose(*JOB, f"runtime.checkpoint_path={reference_path}")), inline=True)

    killed = subprocess.Popen(_command(tmp_path, address), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while _next_round(tmp_path / "run.ckpt") < KILL_AFTER and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.read()[-3000:]
    killed_at = _next_round(tmp_path / "run.ckpt")
    assert KILL_AFTER <= killed_at < ROUNDS

    client = MlflowClient(tracking_uri=mlflow_store(tmp_path))
    experiment = client.get_experiment_by_name("fedray").experiment_id
    (before,) = client.search_runs([experiment])
    assert before.info.status == "RUNNING"        # SIGKILL leaves it so; the resume takes it over

    resumed = subprocess.run(_command(tmp_path, address, "runtime.resume=true"), cwd=REPO, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    (after,) = client.search_runs([experiment])
    assert after.info.run_id == before.info.run_id and after.info.status == "FINISHED"
    assert int(after.data.tags["resumed_at_rounds"]) == killed_at
    for key in ("train_loss", "epsilon_max", "participants"):
        history = client.get_metric_history(after.info.run_id, key)
        assert [m.step for m in history] == list(range(ROUNDS)), key      # each round once
        assert [m.value for m in history] == [float(h[key][0]) for h in reference.history], key
    assert after.data.metrics["final_train_loss"] == float(reference.final["train_loss"][0])
    assert after.data.metrics["epsilon_spent_max"] == float(reference.epsilon_spent.max())

    with open(tmp_path / "run.ckpt", "rb") as f:
        finished = pickle.load(f)
    with open(reference_path, "rb") as f:
        expected = pickle.load(f)
    assert finished.next_round == expected.next_round == ROUNDS
    assert np.array_equal(finished.ledger["counts"], expected.ledger["counts"])      # no round charged twice or never
    assert all(np.array_equal(a, b) for a, b in zip(finished.state, expected.state))
