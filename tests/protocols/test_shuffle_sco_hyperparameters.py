"""Seed 000's P_SGD hyperparameters (spec §3.1, §6 T5/A1/A2, §7 test 10)."""

import math

import pytest

from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.privacy.vector_sum import vector_sum_parameters
from fedray.protocols.shuffle_sco.hyperparameters import (
    clamp_batch, sgd_batch_size_raw, sgd_schedule, sgd_step_size_paper,
)
from tests.conftest import compose


def test_reference_values():
    # spec §7 test 10: n = 1e5, d = 10, eps = 1, delta = 1e-6, L = 1, D = 2
    assert sgd_batch_size_raw(10, 1.0, 1e-6) == pytest.approx(50.97, abs=5e-3)
    paper = sgd_schedule("paper", 100_000, 10, 1.0, 1e-6, 1.0, 2.0)
    assert (paper.batch_size, paper.num_steps) == (51, 1960)
    # the printed eta by hand: eps B D / (L sqrt T (eps B + sqrt(d) L ln(d/delta)))
    bracket = 51 + math.sqrt(10) * math.log(1e7)
    assert paper.step_size == pytest.approx(51 * 2 / (math.sqrt(1960) * bracket), rel=1e-12)


def test_paper_formula_keeps_the_misplaced_lipschitz_factor():
    """T5: with L = 1 both readings agree; with L = 2 the printed one has an extra L in the bracket."""
    printed = sgd_step_size_paper(1.0, 1e-6, 10, 51, 1960, 2.0, 2.0)
    corrected = 51 * 2.0 / (2.0 * math.sqrt(1960) * (51 + math.sqrt(10) * math.log(1e7)))
    assert printed < corrected


def test_exact_mode_uses_the_vector_sums_real_error():
    exact = sgd_schedule("exact", 100_000, 10, 1.0, 1e-6, 1.0, 2.0)
    mse = vector_sum_parameters(1.0, 1e-6, 10, 51, 1.0).mse_bound()
    assert exact.step_size == pytest.approx(2.0 / math.sqrt((1.0 + mse / 51**2) * 1960), rel=1e-12)
    assert exact.step_size < sgd_schedule("paper", 100_000, 10, 1.0, 1e-6, 1.0, 2.0).step_size / 50


def test_batch_is_clamped_to_the_population():
    assert clamp_batch(0.2, 10) == 1 and clamp_batch(50.01, 40) == 40 and clamp_batch(50.01, 100) == 51


USERS = ["experiment=p_sgd_synthetic", "data.spec.num_silos=5000", "algorithm.radius=1.0"]


def test_paper_mode_sets_batch_rounds_and_step_at_planning():
    plan = make_plan(compose(*USERS, "algorithm.parameters=paper"))
    expected = sgd_schedule("paper", 5000, 10, 4.0, 1e-6, 1.0, 2.0)
    assert plan.sampler.batch_size == expected.batch_size and plan.num_rounds == expected.num_steps
    assert plan.step_sizes.tolist() == [expected.step_size]
    assert plan.protocol.resolved["parameters"] == "paper"


@pytest.mark.parametrize("override, key", [
    ("algorithm.parameters=best", "algorithm.parameters"),
    ("algorithm.radius=null", "algorithm.radius"),
    ("privacy.delta=null", "privacy.delta"),
])
def test_formula_modes_refuse_missing_inputs(override, key):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, "algorithm.parameters=exact", override))
    assert err.value.key == key
