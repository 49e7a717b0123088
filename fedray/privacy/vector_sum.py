"""The shuffle-private vector-sum protocol P_vec of Cheu, Joseph, Mao, Peng (ICLR 2022).

Specification: seed-000 §2.1 (P_1D, Algorithm 1) and §2.2 (P_vec, Algorithm 2), with the range and
re-centering corrected as seed-004 §6 item 6 says (range 2 L, re-center by n_users * L).

Trust model: no trusted server; users (or silos sending one vector per record) do not trust each
other; the shuffler is trusted only to permute all messages uniformly at random and to drop sender
identity. Each user runs the randomizer on its own vector before anything leaves it.

Unit and neighbouring relation: one user's vector; neighbours replace one user's vector by another
(REPLACE_ONE), every other vector fixed. Inputs are in the l2 ball of radius ``l2_bound`` (Delta2);
so every coordinate lies in [-Delta2, Delta2], the linf ball the per-coordinate protocol needs.
Vectors outside the ball are projected onto it first (seed-000 §3 defensive rule; a no-op when the
Lipschitz assumption holds), so the guarantee holds for any input.

Guarantee: the shuffled messages of one invocation are (epsilon, delta)-DP (seed-000 Theorem 3.2,
needs 0 < epsilon <= 15 and 0 < delta < 1/2). The estimate is unbiased with the exact MSE
``VectorSumParameters.exact_mse``, O(d Delta2^2 ln^2(d/delta)/epsilon^2).

Calibration (seed-000 §2.2, from the proof of Thm 3.2 / A.6; paper mode, no accountant):

    gamma = delta_hat = delta / (d + 1)
    eps_hat = epsilon / (18 sqrt(ln(1/gamma)))
    g = ceil(max(2 Delta2 sqrt(n), sqrt(d), 4))
    b = floor(180 g^2 ln(2/delta_hat) / (eps_hat^2 n)) + 1         (fewest messages, A1)
    p = 90 g^2 ln(2/delta_hat) / (b eps_hat^2 n)                    (just under 1/2)

Protocol, per coordinate j (P_1D with Delta = 2 Delta2 on the shifted value w = x_j + Delta2):

    R_1D(w):  xhat = floor(w g/Delta) + Bernoulli(frac(w g/Delta));  k = xhat + Binomial(b, p)
              emit k messages (j, 1) and g + b - k messages (j, 0)
    A_1D:     z_j = (Delta/g) (ones_j - p b n);  o_j = z_j - n Delta2   (estimate of sum_i x_ij)

Three exactly equivalent forms (seed-000 §6, "faithful and efficient shuffler simulation"):

* M1, messages (``randomize_messages``, ``analyze_messages``): every user emits its d (g + b)
  labelled bits; a shuffler permutes them; the analyzer counts. Feasible only for tiny configs.
* M2, per-user counts (``randomize_counts``): user i sends ones_ij = xhat_ij + Binomial(b, p) per
  coordinate. Its message multiset is exactly {(j, 1) x ones_ij, (j, 0) x (g + b - ones_ij)}, so
  ones_ij encodes it without loss.
* M3, aggregate counts (``aggregate_counts``): ones_j = sum_i xhat_ij + Binomial(n b, p).

Why they are equal in distribution: the analyzer's output depends on the shuffled messages only
through ones_j = number of messages (j, 1) (the per-label message count (g + b) n is fixed), and a
count is invariant under any permutation. In M1 that count is sum_i (xhat_ij + eta_ij), literally
the same random variables M2 sends, so M1 and M2 give the same output for the same draws. In M3,
the eta_ij ~ Binomial(b, p) are independent over users and coordinates with a common p, so
sum_i eta_ij ~ Binomial(n b, p), independent over j and of the rounding draws; the vector
(ones_1, ..., ones_d) therefore has the same joint law in M2 and M3.

Randomness: every function that draws takes a ``np.random.Generator`` (the caller derives it from
a seeded stream, e.g. ``fedray.rng.generator(seed, Stream.NOISE, repetition, round, silo)``).
Counts are int64 throughout: n (g + b) can reach 1e12.

Symbols: n users (``num_users``), d coordinates (``dim``), Delta2 (``l2_bound``), g (``scale``),
b (``noise_bits``), p (``bit_probability``).

References
----------
.. [CJMP22] A. Cheu, M. Joseph, J. Mao, B. Peng. Shuffle private stochastic convex optimization.
   ICLR 2022 (Algorithms 1-2, Lemma 3.1, Theorem 3.2, Lemma 3.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedray.core.protocol import RoundKeys
from fedray.errors import ConfigError
from fedray.rng import SiloDraws, Stream

__all__ = [
    "VectorSumParameters",
    "aggregate_counts",
    "analyze_counts",
    "analyze_messages",
    "dropout_epsilon",
    "encode",
    "randomize_counts",
    "randomize_messages",
    "vector_sum_parameters",
]


@dataclass(frozen=True)
class VectorSumParameters:
    """Resolved parameters of one P_vec invocation (build with ``vector_sum_parameters``)."""

    epsilon: float
    delta: float
    dim: int
    num_users: int
    l2_bound: float
    eps_hat: float
    delta_hat: float        # = gamma, the Lemma 3.3 slack
    scale: int              # g
    noise_bits: int         # b
    bit_probability: float  # p

    @property
    def value_range(self) -> float:
        """Delta = 2 Delta2, the range of the shifted coordinates."""
        return 2.0 * self.l2_bound

    @property
    def bits_per_coordinate(self) -> int:
        return self.scale + self.noise_bits

    @property
    def messages_per_user(self) -> int:
        """d (g + b): every user sends exactly this many one-bit messages."""
        return self.dim * self.bits_per_coordinate

    @property
    def noise_mean(self) -> float:
        """p b n = 90 g^2 ln(2/delta_hat) / eps_hat^2, computed without b (seed-000 §2.1)."""
        return 90.0 * self.scale**2 * math.log(2.0 / self.delta_hat) / self.eps_hat**2

    def exact_mse(self, x: np.ndarray) -> float:
        """E||o - sum_i x_i||^2 for inputs ``x`` (n, d), seed-000 §2.2:

        sum_j (Delta/g)^2 [sum_i r_ij (1 - r_ij) + n b p (1 - p)], r_ij = frac(w_ij g / Delta).
        """
        t = _fixed_point(np.asarray(x, dtype=np.float64), self)
        r = t - np.floor(t)
        n = t.shape[-2]
        per_coord = r * (1.0 - r)
        binomial = n * self.noise_bits * self.bit_probability * (1.0 - self.bit_probability)
        step2 = (self.value_range / self.scale) ** 2
        return float(step2 * (per_coord.sum() + self.dim * binomial))

    def mse_bound(self) -> float:
        """The closed bound of seed-000 §2.2:

        d (Delta/g)^2 n / 4 + d 116640 Delta2^2 ln(2/delta_hat) ln(1/gamma) (1 - p) / epsilon^2,
        with 116640 = 4 * 90 * 18^2 (p b n = 90 g^2 ln(2/delta_hat) / eps_hat^2).
        """
        rounding = self.dim * (self.value_range / self.scale) ** 2 * self.num_users / 4.0
        noise = (
            self.dim * 116640.0 * self.l2_bound**2 * math.log(2.0 / self.delta_hat)
            * math.log(1.0 / self.delta_hat) * (1.0 - self.bit_probability) / self.epsilon**2
        )
        return rounding + noise

    def composed_epsilon(self, difference: np.ndarray) -> float:
        """Lemma 3.3's eps' for neighbours whose vectors differ by ``difference`` (d,).

        Per coordinate (Lemma 3.1 with (eps_hat, delta_hat, Delta)): eps_j = eps_hat (2/g + a_j/Delta),
        a_j = |difference_j|; composed: eps' = sum_j eps_j (e^eps_j - 1) + 2 sqrt(ln(1/gamma) sum_j eps_j^2)
        at delta' = d delta_hat + gamma = delta (seed-000 §2.2 proof steps 2-4).
        """
        a = np.abs(np.asarray(difference, dtype=np.float64))
        if a.shape != (self.dim,):
            raise ConfigError("difference", a.shape, f"a vector of shape ({self.dim},)")
        eps_j = self.eps_hat * (2.0 / self.scale + a / self.value_range)
        return float(
            np.sum(eps_j * np.expm1(eps_j))
            + 2.0 * math.sqrt(math.log(1.0 / self.delta_hat) * float(np.sum(eps_j**2)))
        )


def checked_sizes(dim, num_users, l2_bound) -> tuple[int, int, int]:
    """(d, n, g): the checked sizes (integers d, n >= 1; Delta2 > 0 finite) and seed-000 §2.2's
    fixed-point scale g = ceil(max(2 Delta2 sqrt(n), sqrt(d), 4)), which every calibration of
    P_vec shares (it sets the rounding error, not the privacy)."""
    for key, value in (("dim", dim), ("num_users", num_users)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ConfigError(key, value, "an integer >= 1")
    if not (math.isfinite(l2_bound) and l2_bound > 0):
        raise ConfigError("l2_bound", l2_bound, "a finite number > 0")
    d, n = int(dim), int(num_users)
    return d, n, math.ceil(max(2.0 * l2_bound * math.sqrt(n), math.sqrt(d), 4.0))


def vector_sum_parameters(
    epsilon: float, delta: float, dim: int, num_users: int, l2_bound: float
) -> VectorSumParameters:
    """g, b, p of P_vec for (epsilon, delta, d, n, Delta2) by seed-000 §2.2, with the A9 checks.

    Parameters
    ----------
    epsilon : float
        Target epsilon of one invocation, in (0, 15].
    delta : float
        Target delta, in (0, 1/2).
    dim : int
        d, the vector dimension, >= 1.
    num_users : int
        n, the number of vectors summed in this invocation, >= 1.
    l2_bound : float
        Delta2, the l2 bound on every vector, > 0.

    Returns
    -------
    VectorSumParameters

    Raises
    ------
    ConfigError
        If an argument is out of range, or a validity check of seed-000 A9 fails (p in (0, 1/2),
        b above its threshold, alpha = eps_hat/(3g) <= 0.8, the final Lemma 3.3 bound
        18 eps_hat^2 + 6 eps_hat sqrt(ln(1/gamma)) <= epsilon).
    """
    if not (math.isfinite(epsilon) and 0 < epsilon <= 15):
        raise ConfigError("epsilon", epsilon, "in (0, 15] (seed-000 Theorem 3.2)")
    if not 0 < delta < 0.5:
        raise ConfigError("delta", delta, "in (0, 1/2) (seed-000 Theorem 3.2)")
    d, n, scale = checked_sizes(dim, num_users, l2_bound)

    delta_hat = delta / (d + 1)
    log_gamma = math.log(1.0 / delta_hat)
    eps_hat = epsilon / (18.0 * math.sqrt(log_gamma))
    log_two = math.log(2.0 / delta_hat)
    threshold = 180.0 * scale**2 * log_two / (eps_hat**2 * n)
    noise_bits = math.floor(threshold) + 1
    p = 90.0 * scale**2 * log_two / (noise_bits * eps_hat**2 * n)

    if not 0 < p < 0.5:
        raise ConfigError("bit_probability", p, "in (0, 1/2) (seed-000 A9)")
    if eps_hat / (3.0 * scale) > 0.8:
        raise ConfigError("eps_hat / (3 g)", eps_hat / (3.0 * scale), "<= 0.8 (seed-000 Lemma 3.1 step v)")
    final = 18.0 * eps_hat**2 + 6.0 * eps_hat * math.sqrt(log_gamma)
    if final > epsilon:
        raise ConfigError("Lemma 3.3 epsilon bound", final, f"<= epsilon = {epsilon} (seed-000 A9)")
    return VectorSumParameters(
        epsilon=float(epsilon),
        delta=float(delta),
        dim=d,
        num_users=n,
        l2_bound=float(l2_bound),
        eps_hat=eps_hat,
        delta_hat=delta_hat,
        scale=int(scale),
        noise_bits=int(noise_bits),
        bit_probability=p,
    )


def _check_inputs(x: np.ndarray, params: VectorSumParameters) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 2 or x.shape[-1] != params.dim:
        raise ConfigError("x", x.shape, f"an array (..., num_users, {params.dim}) of user vectors")
    if not np.all(np.isfinite(x)):
        raise ConfigError("x", "non-finite values", "finite user vectors")
    return x


def _fixed_point(x: np.ndarray, params: VectorSumParameters) -> np.ndarray:
    """w g / Delta in [0, g] for every coordinate, after projecting each vector onto the Delta2 ball."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        x = x * np.minimum(1.0, params.l2_bound / norms)
    # Algorithm 2 line 4: w = x + Delta2 in [0, 2 Delta2]; the clip only guards float error.
    w = np.clip(x + params.l2_bound, 0.0, params.value_range)
    return np.clip(w * (params.scale / params.value_range), 0.0, float(params.scale))


