"""What a finished run tells and keeps: its released output as an artifact that ``fedray.load_output``
reads back (the logged final loss recomputed from it), the excess risk where the population risk
has a closed form, the summary's notes on halted replicas and releases that did not happen, and
evaluations of sequential steps at the steps ``evaluate_every`` names."""

from types import SimpleNamespace

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

import fedray
from fedray.cli import column_label, final_status, halting_rounds, outcome_notes, summary_table
from fedray.plan import make_plan
from fedray.runtime.driver import RunResult, run
from fedray.tracking import tracker_from_config
from tests.conftest import compose, mlflow_store

SMALL = ["data=synthetic", "data.spec.num_silos=4", "data.spec.samples_per_silo=40", "data.spec.dim=3",
         "participation.silos_per_round=2", "num_rounds=3", "algorithm.batch_size=8", "progress=false",
         "privacy.enforce_budget=false", "algorithm.step_size=[0.1,0.5]"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite store for the module (creating its schema takes seconds)."""
    return tmp_path_factory.mktemp("store")


def _tracked(tmp_path, *overrides):
    plan = make_plan(compose(*overrides, f"tracking.uri={mlflow_store(tmp_path, 'm.db')}",
                             f"tracking.artifact_location={tmp_path}/a"))
    tracker = tracker_from_config(plan.tracking)
    tracker.log_plan(plan)
    result = run(plan, tracker=tracker, inline=True)
    tracker.finish(plan, result)
    return plan, result, tracker


def test_the_released_model_is_loaded_back_and_gives_the_logged_final_loss(store):
    tmp_path = store
    plan, result, tracker = _tracked(tmp_path, *SMALL)

    outputs = fedray.load_output(tracker.run_id, tracking_uri=mlflow_store(tmp_path, 'm.db'))

    assert list(outputs) == list(result.outputs) and outputs["last"].shape == (2, 3, 1)
    # the training loss, recomputed from the formula: mean over silos of each silo's mean
    # binary cross-entropy of sigmoid(<w, x>) (margins clipped at 15, as the loss does)
    fed = plan.dataset.load(plan.seed, plan.trial)
    logged = MlflowClient(tracking_uri=tracker.uri).get_run(tracker.run_id).data.metrics
    for p in range(2):
        per_silo = []
        for s in range(fed.num_silos):
            x, y = fed.x_train[s, :fed.n_train[s]], fed.y_train[s, :fed.n_train[s]]
            prob = 1.0 / (1.0 + np.exp(-np.clip(x @ outputs["last"][p, :, 0], -15, 15)))
            per_silo.append(np.mean(-(y * np.log(1e-12 + prob) + (1 - y) * np.log(1e-12 + 1 - prob))))
        assert logged[f"final_train_loss/replica_{p}"] == pytest.approx(np.mean(per_silo), rel=1e-9)


def test_a_run_without_its_output_is_named_in_the_error(store):
    tmp_path = store
    plan = make_plan(compose(*SMALL, f"tracking.uri={mlflow_store(tmp_path, 'm.db')}", f"tracking.artifact_location={tmp_path}/a"))
    tracker = tracker_from_config(plan.tracking)
    tracker.fail()
    with pytest.raises(FileNotFoundError, match=tracker.run_id):
        fedray.load_output(tracker.run_id, tracking_uri=mlflow_store(tmp_path, 'm.db'))


def test_a_closed_form_population_risk_logs_the_excess_risk_of_the_released_model(store):
    tmp_path = store
    plan, result, tracker = _tracked(
        tmp_path, "experiment=x2_sphere", "data.spec.num_silos=400", "repetitions=2", "progress=false")

    outputs = fedray.load_output(tracker.run_id, tracking_uri=tracker.uri)
    w_star = plan.dataset.optimum(plan.seed, plan.trial)
    logged = MlflowClient(tracking_uri=tracker.uri).get_run(tracker.run_id).data.metrics
    # half squared loss, x uniform on the sphere: F(w) - F* = ||w - w*||^2 / (2 d)
    for p in range(2):
        expected = np.sum((outputs["last"][p, :, 0] - w_star) ** 2) / (2 * plan.shape.dim)
        assert logged[f"final_excess_risk/replica_{p}"] == pytest.approx(expected, rel=1e-12)
    assert "excess_risk" in result.diagnostics


def test_sequential_steps_are_evaluated_at_the_steps_evaluate_every_names_whatever_the_blocks():
    base = ["experiment=p_sgd_synthetic", "data.spec.num_silos=2000", "participation.batch_size=20",
            "progress=false"]
    plan = make_plan(compose(*base, "evaluate_every=10"))
    steps = []
    result = run(plan, progress=lambda step, metrics: steps.append((step, "train_loss" in metrics)), inline=True)

    evaluated = [step for step, has in steps if has]
    assert evaluated == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 99]
    losses = [float(h["train_loss"][0]) for h in result.history if "train_loss" in h]
    assert len(set(losses)) == len(losses)              # each evaluation sees the model of its step
    # block sizes change nothing: the same released model as with one evaluation at the start
    once = run(make_plan(compose(*base, "evaluate_every=1000")), inline=True)
    np.testing.assert_array_equal(once.outputs["last"], result.outputs["last"])


def _plan(num_replicas=2, task="binary", num_rounds=10):
    return SimpleNamespace(num_replicas=num_replicas, num_rounds=num_rounds, shape=SimpleNamespace(task=task))


def test_the_summary_says_which_replicas_halted_and_when():
    halted = [np.array([0.0, 0.0]), np.array([0.0, 1.0]), np.array([1.0, 1.0])]
    result = RunResult({"last": np.zeros((2, 3, 1))}, history=[{"halted": h} for h in halted],
                       final={"train_loss": np.array([0.5, 0.5])})

    assert halting_rounds(result).tolist() == [2, 1]
    (note,) = outcome_notes(_plan(), result)
    assert note.startswith("halted: all 2 replicas at round 1-2 of at most 10")
    assert final_status(_plan(), result) == "final loss 0.5000 (mean of 2)  halted 2/2"


def test_the_summary_says_when_nothing_was_released_and_why():
    last = {"released": np.array([1.0, 0.0]), "certificate": np.array([0.01, 0.3]),
            "certificate_limit": np.array([0.05, 0.05])}
    result = RunResult({"released": np.zeros((2, 3, 1))}, history=[last],
                       final={"train_loss": np.array([0.4, np.nan])})

    (note,) = outcome_notes(_plan(), result)
    assert note == ("no release: 1 of 2 replicas (1) released nothing: the stability check failed (deletion "
                    "sensitivity bound 0.3 > 0.05, the sensitivity the noise is calibrated for); their metrics are NaN")


def test_regression_test_error_is_called_mean_squared_error():
    assert column_label("test_error", _plan(task="regression")) == "test mse"
    assert column_label("test_error_avg", _plan(task="regression")) == "test mse avg"
    assert column_label("test_error", _plan(task="binary")) == "test error"


def test_a_real_halting_run_has_a_halted_column():
    plan = make_plan(compose("experiment=user_level_sphere", "repetitions=2", "progress=false"))
    result = run(plan, inline=True)

    rounds = halting_rounds(result)
    assert (rounds >= 0).all() and len(result.history) == rounds.max() + 1   # the run ends when all halted
    table = summary_table(plan, result)
    assert [c.header for c in table.columns][-1] == "halted"
    assert outcome_notes(plan, result)[0].startswith("halted: all 2 replicas at round")


def test_silo_actors_are_built_from_arguments_ray_passes_inline(ray_local):
    """Ray stores a constructor argument past 100 KB as an object and, with restarts on, prints an
    error-level line that a restart may fail (P_SGD's 100,000 users did): each actor's setup,
    pickled, stays far below that."""
    import pickle

    from fedray.runtime.driver import RayGroups

    plan = make_plan(compose("experiment=p_sgd_synthetic", "progress=false"))
    groups = RayGroups(plan, 2)
    try:
        sizes = [len(pickle.dumps(setup)) for setup in groups.setups]
        assert max(sizes) < 10_000, sizes
        assert [list(setup[3][:2]) + [setup[3][-1]] for setup in groups.setups] == [[0, 1, 49_999], [50_000, 50_001, 99_999]]
        assert groups.map(lambda federation: federation.num_silos) == [50_000, 50_000]     # each loaded its block
    finally:
        groups.close()
