"""P_vec (seed-000 §2.2; seed-004 §6 item 6, T12): parameters, message counts, unbiasedness, MSE,
re-centering, the three equivalent forms, and an exact privacy check of the sufficient statistic."""

import math

import numpy as np
import pytest
from scipy import stats

from fedray.errors import ConfigError
from fedray.privacy.events import EpsilonDeltaDpEvent
from fedray.privacy.vector_sum import (
    aggregate_counts,
    analyze_counts,
    analyze_messages,
    encode,
    randomize_counts,
    randomize_messages,
    vector_sum_parameters,
)
from fedray.runtime.shuffler import Shuffler

# The smallest explicitly simulable config of seed-000 §2.2: 3758 messages per user.
SMALL = dict(epsilon=15.0, delta=0.49, dim=1, num_users=10, l2_bound=1.0)


def test_reference_parameters_large():
    # seed-000 §7 test 1: n=1000, d=10, Delta2=1, eps=1, delta=1e-6.
    # delta_hat = 1e-6/11 = 9.0909e-8; eps_hat = 1/(18 sqrt(ln(1.1e7))) = 1/(18 * 4.02814) = 0.0137972
    # g = ceil(max(2 sqrt(1000), sqrt(10), 4)) = ceil(63.246) = 64
    p = vector_sum_parameters(1.0, 1e-6, 10, 1000, 1.0)
    assert p.delta_hat == pytest.approx(1e-6 / 11, rel=1e-12)
    assert p.eps_hat == pytest.approx(0.013797, abs=1e-6)
    assert p.scale == 64
    assert p.noise_bits == 65_479_717
    assert p.bit_probability < 0.5


def test_reference_parameters_small():
    p = vector_sum_parameters(**SMALL)
    assert p.eps_hat == pytest.approx(0.70267, abs=1e-5)
    assert (p.scale, p.noise_bits) == (7, 3751)
    assert p.bit_probability == pytest.approx(0.499964, abs=1e-6)
    assert p.messages_per_user == 3758


@pytest.mark.parametrize(
    "n,d,l2,eps,delta", [(1000, 10, 1.0, 1.0, 1e-6), (10, 1, 1.0, 15.0, 0.49), (50, 3, 0.5, 2.0, 1e-3)]
)
def test_lemma_3_1_conditions_hold(n, d, l2, eps, delta):
    p = vector_sum_parameters(eps, delta, d, n, l2)
    threshold = 180 * p.scale**2 * math.log(2 / p.delta_hat) / (p.eps_hat**2 * n)
    assert p.noise_bits > threshold
    assert 0 < p.bit_probability < 0.5
    alpha, m = p.eps_hat / (3 * p.scale), p.noise_bits * n
    assert alpha * m * p.bit_probability >= 2 * p.scale
    assert 2 * math.exp(-(alpha**2) * m * p.bit_probability / 10) == pytest.approx(p.delta_hat, rel=1e-12)
    assert p.noise_mean == pytest.approx(p.bit_probability * p.noise_bits * n, rel=1e-12)


def test_lemma_3_3_reference_values():
    # seed-000 §7 test 7: worst-case neighbours give eps' ~ 0.115 (one coordinate) and ~ 0.122 (spread).
    p = vector_sum_parameters(1.0, 1e-6, 10, 1000, 1.0)
    one = np.zeros(10)
    one[0] = 2.0
    spread = np.full(10, 2.0 / math.sqrt(10))
    assert p.composed_epsilon(one) == pytest.approx(0.115, abs=1e-3)
    assert p.composed_epsilon(spread) == pytest.approx(0.122, abs=1e-3)
    assert max(p.composed_epsilon(one), p.composed_epsilon(spread)) <= p.epsilon


@pytest.mark.parametrize(
    "kwargs,key",
    [
        (dict(SMALL, epsilon=16.0), "epsilon"),
        (dict(SMALL, delta=0.5), "delta"),
        (dict(SMALL, dim=0), "dim"),
        (dict(SMALL, num_users=0), "num_users"),
        (dict(SMALL, l2_bound=0.0), "l2_bound"),
    ],
)
def test_out_of_range_parameters_are_refused(kwargs, key):
    with pytest.raises(ConfigError) as err:
        vector_sum_parameters(**kwargs)
    assert err.value.key == key


