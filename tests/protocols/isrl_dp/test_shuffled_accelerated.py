"""SDP one-pass accelerated MB-SGD (seed-004 §3.8): silos send P_vec counts only, the summing
shuffler hands the server their sum, the estimate is unbiased, the AC-SA half is Alg. 1's, and the
planner accounts one (eps, delta) P_vec invocation per record."""

import math

from dataclasses import replace

import numpy as np
import pytest

from fedray.data import SiloArrays
from fedray.protocols.isrl_dp import (
    OnePassAcceleratedSGD,
    ShuffledOnePassAcceleratedSGD,
)
from fedray.core.protocol import RoundSpec, Routing
from fedray.errors import ConfigError
from fedray.losses import (
    Logistic,
    clipped_example_gradients,
    clipped_minibatch_means,
    margins,
)
from fedray.plan import make_plan
from fedray.privacy.mechanisms import NoNoise
from fedray.privacy.vector_sum import analyze_counts
from fedray.rng import SiloDraws
from fedray.runtime.shuffler import Shuffler
from fedray.runtime.silo_group import RoundPayload, SiloGroup
from tests.protocols.isrl_dp.silos import synthetic_silos
from tests.conftest import compose, round_keys

LOSS = Logistic()
FED, SILOS = synthetic_silos(6, 120, 3)
K = 10

SYNTHETIC = [
    "algorithm=sdp_one_pass_accelerated", "privacy=shuffle_vector_sum", "data=synthetic",
    "data.spec.num_silos=6", "data.spec.samples_per_silo=100", "data.spec.dim=4", "data.spec.test_samples_per_silo=10",
    "participation.silos_per_round=6", "algorithm.batch_size=10", "num_rounds=5", "progress=false",
]


def make(epsilon=15.0, delta=1e-3, silos_per_round=6, l2_clip=1.0, step=0.5):
    return ShuffledOnePassAcceleratedSGD(
        LOSS, np.array([step]), K, l2_clip, NoNoise(),
        target_epsilon=epsilon, target_delta=delta, silos_per_round=silos_per_round,
    )


def simulate(algorithm, rounds, silos_per_round=6, seed=0):
    """The driver's loop with the summing shuffler between the halves."""
    state = algorithm.init(np.zeros((1, 5, 1)), round_keys())
    reps = np.zeros(1, dtype=int)
    shuffler = Shuffler(seed, reps, output="sum")
    for r in range(rounds):
        mask = np.zeros((1, 6), dtype=bool)
        mask[:, np.random.default_rng([seed, r]).choice(6, silos_per_round, replace=False)] = True
        msgs = algorithm.silo_step(algorithm.broadcast(state), SILOS, SiloDraws(seed, reps, r, SILOS.silo_ids))
        shuffled = shuffler.shuffle(r, (msgs, mask))
        state = algorithm.server_step(state, shuffled.messages, shuffled.mask, round_keys())
    return state


def test_declares_a_summing_shuffler_one_pass_and_sdp():
    cls = ShuffledOnePassAcceleratedSGD
    assert cls.recipe.routing is Routing.SHUFFLE_SUM and cls.recipe.one_pass
    assert cls.recipe.trust_models == ("sdp", "none")


def test_vector_sum_is_calibrated_for_m_times_k_users_of_norm_l2_clip():
    params = make(silos_per_round=4, l2_clip=0.7).vector_sum(5).params
    assert (params.num_users, params.dim, params.l2_bound) == (4 * K, 5, 0.7)
    assert (params.epsilon, params.delta) == (15.0, 1e-3)


def test_server_estimate_is_unbiased_within_standard_errors_from_exact_mse():
    # T replicas = T independent rounds at one query point (each repetition has its own records and draws).
    t, m = 1500, 6
    algorithm = make()
    reps = np.arange(t)
    query = np.broadcast_to(np.random.default_rng(1).normal(scale=0.3, size=(1, 5, 1)), (t, 5, 1)).copy()
    draws = SiloDraws(0, reps, 0, SILOS.silo_ids)
    counts = algorithm.silo_step(query, SILOS, draws)
    shuffled = Shuffler(0, reps, output="sum").shuffle(0, (counts, np.ones((t, m), dtype=bool)))
    estimate, senders = algorithm.gradient_estimate(shuffled.messages, shuffled.mask)
    assert np.all(senders == m)

    idx = draws.epoch_slice(SILOS.sizes, K)
    truth = clipped_minibatch_means(LOSS, query, SILOS.x, SILOS.y, SILOS.x_norms, idx, 1.0).mean(axis=1)
    vectors = clipped_example_gradients(LOSS, query, SILOS.x, SILOS.y, SILOS.x_norms, idx, 1.0).reshape(t, m * K, 5)
    params = algorithm.vector_sum(5).params
    # exact_mse is E||A_vec - sum||^2 over all D coordinates; its binomial part is the same in every
    # coordinate and the rounding part is < 1e-4 of it, so per-coordinate variance = mse / D.
    variance = np.mean([params.exact_mse(v) for v in vectors]) / 5 / (m * K) ** 2
    z = (estimate - truth).reshape(t, 5).mean(axis=0) / math.sqrt(variance / t)
    assert np.all(np.abs(z) < 4.5)

    # The test has power: re-centring by L instead of n_u L (the printed Alg. 4) is rejected.
    biased = analyze_counts(shuffled.messages[:, 0].reshape(t, 5), params) + (m * K - 1) * params.l2_bound
    z_biased = (biased / (m * K) - truth.reshape(t, 5)).mean(axis=0) / math.sqrt(variance / t)
    assert np.all(np.abs(z_biased) > 4.5)


