"""MLflow tracking of a many-replica run: summary curves, per-replica finals, rounds.csv."""

import csv
import json
import threading

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from fedray.plan import make_plan
from fedray.runtime.driver import run
from fedray import tracking
from fedray.tracking import RunWriter, _round_table, tracker_from_config
from tests.conftest import compose, mlflow_store

SMALL = ["data=synthetic", "data.spec.num_silos=4", "data.spec.samples_per_silo=40", "data.spec.dim=3",
         "participation.silos_per_round=2", "num_rounds=3", "algorithm.batch_size=8", "progress=false",
         "privacy.enforce_budget=false", "algorithm.step_size=[0.1,0.5]", "privacy.epsilon_grid=[1,4]"]


def _tracked_run(tmp_path, replica_curves):
    plan = make_plan(compose(*SMALL, f"tracking.uri={mlflow_store(tmp_path, 'm.db')}",
                             f"tracking.artifact_location={tmp_path}/a", f"tracking.replica_curves={replica_curves}"))
    tracker = tracker_from_config(plan.tracking)
    tracker.log_plan(plan)
    result = run(plan, tracker=tracker, inline=True)
    tracker.finish(plan, result)
    return plan, result, MlflowClient(tracking_uri=tracker.uri), tracker.run_id


@pytest.mark.slow
def test_past_the_cap_rounds_and_finals_are_logged_as_min_mean_max_and_every_replica_in_artifacts(tmp_path):
    plan, result, client, run_id = _tracked_run(tmp_path, replica_curves=3)
    metrics = client.get_run(run_id).data.metrics
    assert not any(k.startswith("train_loss/replica_") for k in metrics)
    losses = np.array([h["train_loss"] for h in result.history])
    for name, reduce in (("min", np.min), ("mean", np.mean), ("max", np.max)):
        history = client.get_metric_history(run_id, f"train_loss/{name}")
        np.testing.assert_allclose([m.value for m in history], reduce(losses, axis=1))
    assert not any("/replica_" in k for k in metrics)
    finals = result.final["train_loss"]
    assert [metrics[f"final_train_loss/{name}"] for name in ("min", "mean", "max")] == \
        [finals.min(), finals.mean(), finals.max()]
    assert metrics["wall_time_s"] == result.wall_time
    summary = json.load(open(client.download_artifacts(run_id, "summary.json", str(tmp_path))))
    assert summary["final_train_loss"] == list(finals)
    assert summary["replicas.step_sizes"] == list(plan.step_sizes)
    assert summary["replicas.replica_epsilons"] == list(plan.epsilon_levels)

    rows = list(csv.DictReader(open(client.download_artifacts(run_id, "rounds.csv", str(tmp_path)))))
    assert len(rows) == plan.num_rounds * plan.num_replicas
    np.testing.assert_array_equal([float(r["train_loss"]) for r in rows], losses.reshape(-1))


def test_a_replica_list_too_long_for_a_param_is_named_not_truncated():
    from fedray.tracking import MAX_PARAM_LENGTH, _param_list

    short = [0.5, 1.0]
    assert json.loads(_param_list(short, "step_sizes")) == short
    long = [1e-3 * p for p in range(2000)]
    text = _param_list(long, "step_sizes")
    assert len(text) <= MAX_PARAM_LENGTH and text == "2000 values: replicas.step_sizes in summary.json"


@pytest.mark.slow
def test_under_the_cap_every_replica_has_its_curve(tmp_path):
    _, result, client, run_id = _tracked_run(tmp_path, replica_curves=30)
    history = client.get_metric_history(run_id, "epsilon_max/replica_3")
    assert [m.value for m in history] == [h["epsilon_max"][3] for h in result.history]


def test_runs_are_named_apart_and_log_the_values_used_for_defaults(tmp_path):
    from fedray.tracking import run_name

    plan = make_plan(compose(*SMALL, f"tracking.uri={mlflow_store(tmp_path, 'm.db')}", f"tracking.artifact_location={tmp_path}/a"))
    assert run_name(plan) == "isrl_dp_mb_sgd eps=1,4 M=2 synthetic t0"
    single = make_plan(compose(*SMALL, "privacy.epsilon_grid=null", "privacy.epsilon=3", "trial=2"))
    assert run_name(single) == "isrl_dp_mb_sgd eps=3 M=2 synthetic t2"
    assert run_name(make_plan(compose(*SMALL, "privacy=none"))) == "isrl_dp_mb_sgd non-private M=2 synthetic t0"
    assert run_name(single, "epsilon=3") == "epsilon=3 · isrl_dp_mb_sgd eps=3 M=2 synthetic t2"
    tracker = tracker_from_config(plan.tracking, run_name=run_name(plan))
    tracker.log_plan(plan)
    tracker.wait()
    params = MlflowClient(tracking_uri=tracker.uri).get_run(tracker.run_id).data.params
    assert plan.config["privacy"]["delta"] is None
    assert params["privacy.delta"] == f"{1 / 40**2:g}" and params["data.source"].startswith("generated")
    tracker.fail()


def test_round_table_keeps_blanks_nans_and_exact_values(tmp_path):
    path = tmp_path / "rounds.csv"
    _round_table([{}, {"loss": np.array([0.1, np.nan]), "eps": 2.0}], 2, path)
    assert path.read_text() == ("round,replica,eps,loss\n0,0,,\n0,1,,\n1,0,2.0,0.1\n1,1,2.0,nan\n")
    _round_table([{}, {}], 2, path)
    assert path.read_text() == "round,replica\n0,0\n0,1\n1,0\n1,1\n"
    _round_table([{"w": np.array([0.0, -0.0, 0.0, 1 / 3])}], 4, path)     # distinct values formatted once, by their bits
    assert path.read_text() == "round,replica,w\n0,0,0.0\n0,1,-0.0\n0,2,0.0\n0,3,0.3333333333333333\n"


