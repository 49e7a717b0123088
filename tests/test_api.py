"""The public API (`import fedray`): its docstring examples run, and what it returns is what the
command line would compute."""

import doctest

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

import fedray
import fedray.api
from fedray.errors import BudgetError
from tests.conftest import mlflow_store

SMALL = ["data=synthetic", "participation.silos_per_round=5", "num_rounds=4", "progress=false"]


def test_the_docstring_examples_run():
    """Catches an API change the module's documented examples no longer follow."""
    failures, attempted = doctest.testmod(fedray.api, optionflags=doctest.ELLIPSIS)
    assert attempted >= 8 and failures == 0


def test_import_fedray_exports_the_api_lazily():
    """Catches a public name that is missing, or an `import fedray` that imports Ray."""
    import subprocess
    import sys

    code = "import sys, fedray; print('ray' in sys.modules, sorted(fedray.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False ['Run', 'config', 'load_output', 'make_plan', 'run', 'run_sweep']"


def test_a_mapping_composes_like_the_same_overrides():
    """Catches nested values, lists or nulls turned into different overrides than a user would type."""
    given = {"data": "synthetic", "participation": {"silos_per_round": 5}, "privacy": {"epsilon": [1.0, 2.0],
             "l2_clip": None}}
    typed = ["data=synthetic", "participation.silos_per_round=5", "privacy.epsilon=[1.0,2.0]", "privacy.l2_clip=null"]
    assert fedray.config(given) == fedray.config(typed)


@pytest.mark.slow  # the refusal's advice is an accountant search (10-25 s), the one
# tests/privacy/test_budgets.py also makes (the session's store then answers it)
def test_an_overspending_plan_is_refused_before_any_run():
    with pytest.raises(BudgetError, match="exceeds privacy.epsilon"):
        fedray.make_plan(["experiment=isrl_dp_convex", "participation.silos_per_round=25"])


def test_a_tracked_run_writes_the_mlflow_run_the_command_line_would(tmp_path):
    """Catches a tracked API run that is left RUNNING, or whose logged spend is not the run's."""
    uri = mlflow_store(tmp_path)
    plan = fedray.make_plan(SMALL + [f"tracking.uri={uri}", f"tracking.artifact_location={tmp_path}/artifacts"])
    done = fedray.run(plan, inline=True, track=True)
    record = MlflowClient(tracking_uri=uri).get_run(done.run_id)
    assert record.info.status == "FINISHED"
    assert record.data.tags["trust_model"] == "isrl_dp"
    assert np.isclose(record.data.metrics["epsilon_spent_max"], done.epsilon_spent.max())
    assert done.statement["epsilon_per_unit_max"] == pytest.approx(done.epsilon_spent.max())


@pytest.mark.slow
def test_a_sweep_runs_each_job_as_its_own_run_would(ray_local):
    """Catches a sweep whose shared actors change a job's numbers (the pool must not carry state),
    and one that ends the Ray its caller had joined (the test run's shared one here)."""
    jobs = [SMALL + ["seed=1"], SMALL + ["seed=2"]]
    swept = fedray.run_sweep(jobs)
    assert ray_local.is_initialized()
    alone = fedray.run(fedray.make_plan(jobs[1]), inline=True)
    assert len(swept) == 2
    np.testing.assert_array_equal(swept[1].outputs["last"], alone.outputs["last"])
    assert not np.array_equal(swept[0].outputs["last"], swept[1].outputs["last"])


def test_a_tracked_run_keeps_a_constant_that_is_not_a_number_as_a_tag(tmp_path):
    """Catches the tracker logging every protocol constant as a metric: Phased-ERM's resolved
    constants carry ``on_unstable`` (a mode's name), and `python -m fedray
    experiment=phased_erm_synthetic` ended in a ValueError at the run's last write."""
    from mlflow.tracking import MlflowClient

    uri = mlflow_store(tmp_path)
    plan = fedray.make_plan(["experiment=phased_erm_synthetic", "data.spec.num_silos=2000",
                             "data.spec.samples_per_silo=1", "data.spec.dim=3", "algorithm.allow_few_users=true",
                             "progress=false", f"tracking.uri={uri}", f"tracking.artifact_location={tmp_path}/artifacts"])
    done = fedray.run(plan, inline=True, track=True)
    record = MlflowClient(tracking_uri=uri).get_run(done.run_id)
    assert record.info.status == "FINISHED"
    assert record.data.tags["constant.on_unstable"] == plan.protocol.resolved["on_unstable"]
    assert "on_unstable" not in record.data.metrics and "phases" in record.data.metrics
