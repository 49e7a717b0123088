"""P_AGD (seed 000 Alg. 4): the run follows the paper's pseudocode step for step (indices of
alpha_t and L_t included), blocks and actor layouts change no bit, its formula modes give the
reference values, and with P_vec it spends (eps, delta) by parallel composition."""

from __future__ import annotations

import numpy as np
import pytest

from fedray.plan import make_plan
from fedray.protocols.shuffle_sco.hyperparameters import agd_batch_size_raw, agd_oracle_std, agd_schedule
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

USERS = ["experiment=p_sgd_synthetic", "algorithm=p_agd", "data.spec.num_silos=600", "data.spec.dim=3",
         "participation.batch_size=7", "num_rounds=80", "progress=false", "evaluate_every=25", "algorithm.radius=0.8"]


def _pseudocode(plan, step_size: float) -> np.ndarray:
    """Alg. 4 with exact batch sums, written from the spec: theta^ag_{T+1}."""
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train[:, 0], fed.y_train[:, 0]
    b, big_t, radius = plan.sampler.batch_size, plan.num_rounds, 0.8
    c = 2.0 / step_size                                   # (T + 2)^(3/2) sigma / D + beta
    theta = theta_ag = np.zeros(x.shape[1])
    for t in range(1, big_t + 1):
        alpha, lt = 2.0 / (t + 2), c / (t + 1)
        theta_md = alpha * theta + (1 - alpha) * theta_ag
        xb, yb = x[(t - 1) * b:t * b], y[(t - 1) * b:t * b]
        g = xb.T @ (1 / (1 + np.exp(-np.clip(xb @ theta_md, -15, 15))) - yb) / b
        theta = theta - g / lt
        theta *= min(1.0, radius / np.linalg.norm(theta))
        theta_ag = alpha * theta + (1 - alpha) * theta_ag
    return theta_ag


def test_run_is_the_papers_pseudocode():
    plan = make_plan(compose(*USERS, "privacy=none", "algorithm.step_size=0.9"))
    result = run(plan, inline=True)
    np.testing.assert_allclose(result.outputs["last"][0, :, 0], _pseudocode(plan, 0.9), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("privacy", ["privacy=none", "privacy=shuffle_vector_sum"])
def test_block_size_and_actor_layout_change_no_bit(privacy):
    plans = {k: make_plan(compose(*USERS, privacy, f"algorithm.block_steps={k}")) for k in (1, 16)}
    reference = run(plans[1], inline=True).outputs["last"]
    other = run(plans[16], inline=True, groups=InlineGroups(plans[16], 3)).outputs["last"]
    np.testing.assert_array_equal(reference, other)


def test_reference_values():
    # spec §7 test 10: n = 1e5, d = 10, eps = 1, delta = 1e-6, L = 1, D = 2, beta = 1
    assert agd_batch_size_raw(100_000, 10, 1.0, 1e-6, 1.0, 1.0, 2.0) == pytest.approx(3651.9, abs=0.05)
    schedule = agd_schedule("paper", 100_000, 10, 1.0, 1e-6, 1.0, 2.0, 1.0)
    sigma = np.sqrt(1 / 3652 + 10 * np.log(1e7) ** 2 / 3652**2)
    assert agd_oracle_std("paper", 1.0, 1e-6, 10, 3652, 1.0) == pytest.approx(sigma, rel=1e-12)
    assert (schedule.batch_size, schedule.num_steps) == (3652, 27)
    assert schedule.step_size == pytest.approx(2 / (29**1.5 * sigma / 2 + 1), rel=1e-12)


def test_private_run_spends_its_budget_once():
    plan = make_plan(compose(*USERS, "num_rounds=20"))
    result = run(plan, inline=True)
    assert np.allclose(result.epsilon_spent[:, :140], 4.0) and np.all(result.epsilon_spent[:, 140:] == 0)


def test_smoothed_p_agd_takes_the_envelope_smoothness_from_theorem_4_7():
    from fedray.protocols.shuffle_sco.hyperparameters import clamp_batch, smoothing_parameter

    # spec §7 test 10: beta ~ 78.36 and the smoothed-AGD B with L_eff = 2L ~ 841.95
    beta = smoothing_parameter(100_000, 10, 1.0, 1e-6, 1.0, 2.0)
    assert beta == pytest.approx(78.36, abs=5e-3)
    assert agd_batch_size_raw(100_000, 10, 1.0, 1e-6, 2.0, beta, 2.0) == pytest.approx(841.95, abs=5e-3)
    envelope = ["data.loss._target_=fedray.smoothing.MoreauEnvelope", "+data.loss.base._target_=fedray.smoothing.Hinge",
                "+data.loss.smoothing=null", "~data.loss.margin_clip", "algorithm.parameters=paper",
                "data.spec.num_silos=20000"]
    plan = make_plan(compose(*USERS, *envelope))
    beta = smoothing_parameter(20_000, 3, 4.0, 1e-6, 1.0, 1.6)
    assert plan.loss.smoothing == pytest.approx(beta, rel=1e-12)
    assert plan.sampler.batch_size == clamp_batch(agd_batch_size_raw(20_000, 3, 4.0, 1e-6, 2.0, beta, 1.6), 20_000)
    assert plan.config["algorithm"]["smoothness"] == plan.loss.smoothing
    result = run(plan, inline=True)
    assert np.isfinite(result.final["train_loss"]).all()