def test_every_user_sends_exactly_d_times_g_plus_b_bits():
    p = vector_sum_parameters(15.0, 0.49, 2, 4, 1.0)
    x = np.array([[0.6, -0.8], [0.0, 0.0], [-1.0, 0.0], [0.3, 0.3]])
    messages = randomize_messages(x, p, np.random.default_rng(0))
    assert messages.shape == (4, 2 * (p.scale + p.noise_bits), 2)
    for user in messages:
        labels, counts = np.unique(user[:, 0], return_counts=True)
        assert labels.tolist() == [0, 1]
        assert counts.tolist() == [p.bits_per_coordinate] * 2
        assert set(np.unique(user[:, 1])) <= {0, 1}
    ones = randomize_counts(x, p, np.random.default_rng(1))
    assert ones.min() >= 0 and ones.max() <= p.bits_per_coordinate


def test_encoding_is_randomized_rounding_in_range():
    p = vector_sum_parameters(**SMALL)
    x = np.linspace(-1, 1, 10)[:, None]
    xhat = encode(np.broadcast_to(x, (20_000, 10, 1)), p, np.random.default_rng(2))
    assert xhat.min() >= 0 and xhat.max() <= p.scale
    t = (x + 1.0) * p.scale / 2.0
    np.testing.assert_allclose(xhat.mean(axis=0), t, atol=4 * 0.5 / math.sqrt(20_000))


def test_recentering_is_exact_for_constant_grid_inputs():
    # Constant inputs on the fixed-point grid round deterministically; with the noise at its mean
    # p b n the analyzer returns n x exactly (re-centering by n_users * Delta2, not Delta2).
    p = vector_sum_parameters(2.0, 1e-3, 3, 16, 1.0)   # g = ceil(2 * 1 * sqrt(16)) = 8, Delta = 2
    grid = np.array([-0.75, 0.25, 0.0])                 # ||x|| = 0.79 <= 1; w g/Delta = 1, 5, 4
    x = np.tile(grid, (16, 1))
    xhat = encode(x, p, np.random.default_rng(3))
    assert np.array_equal(xhat, np.tile([1, 5, 4], (16, 1)))
    out = analyze_counts(xhat.sum(axis=0) + p.noise_mean, p)
    np.testing.assert_allclose(out, 16 * grid, atol=1e-9)


@pytest.mark.parametrize(
    "name,x",
    [
        ("all at +Delta2 e1", np.tile([1.0, 0.0], (10, 1))),
        ("all at -Delta2 e1", np.tile([-1.0, 0.0], (10, 1))),
        ("mixed, inside the ball", np.random.default_rng(4).uniform(-0.7, 0.7, size=(10, 2))),
        ("constant zero", np.zeros((10, 2))),
        ("fractional rounding points", np.tile([0.3 / 0.7, -0.5 / 0.7 * 0.9], (10, 1))),
    ],
)
def test_unbiased_and_mse_matches_the_exact_formula(name, x):
    p = vector_sum_parameters(15.0, 0.49, 2, 10, 1.0)
    reps = 100_000
    ones = aggregate_counts(np.broadcast_to(x, (reps,) + x.shape), p, np.random.default_rng(5))
    out = analyze_counts(ones, p)
    target = x.sum(axis=0)
    mse = p.exact_mse(x)
    se = math.sqrt(mse / p.dim / reps)            # per-coordinate variances are within a few % of each other
    assert np.all(np.abs(out.mean(axis=0) - target) < 4 * se), name
    empirical = np.mean(np.sum((out - target) ** 2, axis=1))
    # The squared error's std is about sqrt(2) * mse / sqrt(reps) for near-Gaussian errors.
    assert empirical == pytest.approx(mse, rel=5 * math.sqrt(2 / reps)), name
    assert mse <= p.mse_bound()


def test_mse_scales_with_dimension_and_epsilon():
    x1 = np.zeros((1000, 10))
    base = vector_sum_parameters(1.0, 1e-6, 10, 1000, 1.0).exact_mse(x1)
    wider = vector_sum_parameters(1.0, 1e-6, 20, 1000, 1.0).exact_mse(np.zeros((1000, 20)))
    tighter = vector_sum_parameters(0.5, 1e-6, 10, 1000, 1.0).exact_mse(x1)
    assert 2.0 < wider / base < 2.3          # doubling d doubles it, times ln^2((d+1)/delta) growth
    assert tighter / base == pytest.approx(4.0, rel=0.01)


