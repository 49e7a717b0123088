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


PHASED = ["algorithm.parameters=exact", "algorithm.smoothness=0.25", "algorithm.strong_convexity=0.05",
          "algorithm.radius=2.0", "data.spec.num_silos=30000"]


def test_phase_schedule_follows_a6():
    from fedray.protocols.shuffle_sco.hyperparameters import agd_phase_schedule, num_phases

    assert num_phases(100_000) == 5 and num_phases(16) == 2 and num_phases(4) == 1
    phases = agd_phase_schedule("paper", 100_000, 10, 1.0, 1e-6, 1.0, 2.0, 1.0, 0.1)
    group = 100_000 // 5
    assert phases.radii[0] == min(2.0, 2 * 1.0 / 0.1)
    first = agd_schedule("paper", group, 10, 1.0, 1e-6, 1.0, phases.radii[0], 1.0)
    assert (phases.batch_sizes[0], phases.steps[0], phases.step_sizes[0]) == tuple(first)
    a = 10**0.4 * np.log(1e7) ** 0.8
    gap = 2.0 / np.sqrt(group) + a * 2.0**1.2 / group**0.8
    assert phases.radii[1] == pytest.approx(min(2.0, np.sqrt(2 * gap / 0.1)), rel=1e-12)
    assert all(b * t <= group for b, t in zip(phases.batch_sizes, phases.steps))


def test_phases_are_p_agd_restarted_on_fresh_users():
    """Without privacy, the phased run equals the pseudocode run phase by phase, each phase from
    the previous phase's output on the users after those of the earlier phases."""
    plan = make_plan(compose(*USERS, *PHASED, "privacy=none"))
    phases = plan.protocol.resolved["phases"]
    result = run(plan, inline=True, groups=InlineGroups(plan, 3))
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train[:, 0], fed.y_train[:, 0]
    theta_ag, start = np.zeros(x.shape[1]), 0
    for b, steps, step in zip(phases["batch_sizes"], phases["steps"], phases["step_sizes"]):
        theta, c = theta_ag.copy(), 2.0 / step
        for t in range(1, steps + 1):
            alpha = 2.0 / (t + 2)
            theta_md = alpha * theta + (1 - alpha) * theta_ag
            xb, yb = x[start:start + b], y[start:start + b]
            start += b
            g = xb.T @ (1 / (1 + np.exp(-np.clip(xb @ theta_md, -15, 15))) - yb) / b
            theta = theta - g * (t + 1) / c
            theta *= min(1.0, 2.0 / np.linalg.norm(theta))
            theta_ag = alpha * theta + (1 - alpha) * theta_ag
    np.testing.assert_allclose(result.outputs["last"][0, :, 0], theta_ag, rtol=1e-11, atol=1e-14)


def test_private_phases_spend_once_per_user_and_keep_their_bits_across_layouts():
    plan = make_plan(compose(*USERS, *PHASED))
    phases = plan.protocol.resolved["phases"]
    used = sum(b * t for b, t in zip(phases["batch_sizes"], phases["steps"]))
    one = run(plan, inline=True)
    three = run(make_plan(compose(*USERS, *PHASED, "algorithm.block_steps=3")), inline=True,
                groups=InlineGroups(plan, 3))
    np.testing.assert_array_equal(one.outputs["last"], three.outputs["last"])
    assert np.all(one.epsilon_spent[:, :used] == 4.0) and np.all(one.epsilon_spent[:, used:] == 0)


@pytest.mark.parametrize("override, key", [
    ("algorithm.parameters=manual", "algorithm.strong_convexity"),
    ("algorithm.strong_convexity=-1", "algorithm.strong_convexity"),
])
def test_phase_settings_are_checked(override, key):
    from fedray.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, *PHASED, override))
    assert err.value.key == key