def encode(x: np.ndarray, params: VectorSumParameters, rng: np.random.Generator) -> np.ndarray:
    """xhat = floor(w g/Delta) + Bernoulli(frac(w g/Delta)), int64 in [0, g], shape of ``x``.

    Randomized rounding (Algorithm 1 lines 1-3): E[xhat] = w g / Delta exactly.
    """
    floor, frac = _rounding_split(x, params)
    return (floor + (rng.random(frac.shape) < frac)).astype(np.int64)


def _rounding_split(x: np.ndarray, params: VectorSumParameters) -> tuple[np.ndarray, np.ndarray]:
    """(floor, fraction) of w g / Delta for every coordinate: the deterministic half of the randomizer."""
    t = _fixed_point(_check_inputs(x, params), params)
    floor = np.floor(t)
    return floor, t - floor


def _drawn_bits(frac: np.ndarray, params: VectorSumParameters, rng: np.random.Generator) -> np.ndarray:
    """The randomizer's draws, in this order: the rounding Bernoulli(frac), then Binomial(b, p)."""
    return (rng.random(frac.shape) < frac) + rng.binomial(params.noise_bits, params.bit_probability, size=frac.shape)


def randomize_counts(x: np.ndarray, params: VectorSumParameters, rng: np.random.Generator) -> np.ndarray:
    """M2: each user's per-coordinate count of 1-bits, ones_ij = xhat_ij + Binomial(b, p).

    ``x`` (..., n, d) -> int64 (..., n, d), each entry in [0, g + b]. User i's message multiset is
    exactly ones_ij messages (j, 1) and g + b - ones_ij messages (j, 0) for every j.
    """
    floor, frac = _rounding_split(x, params)
    return floor.astype(np.int64) + _drawn_bits(frac, params, rng)


