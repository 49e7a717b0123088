"""The shuffled MB-SGD privacy chain (seed-004 §3.7 [OURS]): hand numbers, round trips, cross
routes, monotonicity, preconditions."""

import math

import numpy as np
import pytest
from scipy import stats

from fedray.core.sampling import UniformParticipation
from fedray.errors import ConfigError
from fedray.privacy.amplification import shuffled_epsilon_delta
from fedray.protocols.isrl_dp.shuffle_calibration import (
    calibrate_shuffled_sgd,
    compose,
    default_randomizer_delta,
    gaussian_noise_multiplier,
    round_privacy,
    worst_round_privacy,
)

HAND = dict(num_silos=1000, silos_per_round=1000, records_per_silo=100)


def _exact_composed_epsilon(e: float, d: float, rounds: int, delta: float) -> float:
    """Exact epsilon of R-fold composition of the worst (e, d)-DP pair (Kairouz-Oh-Viswanath).

    Pair: loss +inf w.p. d, +e w.p. (1-d)/(1+e^-e), -e otherwise. delta(eps) = 1 - (1-d)^R
    + (1-d)^R E[(1 - e^(eps - L))_+] with L = (R - 2K) e, K ~ Bin(R, 1/(1+e^e)).
    """
    k = np.arange(rounds + 1)
    weights = stats.binom.pmf(k, rounds, 1.0 / (1.0 + math.exp(e)))
    loss = (rounds - 2 * k) * e

    def delta_at(eps: float) -> float:
        finite = np.sum(weights * np.maximum(0.0, 1.0 - np.exp(eps - loss)))
        return 1.0 - (1.0 - d) ** rounds + (1.0 - d) ** rounds * finite

    lo, hi = 0.0, rounds * e
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if delta_at(mid) <= delta else (mid, hi)
    return hi


def test_gaussian_noise_multiplier_hand_number():
    # sigma^2 = 8 L^2 ln(2/dh0)/eh0^2 over sensitivity 2L: sqrt(2 ln 2e8)/0.5.
    # ln 2e8 = 0.6931472 + 18.4206807 = 19.1138279; 2 * 19.1138279 = 38.2276558; sqrt = 6.1828518; / 0.5 = 12.3657035
    assert gaussian_noise_multiplier(0.5, 1e-8) == pytest.approx(12.3657035, abs=1e-6)


def test_round_privacy_hand_numbers():
    # eh0 = 0.5, dh0 = 1e-8, M = N = 1000, n = 100; FMT delta = M dh0 = 1e-5.
    # FMT range: ln(1000 / (16 ln 2e5)) = ln(1000 / 195.30) = 1.633 >= 0.5.
    # tanh(0.25) = 0.2449187; e^0.5 ln(4e5) = 1.6487213 * 12.8992198 = 21.2672181
    # 8 sqrt(21.2672181 / 1000) = 1.1666627; 8 e^0.5 / 1000 = 0.0131898
    # eh = ln(1 + 0.2449187 * 1.1798525) = ln(1.2889679) = 0.2538418
    # dh = 1e-5 + (e^eh + 1)(1 + e^-0.5 / 2) M dh0 = 1e-5 + 2.2889679 * 1.3032653 * 1e-5 = 3.98313e-5
    # q = 1000 / (100 * 1000) = 0.01; e_r = ln(1 + 0.01 * 0.2889679) = 0.0028855; d_r = 3.98313e-7
    rp = round_privacy(0.5, 1e-8, **HAND)
    assert rp.amplified
    assert rp.shuffle_epsilon == pytest.approx(0.2538418, abs=1e-7)
    assert rp.shuffle_delta == pytest.approx(3.98313e-5, rel=1e-5)
    assert rp.sampling_probability == 0.01
    assert rp.epsilon == pytest.approx(0.0028855, abs=1e-7)
    assert rp.delta == pytest.approx(3.98313e-7, rel=1e-5)


def test_advanced_composition_hand_number():
    # R = 100, delta = 1e-4: slack = 1e-4 - 100 * 3.98313e-7 = 6.01687e-5; ln(1/slack) = 9.718359
    # sqrt(200 * 9.718359) = 44.087093; 44.087093 * 0.0028855119 = 0.1272138
    # + R e_r (e^e_r - 1) = 100 * 0.0028855119 * 0.0028896793 = 0.0008338 -> 0.1280477
    rp = round_privacy(0.5, 1e-8, **HAND)
    assert compose(rp.epsilon, rp.delta, 100, 1e-4, "advanced") == pytest.approx(0.1280477, abs=1e-6)


def test_advanced_composition_is_infinite_without_delta_slack():
    assert compose(0.01, 2e-6, 100, 1e-4, "advanced") == math.inf


