"""Empirical audits of the Gaussian mechanism on a clipped mean, correct and broken."""

import dataclasses
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp

from fedray.errors import ConfigError
from fedray.privacy.audit import (
    AuditResult,
    audit_epsilon,
    clopper_pearson_upper,
    epsilon_lower_bound,
    gaussian_mechanism_sampler,
)

REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
K, L2_CLIP, DIM = 20, 1.0, 4  # records per dataset, clip norm, dimension
SENSITIVITY = 2 * L2_CLIP / K  # replace-one L2 sensitivity of the clipped mean
TARGET_EPSILON, TARGET_DELTA = 2.0, 1e-5
NUM_DRAWS = 500_000


def clipped_mean(records: np.ndarray, l2_clip: float) -> np.ndarray:
    norms = np.linalg.norm(records, axis=1, keepdims=True)
    return (records * np.minimum(1.0, l2_clip / np.maximum(norms, 1e-300))).mean(axis=0)


def neighbouring_means() -> tuple[np.ndarray, np.ndarray]:
    """Clipped means of D and of D' = D with record 0 replaced by a worst-case canary."""
    records = 3.0 * np.random.default_rng(7).standard_normal((K, DIM))
    records[0] *= 2.0 * L2_CLIP / np.linalg.norm(records[0])  # record 0 is clipped to norm L2_CLIP
    neighbour = records.copy()
    neighbour[0] = -10.0 * records[0]  # points the other way, clipped to norm L2_CLIP too
    return clipped_mean(records, L2_CLIP), clipped_mean(neighbour, L2_CLIP)


def claimed_epsilon(noise_std: float, num_rounds: int = 1) -> float:
    """epsilon at TARGET_DELTA of num_rounds Gaussian releases of the clipped mean, by PLD.

    dp-accounting 0.6.0's PLD accountant under REPLACE_ONE doubles the sensitivity a GaussianDpEvent
    stands for (its noise multiplier is relative to one record's contribution, here L2_CLIP / K),
    while its RDP accountant does not (relative to the replace-one sensitivity 2 L2_CLIP / K).
    ``test_accountant_conventions_for_replace_one`` pins both.
    """
    event = dp_accounting.GaussianDpEvent(noise_std / (L2_CLIP / K))
    accountant = pld.PLDAccountant(REPLACE_ONE)
    accountant.compose(event if num_rounds == 1 else dp_accounting.SelfComposedDpEvent(event, num_rounds))
    return float(accountant.get_epsilon(TARGET_DELTA))


def test_worst_case_canary_moves_the_mean_by_the_sensitivity():
    mean0, mean1 = neighbouring_means()
    assert np.linalg.norm(mean1 - mean0) == pytest.approx(SENSITIVITY, rel=1e-12)


def test_accountant_conventions_for_replace_one():
    noise_multiplier = 2.0  # noise std over the replace-one sensitivity
    analytic = dp_accounting.get_epsilon_gaussian(noise_multiplier, TARGET_DELTA)
    by_pld = claimed_epsilon(noise_multiplier * SENSITIVITY)
    rdp_accountant = rdp.RdpAccountant(neighboring_relation=REPLACE_ONE)
    rdp_accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier))
    # PLD (pessimistic discretisation) sits just above the exact analytic Gaussian value, RDP above it.
    assert analytic <= by_pld <= analytic + 1e-3
    assert by_pld <= rdp_accountant.get_epsilon(TARGET_DELTA)
    # Passing the replace-one multiplier straight to PLD under REPLACE_ONE would claim twice the shift.
    naive = pld.PLDAccountant(REPLACE_ONE)
    naive.compose(dp_accounting.GaussianDpEvent(noise_multiplier))
    assert naive.get_epsilon(TARGET_DELTA) == pytest.approx(
        dp_accounting.get_epsilon_gaussian(noise_multiplier / 2, TARGET_DELTA), abs=1e-3
    )


def test_three_rounds_compose_like_one_round_with_sqrt3_less_noise():
    std = dp_accounting.get_sigma_gaussian(TARGET_EPSILON, TARGET_DELTA) * SENSITIVITY
    assert claimed_epsilon(math.sqrt(3) * std, num_rounds=3) == pytest.approx(claimed_epsilon(std), abs=2e-3)


def _audit(noise_std: float, num_rounds: int = 1, statistic=None, seed: int = 0) -> AuditResult:
    mean0, mean1 = neighbouring_means()
    sampler = gaussian_mechanism_sampler(mean0, mean1, noise_std, num_rounds=num_rounds)
    return audit_epsilon(
        sampler, NUM_DRAWS, np.random.default_rng(seed), delta=TARGET_DELTA, alpha=0.05, statistic=statistic
    )


@pytest.mark.slow
def test_correct_gaussian_mechanism_passes_its_audit():
    # Noise from the analytic Gaussian mechanism (Balle-Wang 2018) for (2, 1e-5); claim from PLD.
    std = dp_accounting.get_sigma_gaussian(TARGET_EPSILON, TARGET_DELTA) * SENSITIVITY
    claimed = claimed_epsilon(std)
    result = _audit(std)
    # seed 0: claimed 2.000, eps_lower 1.54 at 95% confidence, 500_000 draws per dataset
    assert claimed == pytest.approx(TARGET_EPSILON, abs=2e-3)
    assert result.eps_lower <= claimed
    assert result.eps_lower > 1.0  # the audit has power: it gets within a factor 2 of the truth