def test_without_privacy_the_iterates_are_one_pass_ac_sa():
    # Degenerate limit: exact sums through the summing shuffler = Alg. 1's average of silo means.
    exact = ShuffledOnePassAcceleratedSGD(LOSS, np.array([0.5]), K, 0.5, NoNoise())
    reference = OnePassAcceleratedSGD(LOSS, np.array([0.5]), K, 0.5, NoNoise())
    state = reference.init(np.zeros((1, 5, 1)), round_keys())
    for r in range(12):
        mask = np.zeros((1, 6), dtype=bool)
        mask[:, np.random.default_rng([0, r]).choice(6, 4, replace=False)] = True
        draws = SiloDraws(0, np.zeros(1, dtype=int), r, SILOS.silo_ids)
        msgs = reference.silo_step(reference.broadcast(state), SILOS, draws)
        state = reference.server_step(state, msgs, mask, round_keys())
    ours = simulate(exact, 12, silos_per_round=4)
    assert ours.round == state.round == 12
    for name in ("params", "prox_center"):
        np.testing.assert_allclose(getattr(ours, name), getattr(state, name), rtol=1e-10, atol=1e-13)


def test_private_run_decreases_the_loss():
    def objective(params):
        return LOSS.value(margins(params, FED.x_train), FED.y_train[None]).mean()

    # n_u = 60 users per round leave P_vec's noise (std ~2 per coordinate of the mean even at
    # eps = 15, delta = 0.4) above the gradient (~0.2), so one run is a coin flip: average 16.
    ends = [objective(simulate(make(epsilon=15.0, delta=0.4, step=0.02), 12, seed=s).params) for s in range(16)]
    assert np.mean(ends) < objective(np.zeros((1, 5, 1))) - 0.005


def test_silo_messages_are_one_count_vector_per_silo_and_layout_free():
    algorithm = make()
    query = np.random.default_rng(2).normal(size=(2, 5, 1))
    reps = np.array([0, 1])
    ids = np.arange(60, 66)                          # straddles two draw blocks of 64 silos
    silos = SiloArrays(ids, *[getattr(SILOS, f) for f in ("x", "y", "sizes", "x_norms")])
    whole = algorithm.silo_step(query, silos, SiloDraws(0, reps, 3, ids))
    params = algorithm.vector_sum(5).params
    assert whole.dtype == np.int64 and whole.shape == (2, 6, 5, 1)      # no record axis, integer counts
    assert whole.min() >= 0 and whole.max() <= K * params.bits_per_coordinate
    parts = [algorithm.silo_step(query, SiloArrays(ids[s], SILOS.x[s], SILOS.y[s], SILOS.sizes[s], SILOS.x_norms[s]),
                                 SiloDraws(0, reps, 3, ids[s])) for s in (slice(0, 3), slice(3, 6))]
    assert np.array_equal(whole, np.concatenate(parts, axis=1))


def test_silo_group_reply_and_shuffler_output_carry_counts_only():
    plan = make_plan(compose(*SYNTHETIC))
    group = SiloGroup(plan.dataset, plan.seed, plan.trial, np.arange(6), plan.repetitions)
    group.set_protocol(replace(plan.protocol, l2_clip=1.0).build(oracle=None))
    participation = np.ones((1, 6), dtype=bool)
    reply = group.round(RoundPayload(RoundSpec(0, participation, np.full((1, 4, 1), 0.1)), None))
    assert reply.evaluation is None
    assert reply.messages.dtype == np.int64 and reply.messages.shape == (1, 6, 4, 1)
    out = Shuffler(plan.seed, plan.repetitions, output="sum").shuffle(0, reply)
    # The server's whole view: the summed counts in row 0 and how many silos sent.
    assert out.counts.tolist() == [6]
    assert np.array_equal(out.messages[0, 0], reply.messages[0].sum(axis=0))
    assert not out.messages[0, 1:].any()