def aggregate_counts(x: np.ndarray, params: VectorSumParameters, rng: np.random.Generator) -> np.ndarray:
    """M3: ones_j = sum_i xhat_ij + Binomial(n b, p), int64 (..., d); same law as summing M2."""
    xhat = encode(x, params, rng)
    n = xhat.shape[-2]
    trials = np.int64(n) * np.int64(params.noise_bits)
    noise = rng.binomial(trials, params.bit_probability, size=xhat.shape[:-2] + (params.dim,))
    return xhat.sum(axis=-2) + noise


def randomize_messages(x: np.ndarray, params: VectorSumParameters, rng: np.random.Generator) -> np.ndarray:
    """M1: the labelled one-bit messages of every user, int64 (n, d (g + b), 2) of (label j, bit).

    User i sends, for each coordinate j, ones_ij messages (j, 1) and g + b - ones_ij messages
    (j, 0): exactly d (g + b) messages. The within-user order carries no information once shuffled.
    """
    x = _check_inputs(x, params)
    if x.ndim != 2:
        raise ConfigError("x", x.shape, f"an array (num_users, {params.dim}) for the message form")
    ones = randomize_counts(x, params, rng)                                   # (n, d)
    slots = np.arange(params.bits_per_coordinate, dtype=np.int64)
    bits = (slots[None, None, :] < ones[:, :, None]).astype(np.int64)         # (n, d, g + b)
    labels = np.broadcast_to(np.arange(params.dim, dtype=np.int64)[None, :, None], bits.shape)
    return np.stack([labels, bits], axis=-1).reshape(x.shape[0], params.messages_per_user, 2)