@pytest.mark.slow
def test_half_the_noise_is_caught():
    std = dp_accounting.get_sigma_gaussian(TARGET_EPSILON, TARGET_DELTA) * SENSITIVITY
    claimed = claimed_epsilon(std)  # claims the original epsilon ...
    result = _audit(std / 2)  # ... but runs with half the noise
    # seed 0: eps_lower 3.16 > claimed 2.000 (true epsilon of the broken mechanism: 4.39)
    assert result.eps_lower > claimed


@pytest.mark.slow
@pytest.mark.parametrize("noise_factor,caught", [(1.0, False), (0.5, True)])
def test_three_composed_rounds(noise_factor, caught):
    # R = 3 releases on the same pair; per-round noise sqrt(3) times the one-round calibration, so the
    # 3-fold composition (dp-accounting SelfComposedDpEvent) claims about the same epsilon.
    std = math.sqrt(3) * dp_accounting.get_sigma_gaussian(TARGET_EPSILON, TARGET_DELTA) * SENSITIVITY
    claimed = claimed_epsilon(std, num_rounds=3)
    mean0, mean1 = neighbouring_means()
    direction = (mean1 - mean0) / np.linalg.norm(mean1 - mean0)  # the auditor knows its canary

    def sum_of_projections(outputs: np.ndarray) -> np.ndarray:
        return (outputs @ direction).sum(axis=1)

    result = _audit(noise_factor * std, num_rounds=3, statistic=sum_of_projections)
    # seed 0: claimed 2.000; eps_lower 1.43 (correct noise), 3.03 (half the noise)
    assert (result.eps_lower > claimed) is caught
    if not caught:
        assert result.eps_lower > 1.0


@pytest.mark.slow
def test_default_statistic_handles_stacked_rounds():
    std = math.sqrt(3) * dp_accounting.get_sigma_gaussian(TARGET_EPSILON, TARGET_DELTA) * SENSITIVITY
    result = _audit(std / 2, num_rounds=3)
    assert result.eps_lower > claimed_epsilon(std, num_rounds=3)


def test_identical_datasets_give_no_evidence():
    mean0, _ = neighbouring_means()
    sampler = gaussian_mechanism_sampler(mean0, mean0, 0.1)
    result = audit_epsilon(sampler, 100_000, np.random.default_rng(3))
    assert result.eps_lower <= 0.05


def test_audit_is_deterministic_given_the_generator_and_reports_its_inputs():
    mean0, mean1 = neighbouring_means()
    sampler = gaussian_mechanism_sampler(mean0, mean1, 0.2)
    first = audit_epsilon(sampler, 10_000, np.random.default_rng(11), delta=1e-5, alpha=0.1)
    second = audit_epsilon(sampler, 10_000, np.random.default_rng(11), delta=1e-5, alpha=0.1)
    assert first == second
    assert (first.num_draws, first.confidence, first.delta) == (10_000, 0.9, 1e-5)
    assert first.fpr <= first.fpr_hi and first.fnr <= first.fnr_hi
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.eps_lower = 0.0  # type: ignore[misc]


def test_clopper_pearson_hand_numbers():
    # k = 0 of m = 100 at alpha = 0.05: the bound solves (1 - u)^100 = 0.05, u = 1 - 0.05^(1/100) = 0.0295130
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-10)
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(0.0295130, abs=1e-7)
    # k = m: the bound is 1; k = 50 of 100: above the point estimate 0.5
    np.testing.assert_array_equal(clopper_pearson_upper(np.array([100]), 100, 0.05), [1.0])
    assert 0.5 < clopper_pearson_upper(50, 100, 0.05) < 0.6


def test_epsilon_lower_bound_hand_numbers():
    # FPR_hi = 0.01, FNR_hi = 0.2, delta = 0: max(ln(0.8 / 0.01), ln(0.99 / 0.2)) = ln 80 = 4.3820266
    assert epsilon_lower_bound(0.01, 0.2, 0.0) == pytest.approx(math.log(80.0), rel=1e-12)
    # delta enters the numerators: ln((1 - 0.1 - 0.2) / 0.01) = ln 70
    assert epsilon_lower_bound(0.01, 0.2, 0.1) == pytest.approx(math.log(70.0), rel=1e-12)
    # rates that a coin flip achieves give 0, never a negative bound
    assert epsilon_lower_bound(0.6, 0.6, 0.0) == 0.0


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"num_draws": 2}, "num_draws"),
        ({"delta": 1.0}, "delta"),
        ({"alpha": 0.0}, "alpha"),
        ({"statistic": lambda y: y[:, :2]}, "statistic"),
    ],
)
def test_audit_errors_name_the_value(kwargs, name):
    mean0, mean1 = neighbouring_means()
    args = {"num_draws": 100, **kwargs}
    with pytest.raises(ConfigError, match=f"^{name} must be"):
        audit_epsilon(gaussian_mechanism_sampler(mean0, mean1, 0.1), rng=np.random.default_rng(0), **args)


def test_sampler_shape_is_checked():
    def short_sampler(flag, num_draws, rng):
        return rng.standard_normal((num_draws - 1, 2))

    with pytest.raises(ConfigError, match="^sample must be"):
        audit_epsilon(short_sampler, 100, np.random.default_rng(0))
