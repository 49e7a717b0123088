"""Output perturbation for functions of small local deletion sensitivity (seed-003 spec §2.1-2.3b):
the shifted truncated discrete Laplace deletion budget, Alg. 1 (DelOutputPert) with its stable-set
search by enumeration (and its cost, ``enumeration_solves``), its tight calibration
(``tight_noise_multiplier``, by the exact bound of ``deletion_tight``), the 1-D mean's polynomial window
search (``WindowSearch``, proved DP on its own), local deletion sensitivity (by enumeration, and
the exact sorted formula of a 1-D mean), and the constants of SCOutputPert in its exact and
certificate modes.

Symbols: eps, delta the target (replace-one user-level), eps2 = eps/2, delta2 = delta/(e^eps + 2),
kappa = 1 + ceil(ln(1/delta2)/eps2), r = 4 kappa deletions, N0 = 8 kappa + 2 the fewest users
the mechanism accepts, G the Lipschitz constant of each item's loss on K, mu its strong convexity,
n users with m items each, beta the failure probability of the utility guarantee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Callable

import numpy as np

from fedray.core.terms import Calibration
from fedray.privacy.mechanisms import ServerGaussianNoise


CALIBRATIONS = (Calibration.PAPER, Calibration.TIGHT)


def kappa(epsilon: float, delta: float) -> int:
    """kappa(e, dl) = 1 + ceil(ln(1/dl)/e) (Def 3.4, an integer)."""
    return 1 + math.ceil(math.log(1.0 / delta) / epsilon)


@dataclass(frozen=True)
class TruncatedDiscreteLaplace:
    """TDLap(e, dl): support {0, ..., 2 kappa}, Pr[R = r] proportional to exp(-e |r - kappa|).

    The two properties Thm 3.3's proof uses are asserted at construction:
    (P1) Pr[R = 0] = Pr[R = 2 kappa] <= dl; (P2) neighbouring values differ by a factor <= e^e.
    """

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        pmf = self.pmf()
        if not (pmf[0] == pmf[-1] and pmf[0] <= math.exp(-self.epsilon) * self.delta * (1 + 1e-12)):
            raise AssertionError(f"TDLap(P1) fails: Pr[R=0] = {pmf[0]:.3g} > e^-eps delta")
        if not np.all(pmf[1:] <= math.exp(self.epsilon) * pmf[:-1] * (1 + 1e-12)) \
                or not np.all(pmf[:-1] <= math.exp(self.epsilon) * pmf[1:] * (1 + 1e-12)):
            raise AssertionError("TDLap(P2) fails: neighbouring masses differ by more than e^eps")

    @property
    def kappa(self) -> int:
        return kappa(self.epsilon, self.delta)

    def pmf(self) -> np.ndarray:
        k = self.kappa
        weights = np.exp(-self.epsilon * np.abs(np.arange(2 * k + 1) - k))
        return weights / weights.sum()

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.choice(2 * self.kappa + 1, p=self.pmf()))


def mean_deletion_sensitivity(values: np.ndarray, deletions: int) -> float:
    """Delta_k of the mean of the 1-D ``values`` a (one per user) with k = ``deletions``: the
    largest change of the mean when one more user goes after at most k deletions. Exact, in
    O(N log N): with a sorted and M = N - k users left after deleting the k that push the rest's
    mean furthest, Delta_k = max(a_(N) - mean(a_(1..N-k-1)), mean(a_(k+2..N)) - a_(1)) / (N - k)."""
    a = np.sort(np.asarray(values, dtype=np.float64))
    n = a.size
    if n - deletions < 2:
        raise ValueError(f"{deletions} deletions leave fewer than 2 of {n} users")
    rest = n - deletions - 1
    return float(max(a[-1] - a[:rest].mean(), a[-rest:].mean() - a[0]) / (n - deletions))


def deletion_sensitivity(f: Callable[[tuple], np.ndarray], num_users: int, deletions: int,
                         deleted: tuple = ()) -> float:
    """Delta_r f(y) by enumeration (Def 3.2), y = the users minus ``deleted``: the largest
    ||f(y_{-S}) - f(y_{-S-i})|| over |S| <= r and i in y \\ S; ``f`` maps the sorted tuple of deleted
    users to its value. Exponential in r: for tests and tiny federations."""
    rest = [u for u in range(num_users) if u not in deleted]
    largest = 0.0
    for size in range(min(deletions, len(rest)) + 1):
        for subset in combinations(rest, size):
            base = np.asarray(f(tuple(sorted(deleted + subset))))
            for user in rest:
                if user not in subset:
                    moved = np.asarray(f(tuple(sorted(deleted + subset + (user,)))))
                    largest = max(largest, float(np.linalg.norm(base - moved)))
    return largest


@dataclass(frozen=True)
class DelOutputPert:
    """Alg. 1 at inner parameters (eps2, delta2) and target sensitivity Delta: draw R1 ~
    TDLap(eps2, delta2); find the smallest set S of at most R1 users (lexicographic among equals)
    whose deletion leaves a stable dataset, Delta_{r'} f(x_{-S}) <= Delta; release f(x_{-S}) +
    N(0, sigma^2 I) with sigma = sqrt(2 ln(2/delta2)) 8 kappa Delta / eps2, or nothing (BOT) if no
    such S exists. r' = 4 kappa - |S| (``index="listing"``, the paper's line 6) or 4 kappa - R1
    (``"proof"``, Obs 3.5's reading); both are private (spec A3). Guarantee (Thm 3.3): (2 eps2,
    (e^eps2 + 2) delta2)-DP for every f, Delta and n, replace-one neighbours. The search enumerates
    subsets: for tests and tiny federations; SCOutputPert certifies S = {} instead."""

    epsilon2: float
    delta2: float
    sensitivity: float
    index: str = "listing"
    calibration: Calibration = Calibration.PAPER        # or "tight": sigma by Thm 3.3's coupling, exactly (deletion_tight)

    def __post_init__(self) -> None:
        if self.index not in ("listing", "proof"):
            raise ValueError(f"index must be 'listing' or 'proof'; got {self.index!r}")
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}; got {self.calibration!r}")
        if not 0 < self.epsilon2 < 1:
            raise ValueError(f"epsilon2 must be in (0, 1) (the Gaussian bound Thm 3.3 uses); got {self.epsilon2}")

    @classmethod
    def for_target(cls, epsilon: float, delta: float, sensitivity: float, index: str = "listing",
                   calibration: Calibration = Calibration.PAPER) -> "DelOutputPert":
        """The inner parameters of an (eps, delta) target: eps2 = eps/2, delta2 = delta/(e^eps + 2)."""
        return cls(epsilon / 2.0, delta / (math.exp(epsilon) + 2.0), sensitivity, index, calibration)

    @property
    def kappa(self) -> int:
        return kappa(self.epsilon2, self.delta2)

    @property
    def noise_std(self) -> float:
        """The paper's sqrt(2 ln(2/delta2)) 8 kappa Delta / eps2 (Alg. 1 line 4), or with
        ``calibration="tight"`` the smallest sigma meeting the same guarantee by the exact bound of
        ``deletion_tight`` (5 to 7x smaller)."""
        if self.calibration == Calibration.TIGHT:
            return tight_noise_multiplier(self.epsilon2, self.delta2) * self.sensitivity
        return math.sqrt(2.0 * math.log(2.0 / self.delta2)) * 8 * self.kappa * self.sensitivity / self.epsilon2

    def stable_set(self, num_users: int, local_sensitivity: Callable[[tuple, int], float], budget: int) -> tuple | None:
        """S* for R1 = ``budget``: ``local_sensitivity(S, r)`` is Delta_r f(x_{-S})."""
        for size in range(budget + 1):
            reach = 4 * self.kappa - (size if self.index == "listing" else budget)
            for subset in combinations(range(num_users), size):
                if local_sensitivity(subset, reach) <= self.sensitivity:
                    return subset
        return None

    def search(self, f: Callable[[tuple], np.ndarray], num_users: int, budget: int) -> tuple | None:
        """(S*, f(x_{-S*})) for R1 = ``budget`` with Delta_r f(x_{-S}) by enumeration
        (``deletion_sensitivity``), f memoised by the deleted set; None (BOT) if Stable(R1) is empty.
        At most ``enumeration_solves(num_users, 4 kappa)`` evaluations of f."""
        values: dict = {}

        def cached(deleted: tuple) -> np.ndarray:
            if deleted not in values:
                values[deleted] = np.asarray(f(deleted), dtype=np.float64)
            return values[deleted]

        def local(subset: tuple, reach: int) -> float:
            return deletion_sensitivity(cached, num_users, max(reach, 0), deleted=subset)

        chosen = self.stable_set(num_users, local, budget)
        return None if chosen is None else (chosen, cached(chosen))

    def release(self, f: Callable[[tuple], np.ndarray], local_sensitivity: Callable[[tuple, int], float],
                num_users: int, rng: np.random.Generator) -> np.ndarray | None:
        budget = TruncatedDiscreteLaplace(self.epsilon2, self.delta2).sample(rng)
        chosen = self.stable_set(num_users, local_sensitivity, budget)
        if chosen is None:
            return None
        value = np.asarray(f(chosen), dtype=np.float64)
        step = ServerGaussianNoise(np.array([self.noise_std]), 1.0)      # sigma on a unit sensitivity, from rng
        return step.apply(value[None], [rng])[0][0]


SOLVES_CAP = 10**18


@lru_cache(maxsize=256)
def tight_noise_multiplier(epsilon2: float, delta2: float, delta: float | None = None) -> float:
    """The smallest sigma / Delta (relative precision 1e-9, rounded up) at which Alg. 1 with
    TDLap(eps2, delta2) meets Thm 3.3's (2 eps2, (e^eps2 + 2) delta2) by ``deletion_delta``, or
    (2 eps2, ``delta``) for a smaller ``delta`` (tests at tiny kappa, where Thm 3.3's is above 1)."""
    from fedray.protocols.user_level.deletion_tight import deletion_delta     # scipy.stats: only when "tight" runs

    pmf = TruncatedDiscreteLaplace(epsilon2, delta2).pmf()
    epsilon, delta = 2 * epsilon2, (math.exp(epsilon2) + 2) * delta2 if delta is None else delta
    high = DelOutputPert(epsilon2, delta2, 1.0).noise_std
    if deletion_delta(epsilon, pmf, high) > delta:
        raise ArithmeticError(f"the paper's sigma / Delta = {high:.6g} misses delta = {delta:.3g} by the exact bound")
    low = 1e-6 * high
    while high / low > 1 + 1e-9:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if deletion_delta(epsilon, pmf, middle) <= delta else (middle, high)
    return high


def enumeration_solves(num_users: int, deletions: int) -> int:
    """How many distinct sub-datasets the enumerated stable-set search of Alg. 1 may evaluate f on
    (each once, memoised): S* has at most 2 kappa users and its check Delta_{4 kappa - |S|} deletes
    at most 4 kappa - |S| more and then one, so every evaluated x_{-T} has |T| <= ``deletions`` + 1
    with ``deletions`` = 4 kappa: sum_{t <= min(n, 4 kappa + 1)} C(n, t). Data independent (the
    worst case, whatever R1 and the data), so a plan may compare it with a budget. Counts past
    ``SOLVES_CAP`` = 10^18 stop there: SOLVES_CAP + 1 stands for "more"."""
    total = 0
    for t in range(min(num_users, deletions + 1) + 1):
        total += math.comb(num_users, t)
        if total > SOLVES_CAP:
            return SOLVES_CAP + 1
    return total


@dataclass(frozen=True)
class WindowSearch:
    """Alg. 1's stable-set search for f = the mean of 1-D points (one per user), restricted to
    "windows": S deletes the j lowest and s - j highest points, and such an S counts as stable
    when the n - s points it keeps span at most ``threshold`` = Delta (n - 4 kappa). Polynomial
    (a sort, then O(n) per size s <= 2 kappa), and (eps, delta)-DP by Thm 3.3's own proof.

    Why the search over all sets is not replaced exactly: the windows do not always contain the
    smallest stable set (points -1.20, -1.06, -0.36, 1.65, 1.86, one deletion, Delta_0: deleting
    the middle point -0.36 gives 0.516, every window at least 0.528), so this is a different
    member of Alg. 1's family, proved on its own:

    (A) Every window it accepts is stable in Alg. 1's sense. For y = x_{-S}, |S| = s, k = 4 kappa - s
        (line 6's index; the proof's 4 kappa - R1 >= k only deletes fewer), any z = y_{-T} with
        |T| <= k and user i of z: |mean(z) - mean(z_{-i})| = |z_i - mean(z_{-i})| / |z| <=
        range(y) / (n - s - k) = range(y) / (n - 4 kappa). So range(y) <= Delta (n - 4 kappa)
        gives Delta_{4 kappa - s} f(x_{-S}) <= Delta.
    (B) Obs. 3.5 holds for it. Let rho_s(x) be the narrowest span of n - s consecutive sorted
        points (the best window of s deletions; non-increasing in s). If x' = x with one user
        replaced, the n - s points of x' in the interval I realising rho_s(x') include at most one
        point x lacks, so x has n - s - 1 points in I, and n - s - 1 consecutive ones span at most
        |I|: rho_{s+1}(x) <= rho_s(x'). A window of size <= r1 accepted on x' therefore gives one of
        size <= r1 + 1 accepted on x.
    (C) Thm 3.3's proof uses of Stable only (B), to bound the BOT mass (Pr[BOT | x] <= delta2 +
        e^{eps2} Pr[BOT | x']), and that all members are stable, to place f on any member for x
        and budget r1 and any member for x' and budget r1 + 1 within (2 r1 + 3) Delta <= 8 kappa
        Delta (through the common sub-dataset x_{-S-S'-u}); the choice among members is any fixed
        rule. With (A) and (B) the same argument gives (2 eps2, (e^{eps2} + 2) delta2)-DP.

    S*: the smallest s <= R1 with rho_s(x) <= threshold (rho is non-increasing, so BOT exactly when
    rho_{R1}(x) > threshold), then the narrowest window of that size (ties: fewer low deletions).
    s* = 0 (all points within the threshold) releases f(x) for every R1: the fast path.
    """

    threshold: float
    deletions: int              # 4 kappa (the largest budget, 2 kappa, is what the search reaches)

    @classmethod
    def for_mechanism(cls, sensitivity: float, kappa_: int, num_users: int) -> "WindowSearch":
        return cls(sensitivity * (num_users - 4 * kappa_), 4 * kappa_)

    def smallest(self, points: np.ndarray) -> tuple[int, int] | None:
        """(s*, j*): the fewest deletions s <= 2 kappa (= ``deletions`` / 2) whose best window is
        accepted, and its low deletions j*; None if no s <= 2 kappa is."""
        a = np.sort(np.asarray(points, dtype=np.float64).reshape(-1))
        n = a.size
        for s in range(min(self.deletions // 2, n - 1) + 1):
            spans = a[n - s - 1:] - a[:s + 1]            # window j keeps a[j .. j + n - s - 1]
            j = int(np.argmin(spans))
            if spans[j] <= self.threshold:
                return s, j
        return None

    def release_point(self, points: np.ndarray, budget: int) -> tuple[int, np.ndarray] | None:
        """For R1 = ``budget``: (|S*|, f(x_{-S*})) or None (BOT)."""
        found = self.smallest(points)
        if found is None or found[0] > budget:
            return None
        s, j = found
        a = np.sort(np.asarray(points, dtype=np.float64).reshape(-1))
        return s, np.array([a[j:a.size - s + j].mean()])


@dataclass(frozen=True)
class _SCOutputPertConstants:
    """What SCOutputPert's two modes share: the inner parameters, kappa, N0 and sigma."""

    epsilon: float
    delta: float
    beta: float
    lipschitz: float
    strong_convexity: float
    num_users: int
    items_per_user: int
    calibration: Calibration = Calibration.PAPER        # or "tight" (DelOutputPert.noise_std)

    @property
    def sensitivity(self) -> float:
        """Delta, the sensitivity the noise is calibrated to (a mode that calibrates to one defines it)."""
        raise NotImplementedError(f"{type(self).__name__} calibrates to no fixed sensitivity")

    def __post_init__(self) -> None:
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}; got {self.calibration!r}")
        if self.num_users < self.deletions + 2:
            raise ValueError(f"{self.num_users} users: Delta needs n >= 4 kappa + 2 = {self.deletions + 2}")

    @property
    def epsilon2(self) -> float:
        return self.epsilon / 2.0

    @property
    def delta2(self) -> float:
        return self.delta / (math.exp(self.epsilon) + 2.0)

    @property
    def kappa(self) -> int:
        return kappa(self.epsilon2, self.delta2)

    @property
    def deletions(self) -> int:
        return 4 * self.kappa

    @property
    def fewest_users(self) -> int:
        """4 kappa + 2: below it Delta's denominator n - 4 kappa - 1 is not positive (allow_few_users
        cannot lift this floor)."""
        return self.deletions + 2

    @property
    def min_users(self) -> int:
        """N0 = 8 kappa + 2."""
        return 8 * self.kappa + 2

    @property
    def noise_std(self) -> float:
        return DelOutputPert(self.epsilon2, self.delta2, self.sensitivity, calibration=self.calibration).noise_std


@dataclass(frozen=True)
class ExactPerturbation(_SCOutputPertConstants):
    """SCOutputPert's constants in exact mode (spec §2.3): Delta = 5 G sqrt((4 kappa + 1) ln n +
    ln(2/beta)) / (mu (n - 4 kappa - 1) sqrt(m)), Thm 3.6 with a union bound over the deletions.
    SCOutputPert's exact mode releases through ``WindowSearch`` at this Delta."""

    @property
    def sensitivity(self) -> float:
        n, r = self.num_users, self.deletions
        spread = 5.0 * self.lipschitz * math.sqrt((r + 1) * math.log(n) + math.log(2.0 / self.beta))
        return spread / (self.strong_convexity * (n - r - 1) * math.sqrt(self.items_per_user))

    def certifies(self, local_sensitivity: float) -> bool:
        return local_sensitivity <= self.sensitivity


def smooth_deletion_bound(gamma: float, residual: float, users: int, deletions: int, strong_convexity: float,
                          smoothness: float) -> float:
    """[gamma n / (n - r) + beta0 (res + r gamma / (n - r)) / mu] / (mu (n - r - 1)): a bound on
    Delta_r of the strongly convex ERM minimiser (``CertifiedPerturbation.smooth_spread`` proves it)."""
    n, r, mu = users, deletions, strong_convexity
    return (gamma * n / (n - r) + smoothness * (residual + r * gamma / (n - r)) / mu) / (mu * (n - r - 1))


@dataclass(frozen=True)
class CertifiedPerturbation(_SCOutputPertConstants):
    """SCOutputPert's constants in certificate mode (spec §2.3b), all data independent.

    gamma0 = 5 G sqrt(ln(n/beta)/m) (a per-user gradient-deviation bound, Lemma 3.8 + a union over
    users), Delta0 = (2r + 1) gamma0 / (mu (n - r - 1)), eta = Delta0 / 100, Delta = Delta0 + 4 eta,
    sigma = sqrt(2 ln(2/delta2)) 8 kappa Delta / eps2. A solution with optimality residual res and
    per-user gradient deviations at most gammat certifies Delta_r f(x) <= Delta when
        (2r + 1) gammat / (mu (n - r - 1)) + 2 res / mu + 2 eta <= Delta,
    and then the release is exactly DelOutputPert's f(x) + N(0, sigma^2 I) (S* is empty for every R1).

    With ``calibration="tight"`` and a finite ``smoothness`` beta0 (every user's loss minus the
    quadratic terms common to all users is convex with Hessian <= beta0 I), the certificate is also
    allowed the smooth route of ``smooth_spread`` and takes the smaller of the two (both bound
    Delta_r); Delta0 is then the smaller one at gamma0 and res = 0.
    """

    smoothness: float = math.inf

    @property
    def gamma0(self) -> float:
        return 5.0 * self.lipschitz * math.sqrt(math.log(self.num_users / self.beta) / self.items_per_user)

    def _spread(self, gamma: float) -> float:
        r = self.deletions
        return (2 * r + 1) * gamma / (self.strong_convexity * (self.num_users - r - 1))

    def smooth_spread(self, gamma: float, residual: float) -> float:
        """Delta_r theta*(x) <= [gammat n / (n - r) + beta0 (res + r gammat / (n - r)) / mu] / (mu (n - r - 1)).

        Proof (x_S: the users outside S, s = |S| <= r, F_S their mean loss, mu-strongly convex,
        theta_S its minimiser over K, thetat the computed point with residual res, g_u the users'
        gradients at thetat, gbar their mean, ||g_u - gbar|| <= gammat):
        (a) F_{S+i} - F_S has gradient (grad F_S - grad f_i) / (n - s - 1); at theta_S, -grad F_S is
            in K's normal cone, so ||theta_S - theta_{S+i}|| <= ||grad f_i - grad F_S||(theta_S) /
            (mu (n - s - 1)) (strong convexity of F_{S+i} + the indicator of K).
        (b) ||grad F_S(thetat) + v|| <= res + s gammat / (n - s) for the residual's normal-cone v
            (the deleted users' deviations sum to minus the kept ones'), so ||theta_S - thetat|| <=
            (res + s gammat / (n - s)) / mu.
        (c) u(theta) = grad f_i - grad F_S changes by at most beta0 ||theta - theta'|| (the common
            quadratic terms cancel; a difference of two Hessians in [0, beta0 I] has norm <= beta0),
            and ||u(thetat)|| <= gammat + s gammat / (n - s).
        (a)-(c) give the bound for each s, largest at s = r. The paper's triangle route through
        thetat pays (2r + 1) gammat instead of about gammat (1 + beta0 r / (mu n)).
        """
        return smooth_deletion_bound(gamma, residual, self.num_users, self.deletions, self.strong_convexity,
                                     self.smoothness)

    def _smooth(self) -> bool:
        return self.calibration == Calibration.TIGHT and math.isfinite(self.smoothness)

    def _base(self) -> float:
        """Delta0: the certificate's bound at gamma0 and res = 0."""
        paper = self._spread(self.gamma0)
        return min(paper, self.smooth_spread(self.gamma0, 0.0)) if self._smooth() else paper

    @property
    def tolerance(self) -> float:
        """eta: the solver stops only when its residual is <= mu eta."""
        return self._base() / 100.0

    @property
    def sensitivity(self) -> float:
        """Delta = Delta0 + 4 eta."""
        return self._base() + 4.0 * self.tolerance

    def certificate(self, gamma: float, residual: float) -> float:
        """The certified bound on Delta_r of the solver's map at this solution."""
        paper = self._spread(gamma) + 2.0 * residual / self.strong_convexity
        bound = min(paper, self.smooth_spread(gamma, residual)) if self._smooth() else paper
        return bound + 2.0 * self.tolerance

    def certifies(self, gamma: float, residual: float) -> bool:
        return self.certificate(gamma, residual) <= self.sensitivity