@pytest.mark.parametrize(
    "e,d,rounds,delta", [(0.0028855, 3.98e-7, 100, 1e-4), (0.01, 1e-9, 1000, 1e-5), (0.2, 1e-8, 20, 1e-6)]
)
def test_pld_is_between_the_exact_composition_and_advanced_composition(e, d, rounds, delta):
    exact = _exact_composed_epsilon(e, d, rounds, delta)
    pld = compose(e, d, rounds, delta, "pld")
    advanced = compose(e, d, rounds, delta, "advanced")
    assert pld <= advanced
    # The default grid puts +-e_r on grid points: PLD composes the pair exactly, up to FFT error.
    assert pld == pytest.approx(exact, rel=1e-8)
    assert compose(e, d, rounds, delta, "pld", value_discretization_interval=e / 3.7) >= exact * (1 - 1e-8)


def test_default_randomizer_delta_keeps_the_rounds_under_half_the_delta():
    # dh0 = n N delta / (18 R M^2) = 100 * 1000 * 1e-6 / (18 * 100 * 1e6) = 5.5556e-11
    dh0 = default_randomizer_delta(1e-6, num_silos=1000, silos_per_round=1000, records_per_silo=100, num_rounds=100)
    assert dh0 == pytest.approx(5.5556e-11, rel=1e-4)
    rp = round_privacy(1.0, dh0, **HAND)
    assert 100 * rp.delta <= 1e-6 / 2


@pytest.mark.parametrize("composition", ["advanced", "pld"])
@pytest.mark.parametrize(
    "target,m,n,big_n,rounds",
    [(0.1, 1000, 100, 1000, 100), (0.5, 2000, 10, 10_000, 1000), (0.3, None, 50, 1000, 200)],
)
def test_calibration_round_trip(composition, target, m, n, big_n, rounds):
    cal = calibrate_shuffled_sgd(target, 1e-6, num_silos=big_n, records_per_silo=n, num_rounds=rounds,
                                 silos_per_round=m, composition=composition)
    eh0, dh0 = cal.round.randomizer_epsilon, cal.round.randomizer_delta
    assert 0 < eh0 <= 1
    assert cal.noise_multiplier == pytest.approx(gaussian_noise_multiplier(eh0, dh0), rel=1e-12)
    # Account the result: at most the target, and tight (a slightly larger eh0 overshoots).
    assert cal.epsilon <= target
    assert cal.epsilon_after(rounds) == pytest.approx(cal.epsilon, rel=1e-9)
    assert cal.epsilon > 0.99 * target
    if m is None:
        looser = worst_round_privacy(eh0 * 1.001, dh0, num_silos=big_n, records_per_silo=n)
    else:
        looser = round_privacy(eh0 * 1.001, dh0, num_silos=big_n, silos_per_round=m, records_per_silo=n, check=False)
    assert compose(looser.epsilon, looser.delta, rounds, 1e-6, composition) > target


def test_calibration_caps_the_randomizer_at_epsilon_one():
    cal = calibrate_shuffled_sgd(5.0, 1e-6, num_silos=1000, records_per_silo=100, num_rounds=10, silos_per_round=1000)
    assert cal.round.randomizer_epsilon == 1.0
    assert cal.epsilon < 5.0


def test_pld_calibration_needs_less_noise_than_advanced():
    kwargs = dict(num_silos=1000, records_per_silo=100, num_rounds=100, silos_per_round=1000)
    advanced = calibrate_shuffled_sgd(0.1, 1e-6, composition="advanced", **kwargs)
    pld = calibrate_shuffled_sgd(0.1, 1e-6, composition="pld", **kwargs)
    assert pld.noise_multiplier < advanced.noise_multiplier


def test_round_epsilon_falls_with_m_and_n_and_takes_no_credit_for_sampling_silos():
    kwargs = dict(num_silos=10_000, records_per_silo=50)
    by_m = [round_privacy(0.8, 1e-9, silos_per_round=m, **kwargs).epsilon for m in (1000, 2000, 5000, 10_000)]
    assert all(round_privacy(0.8, 1e-9, silos_per_round=m, **kwargs).amplified for m in (1000, 10_000))
    assert np.all(np.diff(by_m) < 0)          # more reports to hide among
    by_n = [round_privacy(0.8, 1e-9, num_silos=10_000, silos_per_round=1000, records_per_silo=n).epsilon
            for n in (10, 50, 200)]
    assert np.all(np.diff(by_n) < 0)
    # The driver knows which silos took part, so N (how rarely a silo is picked) buys nothing.
    by_big_n = [round_privacy(0.8, 1e-9, num_silos=big_n, silos_per_round=1000, records_per_silo=50).epsilon
                for big_n in (1000, 5000, 20_000)]
    assert by_big_n[0] == by_big_n[1] == by_big_n[2]
    assert round_privacy(0.8, 1e-9, silos_per_round=1000, **kwargs).sampling_probability == 1 / 50


def test_calibrated_noise_is_monotone_in_m_and_n_and_independent_of_big_n():
    def multiplier(m, n, big_n):
        return calibrate_shuffled_sgd(0.2, 1e-6, num_silos=big_n, records_per_silo=n, num_rounds=500,
                                      silos_per_round=m).noise_multiplier

    assert multiplier(1000, 20, 10_000) > multiplier(3000, 20, 10_000) > multiplier(10_000, 20, 10_000)
    assert multiplier(1000, 10, 10_000) > multiplier(1000, 20, 10_000) > multiplier(1000, 80, 10_000)
    assert multiplier(1000, 20, 5000) == multiplier(1000, 20, 10_000) == multiplier(1000, 20, 40_000)