def test_message_form_equals_count_form_for_the_same_draws():
    # M1 -> shuffle -> count is the same random variable as M2's summed counts (seed-000 §6).
    p = vector_sum_parameters(15.0, 0.49, 2, 4, 1.0)
    x = np.array([[0.6, -0.8], [0.1, 0.2], [-1.0, 0.0], [0.3, 0.3]])
    messages = randomize_messages(x, p, np.random.default_rng(6))
    counts = randomize_counts(x, p, np.random.default_rng(6))
    rows = messages.reshape(1, 4 * p.messages_per_user, 2)      # every message a row of its own
    shuffled = Shuffler(0, np.array([0])).shuffle(3, (rows, np.ones(rows.shape[:2], dtype=bool)))
    assert shuffled.counts.tolist() == [4 * p.messages_per_user]
    from_messages = analyze_messages(shuffled.messages[0], p)
    np.testing.assert_array_equal(from_messages, analyze_counts(counts.sum(axis=0), p))


@pytest.mark.slow
def test_message_count_and_aggregate_forms_agree_in_distribution():
    p = vector_sum_parameters(**SMALL)
    x = np.linspace(-0.9, 0.9, 10)[:, None]
    rng = np.random.default_rng(7)
    m1 = np.array([analyze_messages(rng.permutation(randomize_messages(x, p, rng).reshape(-1, 2)), p)[0]
                   for _ in range(1500)])
    reps = 40_000
    m2 = analyze_counts(randomize_counts(np.broadcast_to(x, (reps, 10, 1)), p, rng).sum(axis=1), p)[:, 0]
    m3 = analyze_counts(aggregate_counts(np.broadcast_to(x, (reps, 10, 1)), p, rng), p)[:, 0]
    var = p.exact_mse(x)                                   # ~ 765.5 (seed-000 §2.2)
    assert var == pytest.approx(765.5, rel=1e-3)
    for sample in (m1, m2, m3):
        k = len(sample)
        assert abs(sample.mean() - x.sum()) < 4 * math.sqrt(var / k)
        assert sample.var() == pytest.approx(var, rel=5 * math.sqrt(2 / k))
    assert stats.ks_2samp(m2, m3).pvalue > 1e-3
    assert stats.ks_2samp(m1, m3).pvalue > 1e-3


def _count_pmf(x: np.ndarray, p) -> np.ndarray:
    """Exact pmf of ones = sum_i xhat_i + Bin(n b, p) for 1-D inputs (seed-000 §7 test 6)."""
    t = (np.clip(x, -p.l2_bound, p.l2_bound) + p.l2_bound) * p.scale / p.value_range
    floors, frac = np.floor(t).astype(int), t - np.floor(t)
    rounding = np.array([1.0])
    for r in frac:                                   # Poisson-binomial by convolution
        rounding = np.convolve(rounding, [1.0 - r, r])
    trials = len(x) * p.noise_bits
    noise = stats.binom.pmf(np.arange(trials + 1), trials, p.bit_probability)
    pmf = np.convolve(rounding, noise)
    return np.concatenate([np.zeros(floors.sum()), pmf])


@pytest.mark.parametrize("x_u,x_u_prime", [(1.0, -1.0), (0.37, -0.52), (0.0, 0.05)])
def test_exact_hockey_stick_of_the_count_is_within_lemma_3_1(x_u, x_u_prime):
    p = vector_sum_parameters(**SMALL)
    others = np.linspace(-0.8, 0.8, 9)
    pmf = _count_pmf(np.append(others, x_u), p)
    pmf_prime = _count_pmf(np.append(others, x_u_prime), p)
    size = max(len(pmf), len(pmf_prime))
    pmf, pmf_prime = np.pad(pmf, (0, size - len(pmf))), np.pad(pmf_prime, (0, size - len(pmf_prime)))
    eps_c = p.eps_hat * (2 / p.scale + abs(x_u - x_u_prime) / p.value_range)
    for a, b in ((pmf, pmf_prime), (pmf_prime, pmf)):
        assert np.maximum(a - math.exp(eps_c) * b, 0.0).sum() <= p.delta_hat