def _small_plan(tmp_path):
    return make_plan(compose(*SMALL, f"tracking.uri={mlflow_store(tmp_path, 'm.db')}", f"tracking.artifact_location={tmp_path}/a"))


def _deferred_run(tmp_path, writer):
    plan = _small_plan(tmp_path)
    tracker = tracker_from_config(plan.tracking, writer=writer)
    tracker.log_plan(plan)
    result = run(plan, tracker=tracker, inline=True)
    return plan, result, tracker


def test_a_handed_over_finish_is_written_by_the_time_the_writer_waited(tmp_path):
    """A tracker sharing a writer hands its finish over and returns; a finish left unwritten (or
    written after ``wait`` returns) would leave the run RUNNING or its summary missing here."""
    writer = RunWriter()
    plan, result, tracker = _deferred_run(tmp_path, writer)
    tracker.finish(plan, result)
    writer.wait()
    client = MlflowClient(tracking_uri=tracker.uri)
    assert client.get_run(tracker.run_id).info.status == "FINISHED"
    summary = json.loads(open(client.download_artifacts(tracker.run_id, "summary.json", str(tmp_path))).read())
    assert summary["final_train_loss"] == np.asarray(result.final["train_loss"]).tolist()
    writer.wait()                          # nothing left: returns at once
    writer.close()


def test_a_failed_handed_over_finish_is_raised_by_the_writer_and_leaves_its_run_failed(tmp_path, monkeypatch):
    writer = RunWriter()
    plan, result, tracker = _deferred_run(tmp_path, writer)

    def broken(*args):
        raise OSError("disk full")

    monkeypatch.setattr(tracking, "_round_table", broken)
    tracker.finish(plan, result)           # returns: the error belongs to the background write
    with pytest.raises(OSError, match="disk full"):
        writer.wait()
    assert MlflowClient(tracking_uri=tracker.uri).get_run(tracker.run_id).info.status == "FAILED"
    writer.close()                         # reported once


def test_the_jobs_of_one_writer_share_its_store_client_and_lose_no_round(tmp_path, monkeypatch):
    """Two jobs in one process through one ``RunWriter``, as a sweep's: one store client and
    experiment lookup for both; the first job's finish is handed over with round writes queued
    before it, the second's with rounds not yet queued (its finish runs on the writer's own
    thread, so it must write them itself: queued there and waited for, they would never start and
    the sweep would hang). Every round of both runs is in the store, and both runs are FINISHED."""
    writer = RunWriter()
    plan = _small_plan(tmp_path)
    lookups, lookup = [], MlflowClient.get_experiment_by_name
    monkeypatch.setattr(MlflowClient, "get_experiment_by_name", lambda self, name: lookups.append(name) or lookup(self, name))
    trackers = []
    for job in range(2):
        tracker = tracker_from_config(plan.tracking, writer=writer)
        tracker.log_plan(plan)
        result = run(plan, tracker=tracker, inline=True)
        if job == 0:
            tracker.flush()                # queued on the writer's thread
        else:
            assert tracker._pending        # left for the finish to write
        tracker.finish(plan, result)
        trackers.append(tracker)
    closing = threading.Thread(target=writer.close, daemon=True)
    closing.start()
    closing.join(timeout=120)
    assert not closing.is_alive(), "the writer's thread never finished the second job's run"
    assert trackers[0].client is trackers[1].client
    assert lookups == [plan.tracking["experiment_name"]]
    assert trackers[0].experiment_id == trackers[1].experiment_id
    client = MlflowClient(tracking_uri=trackers[0].uri)
    for tracker in trackers:
        assert client.get_run(tracker.run_id).info.status == "FINISHED"
        steps = [m.step for m in client.get_metric_history(tracker.run_id, "train_loss/replica_0")]
        assert sorted(steps) == list(range(plan.num_rounds))


def test_a_batch_fills_each_store_transaction_up_to_mlflows_caps_and_loses_nothing(tmp_path):
    """``_batch`` writes params, tags and metrics in as few ``log_batch`` calls as MLflow's caps
    allow (100 params and tags, 900 items a call here). A slicing bug would drop or repeat items
    at a boundary, or go over a cap (MLflow refuses the call)."""
    from mlflow.entities import Metric, Param, RunTag

    tracker = tracking.MlflowTracker(mlflow_store(tmp_path, "b.db"), "batches")
    tracker.start_run("batches")
    calls = []
    log_batch = tracker.client.log_batch
    tracker.client.log_batch = lambda run_id, **items: (calls.append({k: len(v) for k, v in items.items()}),
                                                         log_batch(run_id, **items))
    tracker._batch(metrics=[Metric("m", float(i), 0, i) for i in range(1200)],
                   params=[Param(f"p{i}", str(i)) for i in range(150)], tags=[RunTag(f"t{i}", "x") for i in range(60)])
    assert calls == [{"metrics": 800, "params": 100, "tags": 0}, {"metrics": 400, "params": 50, "tags": 50},
                     {"metrics": 0, "params": 0, "tags": 10}]
    run = MlflowClient(tracking_uri=tracker.uri).get_run(tracker.run_id)
    assert len(run.data.params) == 150 and sum(k.startswith("t") for k in run.data.tags) == 60
    history = MlflowClient(tracking_uri=tracker.uri).get_metric_history(tracker.run_id, "m")
    assert sorted(m.step for m in history) == list(range(1200))
    tracker.fail("FINISHED")
