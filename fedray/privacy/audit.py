"""Empirical privacy audits: a statistically valid lower bound on a mechanism's epsilon.

An audit runs the mechanism many times on a fixed neighbouring pair (D, D'), turns each output into
a scalar with a test statistic, and thresholds it to guess which dataset produced it. If the
mechanism is (eps, delta)-DP, every such test obeys (Kairouz, Oh, Viswanath 2015; the hypothesis
testing view of DP)

    FPR + e^eps FNR >= 1 - delta   and   FNR + e^eps FPR >= 1 - delta,

so upper confidence bounds FPR_hi, FNR_hi give, with confidence 1 - alpha,

    eps >= max(ln((1 - delta - FNR_hi) / FPR_hi), ln((1 - delta - FPR_hi) / FNR_hi), 0).

A lower bound above the claimed epsilon is evidence (at confidence 1 - alpha) that the mechanism
or its accounting is broken; a lower bound below it proves nothing about correctness, only that
this test could not refute it.

Procedure (``audit_epsilon``):

1. Draw ``num_draws`` outputs on D (dataset_flag 0) and on D' (flag 1) from the vectorised sampler.
2. Split each into a calibration half and an evaluation half. The calibration half fits the
   statistic (default: projection on the difference of the calibration means, the likelihood-ratio
   test for Gaussian noise) and picks the threshold that maximises the bound computed on it. The
   evaluation half, untouched by any choice, gives the counts; so the reported bound has no
   selection bias.
3. Clopper-Pearson one-sided upper bounds at level alpha/2 each on FPR and FNR (a union bound
   makes both hold together with probability >= 1 - alpha).

The test says "D'" when the statistic exceeds the threshold: FPR = P_D(T > t), FNR = P_D'(T <= t).

Anything that draws takes a ``np.random.Generator``; the audit draws D's outputs first, then D''s.

Later mechanisms (ISRL-DP silo messages, shuffled reports, user-level releases) are audited the same
way: write a sampler that runs the mechanism on the two neighbours (several rounds stacked on an
axis for a composed release) and pass the claimed epsilon's delta.

References
----------
.. [KOV15] P. Kairouz, S. Oh, P. Viswanath. The composition theorem for differential privacy. ICML 2015.
.. [JUO20] M. Jagielski, J. Ullman, A. Oprea. Auditing differentially private machine learning:
   how private is private SGD? NeurIPS 2020 (Clopper-Pearson audits of DP-SGD).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import stats

from fedray.errors import ConfigError

__all__ = [
    "AuditResult",
    "audit_epsilon",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "gaussian_mechanism_sampler",
]

Sampler = Callable[[int, int, np.random.Generator], np.ndarray]
Statistic = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class AuditResult:
    """What one audit measured.

    Attributes
    ----------
    eps_lower : float
        Lower bound on epsilon at ``delta``, valid with probability >= ``confidence``; >= 0.
    fpr, fnr : float
        Point estimates on the evaluation half: P_D(T > threshold), P_D'(T <= threshold).
    fpr_hi, fnr_hi : float
        Their Clopper-Pearson upper bounds (each one-sided at (1 - confidence)/2).
    threshold : float
        The threshold picked on the calibration half.
    num_draws : int
        Mechanism runs per dataset (half calibrate, half evaluate).
    confidence : float
        1 - alpha, joint over both bounds.
    delta : float
        The delta at which the bound holds.
    """

    eps_lower: float
    fpr: float
    fnr: float
    fpr_hi: float
    fnr_hi: float
    threshold: float
    num_draws: int
    confidence: float
    delta: float


def clopper_pearson_upper(successes: np.ndarray | int, trials: int, alpha: float) -> np.ndarray:
    """One-sided Clopper-Pearson upper bound: P(true rate <= bound) >= 1 - alpha.

    The bound is the (1 - alpha) quantile of Beta(k + 1, m - k), and 1 when k = m.
    """
    k = np.asarray(successes, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        upper = stats.beta.ppf(1.0 - alpha, k + 1.0, trials - k)
    return np.where(k >= trials, 1.0, upper)


def epsilon_lower_bound(fpr_hi: np.ndarray | float, fnr_hi: np.ndarray | float, delta: float) -> np.ndarray:
    """max(ln((1 - delta - FNR_hi)/FPR_hi), ln((1 - delta - FPR_hi)/FNR_hi), 0), elementwise.

    A term whose numerator is <= 0 says nothing and counts as 0.
    """
    fpr_hi = np.asarray(fpr_hi, dtype=np.float64)
    fnr_hi = np.asarray(fnr_hi, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.log(np.maximum(1.0 - delta - fnr_hi, 0.0) / fpr_hi)
        second = np.log(np.maximum(1.0 - delta - fpr_hi, 0.0) / fnr_hi)
    best = np.fmax(first, second)
    return np.where(np.isnan(best), 0.0, np.maximum(best, 0.0))


def _projection_statistic(cal0: np.ndarray, cal1: np.ndarray) -> Statistic:
    """Projection on the difference of the calibration means (flattened outputs)."""
    direction = cal1.reshape(len(cal1), -1).mean(axis=0) - cal0.reshape(len(cal0), -1).mean(axis=0)

    def statistic(outputs: np.ndarray) -> np.ndarray:
        return outputs.reshape(len(outputs), -1) @ direction

    return statistic


def _candidate_thresholds(stat0: np.ndarray, stat1: np.ndarray, num_thresholds: int) -> np.ndarray:
    """Order statistics of the pooled calibration statistics, dense in both tails."""
    pooled = np.sort(np.concatenate([stat0, stat1]))
    m = len(pooled)
    tail = np.unique(np.geomspace(1, m / 2, num_thresholds // 2).astype(np.int64))
    middle = np.linspace(0, m - 1, num_thresholds // 2).astype(np.int64)
    ranks = np.unique(np.concatenate([tail - 1, m - tail, middle]))
    return pooled[ranks]


def _rates(stat0: np.ndarray, stat1: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts of false positives (D, T > t) and false negatives (D', T <= t) at each threshold."""
    s0, s1 = np.sort(stat0), np.sort(stat1)
    false_pos = len(s0) - np.searchsorted(s0, thresholds, side="right")
    false_neg = np.searchsorted(s1, thresholds, side="right")
    return false_pos, false_neg