@pytest.mark.parametrize("m,audit", [(1000, 1.67), (500, 2.70)])
def test_silo_sampling_credit_the_driver_can_undo_is_not_taken(m, audit):
    """The audit's case: N = 2000 silos of n = 4 records, M per round, R = 100, target (1, 1e-5).
    Noise calibrated with the credit q = M/(nN) (participants secret) spends the audit's 1.67
    (M = 1000) and 2.70 (M = 500) for a record of the silo that took part most often (seed 0),
    since the driver sees its silo take part (q = 1/n). fedray calibrates without the credit and
    its ledger charges each silo's own rounds: the plan stays within the target. The chain is
    rebuilt here from FMT's shuffle bound and the subsampling step, apart from round_privacy."""
    big_n, n, rounds, target, delta = 2000, 4, 100, 1.0, 1e-5

    def spent(eh0, dh0, q, count=rounds):
        eh, dh = shuffled_epsilon_delta(eh0, dh0, m, min(m * dh0, 0.5))
        return compose(math.log1p(q * math.expm1(eh)), q * dh, count, delta, "advanced")

    # The old claim: the largest eh0 meeting the target with the credit, at the paper's dh0.
    old_dh0 = n * big_n * delta / (18.0 * rounds * m**2)
    lo, hi = 1e-6, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spent(mid, old_dh0, m / (n * big_n)) <= target else (lo, mid)
    busiest = int(UniformParticipation(m).counts(0, np.array([0]), rounds, big_n).max())   # 67 and 42 rounds
    assert spent(lo, old_dh0, 1.0 / n, busiest) == pytest.approx(audit, abs=0.005)

    cal = calibrate_shuffled_sgd(target, delta, num_silos=big_n, records_per_silo=n, num_rounds=rounds,
                                 silos_per_round=m)
    honest = spent(cal.round.randomizer_epsilon, cal.round.randomizer_delta, 1.0 / n)
    assert honest <= target and honest == pytest.approx(cal.epsilon, rel=1e-9)
    assert cal.noise_multiplier > gaussian_noise_multiplier(lo, old_dh0)      # it costs more noise


def test_composed_epsilon_grows_with_rounds():
    cal = calibrate_shuffled_sgd(0.5, 1e-6, num_silos=1000, records_per_silo=100, num_rounds=100, silos_per_round=1000)
    spent = [cal.epsilon_after(r) for r in (0, 1, 10, 50, 100)]
    assert spent[0] == 0.0
    assert np.all(np.diff(spent) > 0)


def test_worst_round_bounds_every_participant_count():
    worst = worst_round_privacy(0.7, 1e-8, num_silos=600, records_per_silo=20)
    for m in range(1, 601, 7):
        rp = round_privacy(0.7, 1e-8, num_silos=600, silos_per_round=m, records_per_silo=20, check=False)
        assert rp.epsilon <= worst.epsilon and rp.delta <= worst.delta


def test_no_amplification_outside_fmt_range():
    # M = 200, M dh0 = 2e-6: ln(200 / (16 ln 1e6)) = ln(0.905) < 0, so FMT gives nothing: eh = eh0.
    rp = round_privacy(0.5, 1e-8, num_silos=1000, silos_per_round=200, records_per_silo=10, check=False)
    assert not rp.amplified
    assert (rp.shuffle_epsilon, rp.shuffle_delta) == (0.5, 1e-8)
    assert rp.epsilon == pytest.approx(math.log1p(0.1 * math.expm1(0.5)), rel=1e-12)   # q = 1/n


@pytest.mark.parametrize(
    "call,key",
    [
        (lambda: round_privacy(1.5, 1e-8, **HAND), "randomizer_epsilon"),
        (lambda: round_privacy(0.5, 1e-8, num_silos=1000, silos_per_round=200, records_per_silo=10), "silos_per_round"),
        (lambda: round_privacy(0.5, 1e-8, num_silos=100, silos_per_round=200, records_per_silo=10, check=False),
         "silos_per_round"),
        (lambda: calibrate_shuffled_sgd(1.0, 1e-6, num_silos=100, records_per_silo=50, num_rounds=50), "num_silos"),
        (lambda: calibrate_shuffled_sgd(1.0, 1e-6, num_silos=1000, records_per_silo=50, num_rounds=50,
                                        silos_per_round=300), "silos_per_round"),
        (lambda: calibrate_shuffled_sgd(1.0, 1e-6, num_silos=1000, records_per_silo=50, num_rounds=50,
                                        composition="rdp"), "composition"),
        (lambda: calibrate_shuffled_sgd(0.0, 1e-6, num_silos=1000, records_per_silo=50, num_rounds=50),
         "target_epsilon"),
    ],
)
def test_preconditions_are_clear_errors(call, key):
    with pytest.raises(ConfigError) as err:
        call()
    assert err.value.key == key
    assert isinstance(err.value, ValueError)


