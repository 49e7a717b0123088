"""Output perturbation for functions of small local deletion sensitivity (seed-003 spec §2.1-2.3b):
the shifted truncated discrete Laplace deletion budget and the constants of DelOutputPert and
SCOutputPert's certificate mode.

Symbols: eps, delta the target (replace-one user-level), eps2 = eps/2, delta2 = delta/(e^eps + 2),
kappa = 1 + ceil(ln(1/delta2)/eps2), r = 4 kappa deletions, N0 = 8 kappa + 2 the fewest users
the mechanism accepts, G the Lipschitz constant of each item's loss on K, mu its strong convexity,
n users with m items each, beta the failure probability of the utility guarantee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


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


@dataclass(frozen=True)
class CertifiedPerturbation:
    """SCOutputPert's constants in certificate mode (spec §2.3b), all data independent.

    gamma0 = 5 G sqrt(ln(n/beta)/m) (a per-user gradient-deviation bound, Lemma 3.8 + a union over
    users), Delta0 = (2r + 1) gamma0 / (mu (n - r - 1)), eta = Delta0 / 100, Delta = Delta0 + 4 eta,
    sigma = sqrt(2 ln(2/delta2)) 8 kappa Delta / eps2. A solution with optimality residual res and
    per-user gradient deviations at most gammat certifies Delta_r f(x) <= Delta when
        (2r + 1) gammat / (mu (n - r - 1)) + 2 res / mu + 2 eta <= Delta,
    and then the release is exactly DelOutputPert's f(x) + N(0, sigma^2 I) (S* is empty for every R1).
    """

    epsilon: float
    delta: float
    beta: float
    lipschitz: float
    strong_convexity: float
    num_users: int
    items_per_user: int

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
    def min_users(self) -> int:
        """N0 = 8 kappa + 2."""
        return 8 * self.kappa + 2

    @property
    def gamma0(self) -> float:
        return 5.0 * self.lipschitz * math.sqrt(math.log(self.num_users / self.beta) / self.items_per_user)

    def _spread(self, gamma: float) -> float:
        r = self.deletions
        return (2 * r + 1) * gamma / (self.strong_convexity * (self.num_users - r - 1))

    @property
    def tolerance(self) -> float:
        """eta: the solver stops only when its residual is <= mu eta."""
        return self._spread(self.gamma0) / 100.0

    @property
    def sensitivity(self) -> float:
        """Delta = Delta0 + 4 eta."""
        return self._spread(self.gamma0) + 4.0 * self.tolerance

    @property
    def noise_std(self) -> float:
        return math.sqrt(2.0 * math.log(2.0 / self.delta2)) * 8 * self.kappa * self.sensitivity / self.epsilon2

    def certificate(self, gamma: float, residual: float) -> float:
        """The certified bound on Delta_r of the solver's map at this solution."""
        return self._spread(gamma) + 2.0 * residual / self.strong_convexity + 2.0 * self.tolerance

    def certifies(self, gamma: float, residual: float) -> bool:
        return self.certificate(gamma, residual) <= self.sensitivity