def _as_statistic_values(values: np.ndarray, num: int, name: str) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (num,):
        raise ConfigError(name, values.shape, f"one scalar per draw, shape ({num},)")
    if not np.all(np.isfinite(values)):
        raise ConfigError(name, "non-finite values", "finite statistics")
    return values


def audit_epsilon(
    sample: Sampler,
    num_draws: int,
    rng: np.random.Generator,
    *,
    delta: float = 0.0,
    alpha: float = 0.05,
    statistic: Statistic | None = None,
    num_thresholds: int = 1024,
) -> AuditResult:
    """Lower-bound a mechanism's epsilon at ``delta`` from ``num_draws`` runs on each neighbour.

    Parameters
    ----------
    sample : callable
        ``sample(dataset_flag, num_draws, rng) -> outputs`` with outputs of shape (num_draws, ...):
        num_draws independent runs of the mechanism on D (flag 0) or on its neighbour D' (flag 1).
    num_draws : int
        Runs per dataset, >= 4; half calibrate the test, half evaluate it.
    rng : np.random.Generator
        The only source of randomness (passed to ``sample``).
    delta : float
        The delta of the claimed guarantee, in [0, 1).
    alpha : float
        1 - confidence, in (0, 1); split equally between the FPR and FNR bounds.
    statistic : callable, optional
        ``statistic(outputs) -> (num_draws,)`` scalars, larger meaning "more like D'". Default: the
        projection on the difference of the calibration half's means (for R stacked rounds of a
        Gaussian mechanism, the sum of the per-round projections).
    num_thresholds : int
        Candidate thresholds tried on the calibration half.

    Returns
    -------
    AuditResult

    Raises
    ------
    ConfigError
        If an argument is out of range, or the sampler or statistic returns the wrong shape.
    """
    if isinstance(num_draws, bool) or int(num_draws) != num_draws or num_draws < 4:
        raise ConfigError("num_draws", num_draws, "an integer >= 4")
    if not 0 <= delta < 1:
        raise ConfigError("delta", delta, "in [0, 1)")
    if not 0 < alpha < 1:
        raise ConfigError("alpha", alpha, "in (0, 1)")
    if int(num_thresholds) < 2:
        raise ConfigError("num_thresholds", num_thresholds, "an integer >= 2")
    num_draws = int(num_draws)

    outputs = []
    for flag in (0, 1):
        out = np.asarray(sample(flag, num_draws, rng))
        if out.ndim == 0 or out.shape[0] != num_draws:
            raise ConfigError("sample", out.shape, f"an array with {num_draws} draws on axis 0")
        outputs.append(out)
    half = num_draws // 2
    cal0, ev0 = outputs[0][:half], outputs[0][half:]
    cal1, ev1 = outputs[1][:half], outputs[1][half:]
    stat_fn = _projection_statistic(cal0, cal1) if statistic is None else statistic

    s_cal0 = _as_statistic_values(stat_fn(cal0), len(cal0), "statistic")
    s_cal1 = _as_statistic_values(stat_fn(cal1), len(cal1), "statistic")
    thresholds = _candidate_thresholds(s_cal0, s_cal1, int(num_thresholds))
    fp, fn = _rates(s_cal0, s_cal1, thresholds)
    score = epsilon_lower_bound(
        clopper_pearson_upper(fp, half, alpha / 2), clopper_pearson_upper(fn, half, alpha / 2), delta
    )
    threshold = float(thresholds[int(np.argmax(score))])

    s_ev0 = _as_statistic_values(stat_fn(ev0), len(ev0), "statistic")
    s_ev1 = _as_statistic_values(stat_fn(ev1), len(ev1), "statistic")
    fp_ev, fn_ev = _rates(s_ev0, s_ev1, np.array([threshold]))
    fpr_hi = float(clopper_pearson_upper(fp_ev[0], len(ev0), alpha / 2))
    fnr_hi = float(clopper_pearson_upper(fn_ev[0], len(ev1), alpha / 2))
    return AuditResult(
        eps_lower=float(epsilon_lower_bound(fpr_hi, fnr_hi, delta)),
        fpr=float(fp_ev[0]) / len(ev0),
        fnr=float(fn_ev[0]) / len(ev1),
        fpr_hi=fpr_hi,
        fnr_hi=fnr_hi,
        threshold=threshold,
        num_draws=num_draws,
        confidence=1.0 - alpha,
        delta=float(delta),
    )


