"""The main job end to end: `python -m fedray experiment=isrl_dp_convex` writes an MLflow run."""

import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import REPO, mlflow_store, shared_ray_address


@pytest.mark.long
def test_main_job_writes_an_mlflow_run_with_round_metrics(tmp_path):
    """The fast tier's end-to-end run: the README's first command (6 rounds) through the CLI, Ray
    and MLflow; catches a main job that fails, logs no round metrics or overspends its budget."""
    uri = mlflow_store(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "fedray", "experiment=isrl_dp_convex", "num_rounds=6", "progress=false",
         f"tracking.uri={uri}", f"tracking.artifact_location={tmp_path}/artifacts",
         "tracking.log_every=4", f"hydra.run.dir={tmp_path}/out", "runtime.num_cpus=2"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow ui --workers 1 --backend-store-uri" in proc.stdout
    assert "Token authentication" not in proc.stderr        # Ray's warning that asks nothing of the user
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("fedray").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["algorithm"] == "isrl_dp_mb_sgd"
    assert run.data.tags["trust_model"] == "isrl_dp"
    assert run.data.tags["dataset"] == "mnist"
    assert run.data.params["participation.silos_per_round"] == "12"
    assert run.data.params["privacy.epsilon"] == "3.0"
    for key in ("train_loss", "test_error", "epsilon_max", "epsilon_mean", "noise_std_min", "noise_std_max",
                "noise_std_added_min", "noise_std_added_max", "participants"):
        history = client.get_metric_history(run.info.run_id, key)
        assert [m.step for m in history] == list(range(6)), key
    eps = [m.value for m in client.get_metric_history(run.info.run_id, "epsilon_max")]
    assert all(a <= b for a, b in zip(eps, eps[1:])) and 0 < eps[-1] < 3.0
    assert 0 < run.data.metrics["final_test_error"] < 0.5
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "summary.json", "loss_and_epsilon.png", "privacy_statement.json", "output.npz",
            "privacy_event.json"} <= artifacts
    assert run.data.tags["diagnostic_metrics"] == "test_error,test_error_avg,train_loss,train_loss_avg"
    assert "largest feature norm" not in run.data.tags["privacy_statement"]        # a fixed clip
    assert "outside the guarantee: the PCA basis" in run.data.tags["privacy_statement"]
    assert "simulation (the driver holds the noise seed)" in run.data.tags["privacy_statement"]
    assert run.data.tags["replicas.common_random_numbers"] == "false"
    assert "privacy: isrl_dp: unit = record of one silo" in proc.stdout


@pytest.mark.slow
def test_an_unreachable_address_fails_fast_in_one_line_and_marks_the_run_failed(tmp_path):
    import socket
    import time

    with socket.socket() as probe:                  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri = mlflow_store(tmp_path)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "fedray", "experiment=isrl_dp_convex", "progress=false", f"tracking.uri={uri}",
         f"tracking.artifact_location={tmp_path}/artifacts", f"runtime.address=127.0.0.1:{port}",
         "runtime.connect_timeout=3"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )
    assert proc.returncode == 1 and time.monotonic() - started < 60
    lines = [line for line in proc.stdout.splitlines() if line.startswith("error:")]
    assert lines == [f"error: runtime.address=127.0.0.1:{port}: no Ray cluster answered within 3 s "
                     "(ConnectionRefusedError: [Errno 111] Connection refused)"], proc.stdout + proc.stderr[-2000:]
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("fedray").experiment_id])
    assert run.info.status == "FAILED"


@pytest.mark.slow
def test_a_sweep_is_a_parent_run_and_a_refused_job_is_a_failed_child_that_does_not_stop_it(tmp_path, ray_local,
                                                                                           monkeypatch):
    """The sweep joins the test run's shared Ray (a private one is the fast tier's main job)."""
    uri = mlflow_store(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "fedray", "-m", "experiment=isrl_dp_convex", "num_rounds=2", "progress=false",
         "privacy.epsilon=-1,3", f"tracking.uri={uri}", f"tracking.artifact_location={tmp_path}/artifacts",
         f"hydra.sweep.dir={tmp_path}/multirun", "runtime.num_cpus=2",
         f"runtime.address={shared_ray_address(ray_local, monkeypatch)}"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]      # a refused job fails the sweep, after its table
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines[-1] == "error: 1 of 2 jobs of the sweep failed or were refused (the table above)"
    table = [i for i, line in enumerate(lines) if line.startswith("| run | status | overrides |")]
    assert len(table) == 1 and table[0] < len(lines) - 4        # the table (2 rows), then the parent's line
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("fedray").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    children = {r.info.status: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(children) == {"FAILED", "FINISHED"}
    assert "privacy.epsilon must be a positive number" in children["FAILED"].data.tags["refused"]
    assert "privacy.epsilon=-1" in children["FAILED"].data.tags["overrides"]
    assert children["FINISHED"].info.run_name == "epsilon=3 · isrl_dp_mb_sgd eps=3 M=12 mnist t0"
    assert parent.info.run_name == "isrl_dp_convex: privacy.epsilon=-1,3"
    assert f"MLflow parent run {parent.info.run_id} (2 jobs)" in proc.stdout
    assert parent.data.metrics["jobs"] == 2 and parent.data.metrics["jobs_failed"] == 1
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"sweep_table.csv", "sweep_table.md", "sweep_figure.png"} <= artifacts
    import pandas as pd

    table = pd.read_csv(client.download_artifacts(parent.info.run_id, "sweep_table.csv", str(tmp_path)))
    assert table["status"].tolist() == ["FAILED", "FINISHED"]
    assert table["final_test_error"].isna().tolist() == [True, False] and 0 < table["final_test_error"][1] < 0.5
    assert "| run | status | overrides | final_test_error |" in proc.stdout
