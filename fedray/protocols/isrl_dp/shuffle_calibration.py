"""Noise calibration of shuffled noisy MB-SGD (SDP) by the explicit privacy chain of seed-004 §3.7.

The paper (Lowy & Razaviyayn, Thm 5.1 / G.1) states sigma^2 = C L^2 R M ln(...) ... with an
unspecified constant C. fedray instantiates the proof's chain numerically ([OURS] in the spec):

1. Per-sample randomizer (K = 1): a record's gradient, clipped to L, plus N(0, sigma^2 I). With
   sigma^2 = 8 L^2 ln(2/dh0) / eh0^2 it is (eh0, dh0)-DP under replace-one (Gaussian mechanism,
   Dwork-Roth Thm A.1 with sensitivity 2L; 2/dh0 > 1.25/dh0 is the spec's conservative form;
   needs eh0 <= 1). In noise-multiplier terms (std over the sensitivity 2L):
   noise_multiplier = sqrt(2 ln(2/dh0)) / eh0.
2. Shuffling the M reports of a round (FMT21 Theorem 3.8 with one record per randomizer, via
   ``fedray.privacy.amplification.shuffled_epsilon_delta`` at the shuffle delta M dh0, the
   paper's choice d = N n d0 with n = 1): (eh, dh). Outside FMT's range the function returns
   (eh0, dh0), i.e. no amplification; ``RoundPrivacy.amplified`` says which happened.
3. Subsampling (1 of n records in a participating silo): a record enters the round with
   probability q = 1/n. No credit is taken for sampling the M silos: the driver draws the
   participants and sends them in every round's payload, so the server knows whether a record's
   silo took part (q = M/(nN) would need the participants hidden from it, which an independent
   audit showed the driver can undo: claimed eps 1 was eps 1.67 at N = 2000, M = 1000, n = 4,
   R = 100). The exact step for replace-one, e_r = ln(1 + q (e^eh - 1)), d_r = q dh (Balle,
   Barthe, Gaboardi 2018, Thm 9 / advanced joint convexity). It applies because every silo runs
   the same randomizer, so the shuffled multiset depends only on the multiset of sampled records,
   and a sample containing the record can be coupled to one without it by a single substitution.
4. Composition over R rounds, two routes:
   * "advanced" (as the paper): Dwork-Roth Thm 3.20, eps = sqrt(2R ln(1/d')) e_r + R e_r (e^e_r - 1)
     at delta = R d_r + d'; fedray spends the whole remaining slack d' = delta - R d_r (>= delta/2
     with the default dh0; the paper fixes d' = delta/2, which is looser).
   * "pld": dp-accounting's pessimistic PLD of an (e_r, d_r)-DP round
     (``pld.privacy_loss_distribution.from_privacy_parameters``), self-composed R times, epsilon at
     delta. Always at most the advanced route up to discretization (the worst (e, d) pair composes
     exactly as the binomial of Kairouz-Oh-Viswanath; advanced composition bounds it).
5. Calibration: bisection for the largest eh0 in (0, 1] whose composed epsilon is at most the
   target, with dh0 = n delta / (18 R M), so that R d_r <= delta / 2 at q = 1/n (seed-004 §3.7's
   n N delta / (18 R M^2) is the same rule with the silo-sampling credit q = M/(nN); both agree at M = N).

Trust model: the server is untrusted; silos trust themselves and a shuffler that only permutes and
drops sender identity (seed-004 Definition 3). Unit and neighbouring relation: record level; one
record anywhere in the federation is replaced (REPLACE_ONE over the union of the silos' data).
Guarantee: the shuffled transcript of all R rounds is (epsilon, delta)-SDP.
Assumptions: K = 1 record per silo per round, drawn uniformly from the silo's n records; the M
participants are a uniformly random subset of the N silos, independent of the data (with
``silos_per_round=None`` any data-independent participation law: the round's guarantee is the
worst over every participant count M' <= N, since a mixture of (e, d)-DP mechanisms with
data-independent weights is (max e, max d)-DP); unequal silo sizes use the smallest n (largest q).
Randomness: none; deterministic numerics.

Symbols: N ``num_silos``, M ``silos_per_round``, n ``records_per_silo``, R ``num_rounds``,
(eh0, dh0) the randomizer's, (eh, dh) a shuffled round's, (e_r, d_r) a round's after subsampling.

References
----------
.. [LR23] A. Lowy, M. Razaviyayn. Private federated learning without a trusted server. ICLR 2023
   (Thm 5.1 / G.1; seed-004 §3.7).
.. [FMT21] V. Feldman, A. McMillan, K. Talwar. Hiding among the clones. FOCS 2021 (Thm 3.8).
.. [BBG18] B. Balle, G. Barthe, M. Gaboardi. Privacy amplification by subsampling. NeurIPS 2018.
.. [DR14] C. Dwork, A. Roth. The algorithmic foundations of differential privacy (Thm 3.20, A.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from fedray.core.terms import Composition
from fedray.errors import ConfigError
from fedray.privacy.amplification import shuffled_epsilon_delta

__all__ = [
    "COMPOSITIONS",
    "RoundPrivacy",
    "ShuffleCalibration",
    "calibrate_shuffled_sgd",
    "compose",
    "default_randomizer_delta",
    "gaussian_noise_multiplier",
    "round_privacy",
    "worst_round_privacy",
]

COMPOSITIONS = tuple(Composition)


@dataclass(frozen=True)
class RoundPrivacy:
    """The guarantee of one round along the chain: randomizer, shuffled, after subsampling."""

    randomizer_epsilon: float     # eh0
    randomizer_delta: float       # dh0
    shuffle_epsilon: float        # eh
    shuffle_delta: float          # dh
    sampling_probability: float   # q = 1/n (no credit for sampling silos: the driver knows who took part)
    epsilon: float                # e_r
    delta: float                  # d_r
    amplified: bool               # FMT's bound applied (False: eh = eh0, no amplification)


def _integer(key: str, value, lowest: int = 1) -> int:
    if isinstance(value, bool) or int(value) != value or value < lowest:
        raise ConfigError(key, value, f"an integer >= {lowest}")
    return int(value)


def gaussian_noise_multiplier(randomizer_epsilon: float, randomizer_delta: float) -> float:
    """sqrt(2 ln(2/dh0)) / eh0: sigma^2 = 8 L^2 ln(2/dh0)/eh0^2 over the sensitivity 2L (seed-004 §3.7).

    Hand value: eh0 = 0.5, dh0 = 1e-8: sqrt(2 ln 2e8) / 0.5 = sqrt(38.227656) / 0.5 = 12.365704.
    """
    if not 0 < randomizer_epsilon <= 1:
        raise ConfigError("randomizer_epsilon", randomizer_epsilon, "in (0, 1] (Gaussian mechanism, seed-004 §3.7)")
    if not 0 < randomizer_delta < 1:
        raise ConfigError("randomizer_delta", randomizer_delta, "in (0, 1)")
    return math.sqrt(2.0 * math.log(2.0 / randomizer_delta)) / randomizer_epsilon


def default_randomizer_delta(
    target_delta: float, *, num_silos: int, silos_per_round: int, records_per_silo: int, num_rounds: int
) -> float:
    """dh0 = n delta / (18 R M), which keeps R d_r <= delta / 2 with q = 1/n (module docstring, step 5;
    seed-004 §3.7's n N delta / (18 R M^2) at M = N). ``num_silos`` is kept for the callers' symmetry."""
    return records_per_silo * target_delta / (18.0 * num_rounds * silos_per_round)


def round_privacy(
    randomizer_epsilon: float,
    randomizer_delta: float,
    *,
    num_silos: int,
    silos_per_round: int,
    records_per_silo: int,
    check: bool = True,
) -> RoundPrivacy:
    """(e_r, d_r) of one round with M participants: shuffle (FMT21 Thm 3.8), then subsample.

    Parameters
    ----------
    randomizer_epsilon, randomizer_delta : float
        (eh0, dh0) of the per-record Gaussian randomizer; eh0 in (0, 1], dh0 in (0, 1).
    num_silos, silos_per_round, records_per_silo : int
        N, M (1 <= M <= N), n.
    check : bool
        Enforce the paper's precondition M >= 16 ln(2/dh0) (seed-004 §3.5). Without it the chain
        is still valid: FMT's own range is checked inside and fails to "no amplification".

    Returns
    -------
    RoundPrivacy

    Raises
    ------
    ConfigError
        If an argument is out of range or (with ``check``) M < 16 ln(2/dh0).
    """
    eh0, dh0 = float(randomizer_epsilon), float(randomizer_delta)
    gaussian_noise_multiplier(eh0, dh0)  # range checks of (eh0, dh0)
    big_n = _integer("num_silos", num_silos)
    m = _integer("silos_per_round", silos_per_round)
    n = _integer("records_per_silo", records_per_silo)
    if m > big_n:
        raise ConfigError("silos_per_round", m, f"an integer in [1, {big_n}] (num_silos)")
    if check and m < 16.0 * math.log(2.0 / dh0):
        raise ConfigError(
            "silos_per_round", m, f">= 16 ln(2/dh0) = {16.0 * math.log(2.0 / dh0):.1f} for amplification by shuffling"
        )
    shuffle_delta = min(m * dh0, 0.5)  # FMT's delta, d = N n d0 with n = 1 (seed-004 SH)
    eh, dh = shuffled_epsilon_delta(eh0, dh0, m, shuffle_delta)
    q = 1.0 / n   # the record's silo is known to take part: no credit for sampling silos (step 3)
    return RoundPrivacy(
        randomizer_epsilon=eh0,
        randomizer_delta=dh0,
        shuffle_epsilon=eh,
        shuffle_delta=dh,
        sampling_probability=q,
        epsilon=math.log1p(q * math.expm1(eh)),
        delta=q * dh,
        amplified=eh < eh0,
    )


def worst_round_privacy(
    randomizer_epsilon: float, randomizer_delta: float, *, num_silos: int, records_per_silo: int
) -> RoundPrivacy:
    """The round guarantee for an unknown participant count: the worst over every M' in [1, N].

    Returns the RoundPrivacy of the M' with the largest e_r, with ``delta`` replaced by the largest
    d_r over all M' (each M' is (e_r(M'), d_r(M'))-DP, so the pair of maxima holds for all).
    """
    rounds = [
        round_privacy(
            randomizer_epsilon, randomizer_delta, num_silos=num_silos, silos_per_round=m,
            records_per_silo=records_per_silo, check=False,
        )
        for m in range(1, _integer("num_silos", num_silos) + 1)
    ]
    worst = max(rounds, key=lambda r: r.epsilon)
    delta = max(r.delta for r in rounds)
    return replace(worst, delta=delta)


def compose(
    round_epsilon: float,
    round_delta: float,
    num_rounds: int,
    target_delta: float,
    composition: Composition = Composition.ADVANCED,
    *,
    value_discretization_interval: float | None = None,
) -> float:
    """epsilon at ``target_delta`` of R adaptive rounds, each (e_r, d_r)-DP.

    "advanced": Dwork-Roth Thm 3.20 with slack d' = target_delta - R d_r (inf if that is <= 0).
    "pld": dp-accounting's pessimistic PLD from (e_r, d_r), self-composed R times. The default
    discretization interval is e_r itself: the pair's losses +-e_r are then exact grid points
    (e_r / e_r = 1 in floating point), so nothing is rounded and the PLD composes the worst
    (e_r, d_r)-DP pair exactly (up to FFT error, ~1e-10 relative; tests compare it with the
    closed-form binomial composition of Kairouz-Oh-Viswanath). Any other interval rounds
    pessimistically and stays an upper bound.
    """
    r = _integer("num_rounds", num_rounds)
    if not 0 < target_delta < 1:
        raise ConfigError("target_delta", target_delta, "in (0, 1)")
    if composition not in COMPOSITIONS:
        raise ConfigError("composition", composition, f"one of {COMPOSITIONS}")
    e, d = float(round_epsilon), float(round_delta)
    if e <= 0:
        return 0.0 if r * d <= target_delta else math.inf
    if composition == Composition.ADVANCED:
        slack = target_delta - r * d
        if slack <= 0:
            return math.inf
        return math.sqrt(2.0 * r * math.log(1.0 / slack)) * e + r * e * math.expm1(e)
    from dp_accounting.pld import privacy_loss_distribution     # a second of imports: only when used
    from dp_accounting.pld.common import DifferentialPrivacyParameters

    interval = e if value_discretization_interval is None else float(value_discretization_interval)
    pld = privacy_loss_distribution.from_privacy_parameters(
        DifferentialPrivacyParameters(e, d), value_discretization_interval=interval
    )
    return float(pld.self_compose(r).get_epsilon_for_delta(target_delta))


@dataclass(frozen=True)
class ShuffleCalibration:
    """A solved chain: the noise to use and what it guarantees.

    ``noise_multiplier`` is noise std over the replace-one sensitivity 2 l2_clip of one record's
    clipped gradient: noise_std = noise_multiplier * 2 * l2_clip.
    """

    target_epsilon: float
    target_delta: float
    num_silos: int
    silos_per_round: int | None   # None: any participation law (worst over M' <= N)
    records_per_silo: int
    num_rounds: int
    composition: Composition
    noise_multiplier: float
    round: RoundPrivacy
    epsilon: float                # composed over num_rounds; <= target_epsilon

    def epsilon_after(self, rounds: int) -> float:
        """epsilon at ``target_delta`` after ``rounds`` rounds (0 for none), for per-round logging."""
        if rounds == 0:
            return 0.0
        return compose(self.round.epsilon, self.round.delta, rounds, self.target_delta, self.composition)


def _round_for(
    eh0: float, dh0: float, num_silos: int, silos_per_round: int | None, records_per_silo: int
) -> RoundPrivacy:
    if silos_per_round is None:
        return worst_round_privacy(eh0, dh0, num_silos=num_silos, records_per_silo=records_per_silo)
    return round_privacy(
        eh0, dh0, num_silos=num_silos, silos_per_round=silos_per_round, records_per_silo=records_per_silo, check=False
    )


def calibrate_shuffled_sgd(
    target_epsilon: float,
    target_delta: float,
    *,
    num_silos: int,
    records_per_silo: int,
    num_rounds: int,
    silos_per_round: int | None = None,
    composition: Composition = Composition.ADVANCED,
    randomizer_delta: float | None = None,
    relative_tolerance: float = 1e-4,
) -> ShuffleCalibration:
    """The largest eh0 in (0, 1] (least noise) whose composed epsilon is at most the target.

    Parameters
    ----------
    target_epsilon : float
        > 0.
    target_delta : float
        In (0, 1).
    num_silos, records_per_silo, num_rounds : int
        N, n (the smallest silo's), R.
    silos_per_round : int, optional
        M, when every round has exactly M uniformly chosen participants. None: any
        data-independent participation (the worst M' <= N per round; dh0 is set with M = N).
    composition : Composition
        "advanced" (the paper's route) or "pld".
    randomizer_delta : float, optional
        dh0; default n N delta / (18 R M^2).
    relative_tolerance : float
        Bisection stops when the bracket on eh0 is this narrow relative to its lower end; the lower
        end is returned, so the result is on the private side of the target.

    Returns
    -------
    ShuffleCalibration

    Raises
    ------
    ConfigError
        If an argument is out of range, the participants cannot satisfy M >= 16 ln(2/dh0), or
        R d_r already exceeds the target delta.
    """
    if not (math.isfinite(target_epsilon) and target_epsilon > 0):
        raise ConfigError("target_epsilon", target_epsilon, "a finite number > 0")
    if not 0 < target_delta < 1:
        raise ConfigError("target_delta", target_delta, "in (0, 1)")
    if composition not in COMPOSITIONS:
        raise ConfigError("composition", composition, f"one of {COMPOSITIONS}")
    big_n = _integer("num_silos", num_silos)
    n = _integer("records_per_silo", records_per_silo)
    r = _integer("num_rounds", num_rounds)
    m = None if silos_per_round is None else _integer("silos_per_round", silos_per_round)
    m_for_delta = big_n if m is None else m
    if m_for_delta > big_n:
        raise ConfigError("silos_per_round", m, f"an integer in [1, {big_n}] (num_silos)")
    dh0 = (
        default_randomizer_delta(
            target_delta, num_silos=big_n, silos_per_round=m_for_delta, records_per_silo=n, num_rounds=r
        )
        if randomizer_delta is None
        else float(randomizer_delta)
    )
    dh0 = min(dh0, 0.5)
    need = 16.0 * math.log(2.0 / dh0)
    if m_for_delta < need:
        key = "num_silos" if m is None else "silos_per_round"
        raise ConfigError(key, m_for_delta, f">= 16 ln(2/dh0) = {need:.1f} (seed-004 Thm 5.1; dh0 = {dh0:.3g})")

    def epsilon_at(eh0: float) -> tuple[float, RoundPrivacy]:
        rp = _round_for(eh0, dh0, big_n, m, n)
        return compose(rp.epsilon, rp.delta, r, target_delta, composition), rp

    eps_hi, rp_hi = epsilon_at(1.0)
    if eps_hi <= target_epsilon:
        lo, rp_lo, eps_lo = 1.0, rp_hi, eps_hi
    else:
        hi, lo = 1.0, 0.5
        eps_lo, rp_lo = epsilon_at(lo)
        while eps_lo > target_epsilon:
            if lo < 1e-12:
                raise ConfigError(
                    "target_delta", target_delta, f"> R d_r; no noise level reaches epsilon {target_epsilon}"
                )
            hi, lo = lo, lo / 2.0
            eps_lo, rp_lo = epsilon_at(lo)
        while hi - lo > relative_tolerance * lo:
            mid = 0.5 * (lo + hi)
            eps_mid, rp_mid = epsilon_at(mid)
            if eps_mid <= target_epsilon:
                lo, eps_lo, rp_lo = mid, eps_mid, rp_mid
            else:
                hi = mid
    return ShuffleCalibration(
        target_epsilon=float(target_epsilon),
        target_delta=float(target_delta),
        num_silos=big_n,
        silos_per_round=m,
        records_per_silo=n,
        num_rounds=r,
        composition=composition,
        noise_multiplier=gaussian_noise_multiplier(lo, dh0),
        round=rp_lo,
        epsilon=eps_lo,
    )