def test_a_round_with_fewer_silos_than_calibrated_is_refused():
    algorithm = make(silos_per_round=6)
    messages = np.zeros((1, 6, 5, 1), dtype=np.int64)
    mask = np.zeros((1, 6), dtype=bool)
    mask[0, :5] = True
    with pytest.raises(ValueError, match="less private"):
        algorithm.gradient_estimate(messages, mask)


def test_one_pass_limit_is_enforced_in_the_plan_and_in_the_silo():
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*SYNTHETIC, "num_rounds=11"))                   # floor(100 / 10) = 10
    assert err.value.key == "num_rounds"
    with pytest.raises(ValueError, match="floor"):
        make().silo_step(np.zeros((1, 5, 1)), SILOS, SiloDraws(0, np.zeros(1, dtype=int), 120 // K, SILOS.silo_ids))


@pytest.mark.parametrize("override, key, value", [
    ("privacy.epsilon=20", "privacy.epsilon", 20),
    ("privacy.delta=0.5", "privacy.delta", 0.5),
    ("privacy.delta=null", "privacy.delta", None),
    ("privacy.calibration=accountant", "privacy.calibration", "accountant"),
    ("participation=poisson", "participation", None),
])
def test_bad_privacy_config_names_the_value(override, key, value):
    with pytest.raises(ConfigError) as err:
        # participation=poisson has no silos_per_round to override
        kept = [o for o in SYNTHETIC if key != "participation" or not o.startswith("participation.")]
        make_plan(compose(*kept, override))
    assert err.value.key == key
    if value is not None:
        assert err.value.value == value


def test_bad_epsilon_or_delta_in_the_silo_names_the_value():
    for kwargs, key in (({"epsilon": 16.0}, "epsilon"), ({"delta": 0.5}, "delta")):
        with pytest.raises(ConfigError) as err:
            make(**kwargs).silo_step(np.zeros((1, 5, 1)), SILOS, SiloDraws(0, np.zeros(1, dtype=int), 0, np.arange(6)))
        assert err.value.key == key


def test_ledger_spends_the_invocation_epsilon_once():
    plan = make_plan(compose(*SYNTHETIC, "privacy.epsilon=8", "algorithm.step_size=[0.1,0.2]"))
    assert plan.protocol.routing is Routing.SHUFFLE_SUM and plan.privacy.trust_model == "sdp"
    assert plan.privacy.accountant == "parallel" and plan.privacy.details["users_per_invocation"] == 6 * 10
    assert np.all(plan.privacy.planned_epsilon == 8.0)
    ledger = plan.privacy.ledger.fresh()
    assert np.all(ledger.epsilons() == 0.0)
    for r in range(plan.num_rounds):
        ledger.record(plan.sampler.sample(plan.seed, plan.repetitions, r, plan.shape.num_silos))
        assert np.all(ledger.epsilons() == 8.0)
    fields = plan.protocol.algorithm_fields
    assert (fields["target_epsilon"], fields["target_delta"], fields["silos_per_round"]) == (8, 1e-6, 6)


@pytest.mark.slow
@pytest.mark.ray
def test_synthetic_job_through_the_shuffler_actor_decreases_the_loss(ray_local):
    from fedray.runtime.driver import run

    plan = make_plan(compose(
        "algorithm=sdp_one_pass_accelerated", "privacy=shuffle_vector_sum", "privacy.epsilon=15", "data=synthetic",
        "data.spec.num_silos=4", "data.spec.samples_per_silo=4000", "data.spec.dim=3",
        "data.spec.test_samples_per_silo=20",
        "participation.silos_per_round=4", "algorithm.batch_size=1000", "num_rounds=4", "algorithm.step_size=1.0",
        "runtime.num_actors=2", "progress=false",
    ))
    on_ray = run(plan)
    start = on_ray.history[0]["train_loss"][0]
    assert on_ray.final["train_loss"][0] < start - 0.05
    assert np.all(on_ray.epsilon_spent == 15.0)
    # Same draws whatever the layout: two actors behind the shuffler actor = one process inline.
    assert np.array_equal(on_ray.last_iterate, run(plan, inline=True).last_iterate)


@pytest.mark.parametrize("override", ["algorithm.target_epsilon=2.0", "algorithm.target_delta=1e-3",
                                      "algorithm.silos_per_round=1"])
def test_p_vec_inputs_other_than_the_accounted_ones_are_refused(override):
    from fedray.plan import make_plan
    from tests.conftest import compose

    with pytest.raises(ConfigError, match=override.split("=")[0]):
        make_plan(compose("algorithm=sdp_one_pass_accelerated", "privacy=shuffle_vector_sum", "data=synthetic",
                          "privacy.epsilon=10", "num_rounds=2", "participation.silos_per_round=5",
                          "algorithm.batch_size=5", override))