def analyze_counts(ones: np.ndarray, params: VectorSumParameters, num_users=None) -> np.ndarray:
    """A_vec on counts: o_j = (Delta/g) (ones_j - p b n_u) - n_u Delta2, float64 (..., d).

    ``num_users`` defaults to the invocation's n; pass the number of users whose messages arrived
    (seed-000 A8) when some dropped out. Re-centering by n_u Delta2 (seed-004 §6 item 6).
    """
    ones = np.asarray(ones)
    if ones.shape[-1:] != (params.dim,):
        raise ConfigError("ones", ones.shape, f"per-coordinate counts (..., {params.dim})")
    n_u = params.num_users if num_users is None else num_users
    n_u = np.asarray(n_u, dtype=np.float64)[..., None]
    debias = params.noise_mean * n_u / params.num_users
    return (params.value_range / params.scale) * (ones - debias) - n_u * params.l2_bound


def dropout_epsilon(params: VectorSumParameters, num_arrived: int) -> float:
    """The epsilon left when only ``num_arrived`` of the invocation's n users sent messages (seed-000
    A8, robust mode): the noise is then that of n_eff = num_arrived users, gamma_h = n_eff / n, and
    the invocation is (eps / gamma_h, delta)-DP (Lemma A.9, for eps <= 1). The analyzer debiases with
    n_eff (``analyze_counts(..., num_users=n_eff)``, or ``analyze_messages``, which reads n_eff off the
    per-label message count). Fewer than n / 3 arrivals is refused, as A8 recommends."""
    if not 0 < params.epsilon <= 1:
        raise ConfigError("epsilon", params.epsilon, "at most 1 for the drop-out guarantee (seed-000 Lemma A.9)")
    if isinstance(num_arrived, bool) or int(num_arrived) != num_arrived or not 1 <= num_arrived <= params.num_users:
        raise ConfigError("num_arrived", num_arrived, f"an integer in [1, {params.num_users}]")
    if 3 * num_arrived < params.num_users:
        raise ConfigError("num_arrived", num_arrived, f"at least n / 3 = {params.num_users / 3:g} users (seed-000 A8)")
    return params.epsilon * params.num_users / num_arrived