def gaussian_mechanism_sampler(
    output0: np.ndarray, output1: np.ndarray, noise_std: float, *, num_rounds: int = 1
) -> Sampler:
    """A sampler for the Gaussian mechanism whose noiseless outputs on D and D' are given.

    Each draw is ``output_flag + N(0, noise_std^2 I)``; with ``num_rounds`` > 1 the draw stacks that
    many independent noisy releases of the same query on axis 1 (shape (num_draws, num_rounds, *d)),
    the R-fold composition on the same neighbouring pair. Compute ``output0`` and ``output1`` with
    the real query (clip, average) on the two datasets.
    """
    outs = (np.asarray(output0, dtype=np.float64), np.asarray(output1, dtype=np.float64))
    if outs[0].shape != outs[1].shape:
        raise ConfigError("output1", outs[1].shape, f"the shape of output0, {outs[0].shape}")
    if not noise_std >= 0:
        raise ConfigError("noise_std", noise_std, ">= 0")
    if int(num_rounds) < 1:
        raise ConfigError("num_rounds", num_rounds, "an integer >= 1")

    def sample(dataset_flag: int, num_draws: int, rng: np.random.Generator) -> np.ndarray:
        if dataset_flag not in (0, 1):
            raise ConfigError("dataset_flag", dataset_flag, "0 (D) or 1 (D')")
        rounds = () if num_rounds == 1 else (int(num_rounds),)
        shape = (int(num_draws), *rounds, *outs[0].shape)
        return outs[dataset_flag] + noise_std * rng.standard_normal(shape)

    return sample
