"""Every run states what it claims: trust model, unit, neighbouring relation, calibration,
accountant, epsilon per unit, and whatever lies outside the guarantee."""

import pytest

from fedray.errors import ConfigError
from fedray.plan import make_plan
from tests.conftest import compose

SHUFFLED = ["data=synthetic", "data.spec.num_silos=500", "data.spec.samples_per_silo=20", "data.spec.dim=5",
            "privacy.delta=1e-5", "participation.silos_per_round=500", "algorithm=sdp_mb_sgd", "privacy=shuffle",
            "privacy.epsilon=2.0", "num_rounds=3"]


def test_the_paper_clip_is_named_as_data_dependent():
    plan = make_plan(compose("experiment=isrl_dp_convex", "privacy.l2_clip=null"))
    record = plan.privacy.statement(diagnostics={"train_loss", "test_error"})
    assert {k: record[k] for k in ("trust_model", "unit", "neighbouring_relation", "calibration", "accountant")} == {
        "trust_model": "isrl_dp", "unit": "record of one silo", "neighbouring_relation": "replace_one",
        "calibration": "paper", "accountant": "rdp"}
    assert record["epsilon_per_unit_max"] == pytest.approx(float(plan.privacy.planned_epsilon.max()))
    assert record["epsilon_per_unit_max"] <= 3.0 and record["delta_max"] == pytest.approx(1 / 1238**2)
    assert len(record["non_private_inputs"]) == 2 and "largest feature norm" in record["non_private_inputs"][0]
    assert "PCA basis" in record["non_private_inputs"][1]
    assert record["diagnostic_metrics"] == ["test_error", "train_loss"]
    assert "outside the guarantee" in plan.privacy.summary()


def test_the_main_job_uses_a_fixed_clip_and_names_only_the_pooled_pca():
    plan = make_plan(compose("experiment=isrl_dp_convex"))
    assert plan.config["privacy"]["l2_clip"] == 1.0
    record = plan.privacy.statement()
    assert len(record["non_private_inputs"]) == 1 and "PCA basis" in record["non_private_inputs"][0]
    assert record["driver_view"].startswith("simulation")


def test_the_bare_command_uses_a_fixed_clip_and_names_only_the_pooled_pca_outside_the_guarantee():
    """`python -m fedray` with no arguments: before, privacy=paper's clip was null, the largest
    feature norm of the silos' records, which the statement had to name outside the guarantee.
    MNIST's PCA basis is fitted on the pooled training records of all silos: the statement must
    name it (it shapes every release and no silo-level guarantee covers it), and a faithful run,
    which a deployment could not pool for, is refused; raw pixels leave nothing outside."""
    plan = make_plan(compose("progress=false"))
    assert plan.config["privacy"]["l2_clip"] == 1.0 and plan.protocol.l2_clip == 1.0
    outside = plan.privacy.statement()["non_private_inputs"]
    assert len(outside) == 1 and "PCA basis" in outside[0] and "pooled training records" in outside[0]
    assert "outside the guarantee: the PCA basis" in plan.privacy.summary()
    with pytest.raises(ConfigError, match="runtime.faithful"):
        make_plan(compose("progress=false", "runtime.faithful=true"))
    raw = make_plan(compose("progress=false", "data.spec.pca_dim=null"))
    assert raw.privacy.statement()["non_private_inputs"] == []
    assert "outside the guarantee" not in raw.privacy.summary()
    # the paper's own data-dependent clip stays where a preset reproduces the paper, and is named
    e1 = make_plan(compose("experiment=e1_mnist", "privacy.epsilon_grid=null"))
    assert e1.protocol.l2_clip is None and "largest feature norm" in e1.privacy.summary()


def test_shuffle_dp_states_a_federation_wide_unit():
    plan = make_plan(compose(*SHUFFLED))
    record = plan.privacy.statement()
    assert (record["trust_model"], record["unit"], record["accountant"]) == (
        "sdp", "record anywhere in the federation", "advanced")
    assert record["epsilon_per_unit_max"] <= 2.0


def test_a_baseline_claims_nothing():
    plan = make_plan(compose("experiment=isrl_dp_convex", "algorithm=mb_sgd", "privacy=none"))
    record = plan.privacy.statement(diagnostics={"train_loss"})
    assert record["trust_model"] == "none" and record["guarantee"] == "none: a non-private baseline"
    assert "epsilon_per_unit_max" not in record
    assert plan.privacy.summary() == "not private (a baseline): no unit is protected"
