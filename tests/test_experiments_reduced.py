"""E1-E3 end to end at toy size: a Hydra multirun through `python -m fedray -m` writes one MLflow
parent run with a child per job, and the report command (``experiments.report``'s ``main`` with the
command's arguments, in this process: a subprocess would only add about 4.5 s of imports each) turns
the store into the figure, the CSVs and the claims table. The three sweeps run concurrently to keep
the file short; they join the test run's shared local Ray (``runtime.address``) and write into
stores whose tables are already made, instead of each starting a Ray of its own and migrating a
fresh schema on two cores at once (a private Ray and a fresh store are the main job's and the
concurrent writers' tests)."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import REPO, mlflow_store, shared_ray_address

pytestmark = pytest.mark.slow

TINY = ["num_rounds=3", "repetitions=2", "runtime.num_cpus=2", "algorithm.step_size=[0.01,0.1]"]
SWEEPS = {
    # E1 carries two budgets as replicas (the experiments' grid path), E2 two clips; E3 one budget per job.
    "e1_mnist": ["algorithm=isrl_dp_mb_sgd,isrl_dp_local_sgd", "privacy.epsilon_grid=[1,3]", "trial=0",
                 "data.spec.images_per_digit=60", "algorithm.batch_size=10"],
    "e2_insurance": ["algorithm=isrl_dp_mb_sgd", "privacy.epsilon_grid=null", "privacy.epsilon=1",
                     "privacy.l2_clip=[100,10000]", "trial=0,1"],
    "e3_obesity": ["algorithm=isrl_dp_mb_sgd", "privacy.epsilon_grid=null", "privacy.epsilon=1", "trial=0,1"],
}
STEPS = {"e1_mnist": "[0.01, 0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 0.1]",
         "e2_insurance": "[0.01, 0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 0.1]"}


def _env(data_dir):
    return {**os.environ, "FEDRAY_DATA_DIR": data_dir or os.environ.get("FEDRAY_DATA_DIR", ""),
            "HYDRA_FULL_ERROR": "1"}


@pytest.mark.long
def test_reduced_sweeps_and_reports(tmp_path, data_dir, ray_local, monkeypatch):
    address = shared_ray_address(ray_local, monkeypatch)
    procs = {}
    for name, overrides in SWEEPS.items():
        store = tmp_path / name
        store.mkdir()
        cmd = [sys.executable, "-m", "fedray", "-m", f"experiment={name}", *TINY, *overrides,
               f"tracking.uri={mlflow_store(store)}", f"tracking.artifact_location={store}/artifacts",
               f"hydra.sweep.dir={store}/multirun", f"runtime.address={address}"]
        procs[name] = subprocess.Popen(cmd, cwd=REPO, env=_env(data_dir), stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:]

    from experiments.report.report import main as report

    for name in SWEEPS:
        store = tmp_path / name
        uri = f"sqlite:///{store}/mlflow.db"
        client = MlflowClient(tracking_uri=uri)
        runs = client.search_runs([client.get_experiment_by_name(name).experiment_id])
        parents = [r for r in runs if r.data.tags.get("sweep") == "parent"]
        children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
        assert len(parents) == 1 and parents[0].info.status == "FINISHED"
        assert len(children) == 2 and {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
        steps = STEPS.get(name, "[0.01, 0.1, 0.01, 0.1]")
        assert all(c.data.params["resolved.step_sizes"] == steps for c in children)

        out = tmp_path / f"{name}-report"
        report([name, "--uri", uri, "--out", str(out), "--cache", str(store / "cache.json")])
        results = pd.read_csv(out / "results.csv")
        selection = pd.read_csv(out / "selection.csv")
        assert {"figure.png", "claims.md"} <= {p.name for p in out.iterdir()}
        assert results["metric_mean"].notna().all() and (results["metric_mean"] > 0).all()
        assert (selection["excess_loss"] >= -1e-9).all()  # F* is the minimum of the logged loss
        assert (open(out / "claims.md").read().splitlines()[0]
                == "| claim | our numbers | holds / does not hold |")
    e2 = pd.read_csv(tmp_path / "e2_insurance-report" / "selection.csv")
    assert e2["clips_tried"].tolist() == [2, 2]   # two clips carried as replicas, selected jointly
    e1 = pd.read_csv(tmp_path / "e1_mnist-report" / "results.csv")
    assert sorted(e1["epsilon"].unique()) == [1.0, 3.0]   # one result per budget of the grid
    e3 = pd.read_csv(tmp_path / "e3_obesity-report" / "results.csv")
    assert e3["trials"].tolist() == [2]


def test_privacy_accounting_table_row_meets_its_target():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "experiments" / "privacy_accounting" / "table.py"
    spec = importlib.util.spec_from_file_location("privacy_accounting_table", path)
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    row = table.row(3.0)
    assert row["K"] == 182
    assert row["eps_pld"] <= 3.0 < row["eps_paper_rdp"]
    assert row["z_pld"] < row["z_rdp"] < row["z_paper"] * 1.01
