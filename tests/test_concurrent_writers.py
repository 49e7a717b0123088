"""Concurrent writers (issue 17 item 3): eight jobs started at once write to one fresh SQLite store,
and to one ``mlflow server``; every run, every round's metrics and every artifact is there
afterwards, equal to what each job computed. A store another writer locks past MLflow's own wait
is retried, not lost."""

from __future__ import annotations

import multiprocessing
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from fedray.plan import make_plan
from fedray.runtime.driver import run
from fedray.tracking import tracker_from_config
from tests.conftest import REPO, compose
from tests.runtime.test_checkpoint import BASE
from tests.test_mlflow_ui import ui

pytestmark = pytest.mark.slow

JOBS, ROUNDS = 8, 40
ARTIFACTS = {"config.json", "summary.json", "privacy_statement.json", "rounds.csv", "loss_and_epsilon.png", "output.npz",
             "privacy_event.json"}


def _plan(uri: str, artifacts: str, seed: int):
    return make_plan(compose(*[o for o in BASE if "checkpoint" not in o], f"num_rounds={ROUNDS}", f"seed={seed}",
                             f"tracking.uri={uri}", f"tracking.artifact_location={artifacts}", "tracking.log_every=4"))


def write(uri: str, artifacts: str, seed: int) -> int:
    """One job's tracking, as the command line does it (the rounds in this process, without Ray);
    returns how many writes found the store busy and were retried."""
    plan = _plan(uri, artifacts, seed)
    tracker = tracker_from_config(plan.tracking, run_name=f"job {seed}")
    tracker.log_plan(plan)
    tracker.finish(plan, run(plan, tracker=tracker, inline=True))
    return tracker.client.retries


def write_at_once(uri: str, artifacts: str) -> None:
    """``JOBS`` processes forked from this one (imports done once, not eight times) write at the same moment, to a
    server once it answers; prints the retries of all of them."""
    import dp_accounting  # noqa: F401  the run's privacy event and statement: 3 s of scipy imports a job
    import matplotlib.pyplot  # noqa: F401  what every job imports, imported before the fork
    import mlflow.store.tracking.rest_store  # noqa: F401
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401

    _plan(uri, artifacts, 0)
    if uri.startswith("http"):
        ui.answers(uri)          # the server was started with this process; both did their imports at once
    with multiprocessing.get_context("fork").Pool(JOBS) as pool:
        print("retries", sum(pool.starmap(write, [(uri, artifacts, seed) for seed in range(JOBS)])))


def _hold_once_runs_start(db, seconds: float, stop: threading.Event) -> None:
    """Another writer: once the first run is in the store, keep it locked for ``seconds`` (MLflow
    itself waits 20 s for a lock)."""
    while not stop.is_set():
        try:
            with sqlite3.connect(db, isolation_level=None, timeout=0.01) as connection:
                if connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0]:
                    connection.execute("BEGIN EXCLUSIVE")
                    stop.wait(seconds)
                    connection.execute("COMMIT")
                    return
        except sqlite3.OperationalError:      # no schema yet, or the store is busy
            pass
        time.sleep(0.01)


@pytest.mark.long
def test_eight_jobs_at_once_lose_nothing_on_sqlite_or_on_a_server(tmp_path):
    """On SQLite the store is fresh (the jobs race to create it) and another writer locks it for
    22 s while they write; one ``mlflow server`` takes eight other jobs. The two stores are written
    at the same time: the SQLite jobs spend most of their time waiting out the lock, the server's
    jobs run meanwhile (one after the other, the test took 48 s, half of it waiting)."""
    with ExitStack() as stack, ThreadPoolExecutor(2) as pool:
        # one mlflow server, started at once; the writers wait for it after their imports
        server = stack.enter_context(ui.serve(f"sqlite:///{tmp_path}/server.db", wait=False))
        stores = {"sqlite": (f"sqlite:///{tmp_path}/sqlite/mlflow.db", True), "server": (server, False)}
        for name in stores:
            (tmp_path / name).mkdir()
        checks = [pool.submit(_write_at_once_and_check, tmp_path / name, uri, locked) for name, (uri, locked) in stores.items()]
        for check in checks:
            check.result()


def _write_at_once_and_check(tmp_path, uri: str, locked: bool) -> None:
    artifacts = str(tmp_path / "artifacts")
    stop = threading.Event()
    holder = threading.Thread(target=_hold_once_runs_start, args=(tmp_path / "mlflow.db", 22.0, stop))
    try:
        if locked:
            holder.start()
        jobs = subprocess.run([sys.executable, "-c", "from tests.test_concurrent_writers import write_at_once; "
                               f"write_at_once({uri!r}, {artifacts!r})"],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
        assert jobs.returncode == 0, jobs.stderr[-3000:]
        if locked:
            assert int(jobs.stdout.split("retries ")[1]) >= 1       # the lock was met, and waited out

        client = MlflowClient(tracking_uri=uri)
        runs = {r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name("fedray").experiment_id])}
        assert sorted(runs) == sorted(f"job {seed}" for seed in range(JOBS))
        for seed in range(JOBS):
            written = runs[f"job {seed}"]
            expected = run(_plan(uri, artifacts, seed), inline=True)
            assert written.info.status == "FINISHED"
            for key in ("train_loss", "test_error", "epsilon_max", "participants"):
                history = client.get_metric_history(written.info.run_id, key)
                assert [m.step for m in history] == list(range(ROUNDS)), key
                assert np.array_equal([m.value for m in history], [h[key][0] for h in expected.history]), key
            assert written.data.metrics["final_train_loss"] == float(expected.final["train_loss"][0])
            assert {a.path for a in client.list_artifacts(written.info.run_id)} == ARTIFACTS
    finally:
        stop.set()
        if holder.is_alive():
            holder.join()