def test_inputs_outside_the_ball_are_projected():
    p = vector_sum_parameters(15.0, 0.49, 2, 10, 1.0)
    x = np.tile([3.0, 4.0], (10, 1))                 # norm 5 -> projected to (0.6, 0.8)
    reps = 50_000
    out = analyze_counts(aggregate_counts(np.broadcast_to(x, (reps, 10, 2)), p, np.random.default_rng(8)), p)
    se = math.sqrt(p.exact_mse(np.tile([0.6, 0.8], (10, 1))) / 2 / reps)
    assert np.all(np.abs(out.mean(axis=0) - [6.0, 8.0]) < 4 * se)


def test_analyzer_refuses_an_inconsistent_message_multiset():
    p = vector_sum_parameters(15.0, 0.49, 2, 4, 1.0)
    messages = randomize_messages(np.zeros((4, 2)), p, np.random.default_rng(9)).reshape(-1, 2)
    with pytest.raises(ConfigError):
        analyze_messages(messages[:-1], p)


def test_split_randomizer_draws_the_same_bits_as_the_m2_randomizer_per_block():
    """SplitVectorSum.randomize rounds every user at once and draws per block; the counts must equal,
    bit for bit, the M2 randomizer (randomize_counts) run on each padded block of users."""
    from fedray.privacy.vector_sum import SplitVectorSum
    from fedray.rng import SiloDraws, Stream

    params = vector_sum_parameters(2.0, 1e-6, 3, 150, 1.0)
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((2, 150, 1, 3)) * 0.7                     # some outside the ball
    draws = SiloDraws(9, np.array([[0, 1], [0, 2]]), 4, np.arange(30, 180))
    reference = draws.blockwise(Stream.NOISE, vectors, lambda block, g: randomize_counts(block, params, g))
    np.testing.assert_array_equal(SplitVectorSum(params).randomize(vectors, draws), reference.sum(axis=2))


def test_robust_mode_debiases_with_the_users_that_arrived_and_reports_eps_over_gamma():
    """Spec §7 test 9 (A8): a third of the users drop out; their messages never reach the shuffler.
    The analyzer reads n_eff off the message counts and stays unbiased; the guarantee is eps / gamma_h."""
    from fedray.errors import ConfigError
    from fedray.privacy.vector_sum import aggregate_counts, analyze_counts, dropout_epsilon

    params = vector_sum_parameters(1.0, 1e-3, 2, 30, 1.0)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((30, 2))
    x /= np.linalg.norm(x, axis=1, keepdims=True) * 1.25
    arrived = x[:20]
    reps = 4000
    counts = aggregate_counts(np.broadcast_to(arrived, (reps, 20, 2)), params, rng)      # M3 over the 20 senders
    estimates = analyze_counts(counts, params, num_users=np.full(reps, 20))
    error = estimates.mean(axis=0) - arrived.sum(axis=0)
    assert np.all(np.abs(error) < 4 * estimates.std(axis=0) / np.sqrt(reps))
    biased = analyze_counts(counts, params).mean(axis=0) - arrived.sum(axis=0)             # debiased with n = 30
    assert np.all(np.abs(biased) > 20 * estimates.std(axis=0) / np.sqrt(reps))
    small = vector_sum_parameters(15.0, 0.49, 1, 10, 1.0)                                  # M1 at a size that fits
    messages = randomize_messages(np.full((6, 1), 0.5), small, rng)                         # 6 of 10 users sent
    ones = messages[..., 1].sum()
    np.testing.assert_allclose(analyze_messages(messages.reshape(-1, 2), small),
                               analyze_counts(np.array([ones]), small, num_users=6))       # n_eff = 6, read off
    assert dropout_epsilon(params, 20) == pytest.approx(1.5)
    with pytest.raises(ConfigError):
        dropout_epsilon(params, 9)                                                         # below n / 3
    with pytest.raises(ConfigError):
        dropout_epsilon(vector_sum_parameters(2.0, 1e-3, 2, 30, 1.0), 20)                  # Lemma A.9: eps <= 1