def test_non_smooth_phases_run_smoothed_p_agd_with_each_phases_envelope():
    """Thm 4.8a: a hinge Moreau envelope of null smoothing; phase j's beta_j is Thm 4.7's at
    (n_j, R_{j-1}) and B_j, sigma use L_eff = 2 L; without privacy the run equals smoothed AC-SA
    phase by phase with each phase's own Huber width ||x||^2 / beta_j."""
    from fedray.protocols.shuffle_sco.hyperparameters import agd_phase_schedule, smoothing_parameter

    envelope = ["data.loss._target_=fedray.smoothing.MoreauEnvelope", "+data.loss.base._target_=fedray.smoothing.Hinge",
                "+data.loss.smoothing=null", "~data.loss.margin_clip", "algorithm.parameters=exact",
                "algorithm.strong_convexity=0.05", "algorithm.radius=2.0", "data.spec.num_silos=6000", "privacy=none",
                "privacy.epsilon=4", "privacy.delta=1e-6", "privacy.l2_clip=1.0"]
    plan = make_plan(compose(*USERS, *envelope))
    phases = plan.protocol.resolved["phases"]
    zero_mse = lambda *args: 0.0                                     # noqa: E731  (privacy=none's sum error)
    expected = agd_phase_schedule("exact", 6_000, 3, 4.0, 1e-6, 1.0, 4.0, None, 0.05, zero_mse)
    assert phases["smoothings"] == list(expected.smoothings) and phases["batch_sizes"] == list(expected.batch_sizes)
    assert expected.smoothings[0] == smoothing_parameter(6_000 // len(expected.steps), 3, 4.0, 1e-6, 1.0,
                                                         expected.radii[0])
    assert len(set(expected.smoothings)) == len(expected.smoothings)   # a new envelope each phase
    result = run(plan, inline=True, groups=InlineGroups(plan, 2))
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train[:, 0], fed.y_train[:, 0]
    sign = 2 * y - 1
    theta_ag, start = np.zeros(3), 0
    for b, steps, step, beta in zip(phases["batch_sizes"], phases["steps"], phases["step_sizes"], phases["smoothings"]):
        theta, c = theta_ag.copy(), 2.0 / step
        for t in range(1, steps + 1):
            alpha = 2.0 / (t + 2)
            theta_md = alpha * theta + (1 - alpha) * theta_ag
            xb, sb = x[start:start + b], sign[start:start + b]
            start += b
            width = (xb**2).sum(axis=1) / beta
            slope = np.clip((1 - sb * (xb @ theta_md)) / width, 0.0, 1.0)            # Huber slope of the hinge
            g = xb.T @ (-sb * slope) / b
            theta = theta - g * (t + 1) / c
            theta *= min(1.0, 2.0 / np.linalg.norm(theta))
            theta_ag = alpha * theta + (1 - alpha) * theta_ag
    np.testing.assert_allclose(result.outputs["last"][0, :, 0], theta_ag, rtol=1e-10, atol=1e-13)


def test_pan_private_ac_sa_adds_two_fresh_curator_draws_of_b_zeta_per_batch():
    """App. C: the curator's accumulator starts from N(0, zeta^2 I) and gets a second draw, zeta^2 =
    8 L^2 ln(2/delta) / (B^2 eps^2), on the batch MEAN: two draws of std B zeta on the sum; replayed
    here from the OUTPUT_NOISE stream; eps >= 1 is refused (Lemma C.5)."""
    from fedray.errors import ConfigError
    from fedray.rng import Stream, generator

    plan = make_plan(compose(*USERS, "privacy=pan_private", "privacy.epsilon=0.5", "num_rounds=30",
                             "algorithm.step_size=0.02"))
    b, sigma = 7, plan.protocol.resolved["noise_std"]
    assert sigma == pytest.approx(b * np.sqrt(8 * np.log(2 / 1e-6) / (b**2 * 0.25)), rel=1e-12)
    assert plan.privacy.trust_model == "pan_private" and plan.protocol.routing.value == "direct"
    result = run(plan, inline=True, groups=InlineGroups(plan, 2))
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train[:, 0], fed.y_train[:, 0]
    c = 2.0 / 0.02
    theta = theta_ag = np.zeros(3)
    for t in range(1, 31):
        alpha = 2.0 / (t + 2)
        theta_md = alpha * theta + (1 - alpha) * theta_ag
        xb, yb = x[(t - 1) * b:t * b], y[(t - 1) * b:t * b]
        total = xb.T @ (1 / (1 + np.exp(-np.clip(xb @ theta_md, -15, 15))) - yb)
        total = total + sigma * generator(plan.seed, Stream.OUTPUT_NOISE, *plan.replicas.streams[0], t - 1
                                          ).standard_normal((2, 3)).sum(axis=0)
        theta = theta - (total / b) * (t + 1) / c
        theta *= min(1.0, 0.8 / np.linalg.norm(theta))
        theta_ag = alpha * theta + (1 - alpha) * theta_ag
    np.testing.assert_allclose(result.outputs["last"][0, :, 0], theta_ag, rtol=1e-10, atol=1e-13)
    assert np.allclose(result.epsilon_spent[:, :210], 0.5)
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, "privacy=pan_private", "privacy.epsilon=1"))
    assert err.value.key == "privacy.epsilon"