def analyze_messages(messages: np.ndarray, params: VectorSumParameters) -> np.ndarray:
    """A_vec on a (shuffled) multiset of labelled bits (m, 2): count, infer n_u, analyze.

    The number of users whose messages arrived is read off the per-label message count,
    n_u = (# messages labelled j) / (g + b), which must be the same integer for every label.
    """
    messages = np.asarray(messages)
    if messages.ndim != 2 or messages.shape[1] != 2:
        raise ConfigError("messages", messages.shape, "an array (num_messages, 2) of (label, bit)")
    labels, bits = messages[:, 0].astype(np.int64), messages[:, 1].astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= params.dim):
        raise ConfigError("message labels", (int(labels.min()), int(labels.max())), f"in [0, {params.dim})")
    ones = np.bincount(labels, weights=bits, minlength=params.dim).astype(np.int64)
    totals = np.bincount(labels, minlength=params.dim)
    per_user = params.bits_per_coordinate
    if np.any(totals != totals[0]) or totals[0] % per_user:
        raise ConfigError("per-label message counts", totals.tolist(), f"equal multiples of g + b = {per_user}")
    return analyze_counts(ones, params, num_users=int(totals[0] // per_user))


@dataclass(frozen=True)
class SplitVectorSum:
    """P_vec split by placement: the randomizer (counts) where the users live, the analyzer at the
    server; the shuffler between them forwards the sum of the counts (seed-000 §2, M2 form).
    Used by seed 004 §3.8 (one user per record gradient) and seed 000 (one user per user)."""

    params: VectorSumParameters

    def randomize(self, vectors: np.ndarray, draws: SiloDraws) -> np.ndarray:
        """(P, S, K, D) record gradients -> (P, S, D) int64 counts of each silo's K users (K = 1: one user)."""
        # randomize_counts, split: the rounding of every user at once, and per block of users only
        # the draws from the block's generator: the same bits at a fraction of the per-block cost.
        floor, frac = _rounding_split(vectors, self.params)
        counts = floor.astype(np.int64) + draws.blockwise(
            Stream.NOISE, frac, lambda block, rng: _drawn_bits(block, self.params, rng))
        # M2 is M1 written compactly: a user's 1-bit count per coordinate fixes its multiset of
        # (j, 1) and (j, 0) messages, and after shuffling the only information left is the count
        # of (j, 1) over all users (vector_sum's docstring). Summing over the K users here and over
        # the silos in the shuffler yields that count from the very same draws, so the server's view
        # is M1's. This partial sum reaches only the shuffler, which sees more (each message) in M1.
        return counts.sum(axis=2)

    def estimate(self, total: np.ndarray, users: np.ndarray, keys: RoundKeys | None = None) -> np.ndarray:
        """Unbiased estimate (P, D) of the sum of the ``users`` (P,) record gradients (the analyzer
        draws nothing, so the step's ``keys`` are unused)."""
        return analyze_counts(total, self.params, num_users=users)

    def sum_mse(self, users: int, dim: int) -> float:
        """The closed bound on E||estimate - sum||^2 (``VectorSumParameters.mse_bound``)."""
        return self.params.mse_bound()


@dataclass(frozen=True)
class ExactSum:
    """The non-private step with the same interface (trust model none)."""

    def randomize(self, vectors: np.ndarray, draws: SiloDraws) -> np.ndarray:
        return vectors.sum(axis=2)

    def estimate(self, total: np.ndarray, users: np.ndarray, keys: RoundKeys | None = None) -> np.ndarray:
        return total

    def sum_mse(self, users: int, dim: int) -> float:
        return 0.0
