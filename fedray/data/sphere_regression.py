"""Linear regression on the unit sphere: a population whose risk is known in closed form, so an
experiment can report the EXCESS POPULATION risk of a released model exactly (seed 000's X2).

Symbols: d = ``dim``, r = ``signal`` (||w*||), s = ``noise``; one record per unit by default
(seed 000's users).

Model (w* from ``data_generator(seed, trial)``; records per block of units, like SyntheticLinear)
------------------------------------------------------------------------------------------------
    w* = r e,  e uniform on the unit sphere S^{d-1}
    x uniform on S^{d-1}        (||x|| = 1 exactly, E[x x^T] = I_d / d)
    y = <w*, x> + xi,  xi ~ Uniform[-s, s]  independent of x

Population risk of w, with v = w - w* and u = <v, x> (u = ||v|| t, t = x_1 in law):
    half squared loss  F(w) = (1/2) E (u - xi)^2 = ||v||^2 / (2 d) + s^2 / 6
    absolute loss      F(w) = E |u - xi| = E h(u),  h(u) = (u^2 + s^2) / (2 s) if |u| <= s, else |u|
where t^2 ~ Beta(1/2, (d - 1)/2) for d >= 2 (t = +-1 for d = 1), so E h(u) is a sum of incomplete
beta functions (``_absolute_risk``). Both are minimised at w = w*
(F* = s^2 / 6 and s / 2), so the excess risk is F(w) - F*.

``adversary`` (seed 002's P3): that user's training labels all equal ``adversarial_label``, the
rest of the federation unchanged: with ``adversary=null`` a neighbouring pair under
replace-one-user (the user's features stay; its labels are the worst case a bounded label allows).
(With an adversary or a shifted minority the Lipschitz bound below no longer holds for those users.)
``shifted_fraction`` and ``shift`` (P3's heterogeneity): the users with id < ceil(fraction n) have
labels from w* + shift u (u orthogonal to w*, same noise); the test records and the closed-form
risk stay the majority's.

Lipschitz constants over Theta = {||w|| <= R}: |<w, x> - y| <= R + r + s, so the squared loss's
gradient is (R + r + s)-bounded and the absolute loss's 1-bounded; the squared loss is 1-smooth
(||x||^2 = 1) and its population risk is (1/d)-strongly convex.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from fedray.data._prep import check_int, check_real, check_units, check_volume
from fedray.errors import ConfigError
from fedray.data.federation import Federation, FederationShape
from fedray.rng import BLOCK, Stream, data_generator, generator

LOSSES = ("squared", "absolute")


@dataclass(frozen=True)
class SphereRegression:
    """Regression on the unit sphere with uniform label noise (module docstring)."""

    num_silos: int = 1000
    samples_per_silo: int = 1
    test_samples_per_silo: int = 1
    dim: int = 10
    signal: float = 0.5
    noise: float = 0.5
    adversary: int | None = None          # a user whose every training label is adversarial_label (P3)
    adversarial_label: float = 0.0
    shifted_fraction: float = 0.0         # the users with id < ceil(fraction n) learn w* + shift u (P3)
    shift: float = 0.0

    def validate(self) -> None:
        check_units("data.num_silos", self.num_silos)
        check_int("data.samples_per_silo", self.samples_per_silo, 1)
        check_int("data.test_samples_per_silo", self.test_samples_per_silo, 0)
        check_int("data.dim", self.dim, 1)
        check_volume({"data.num_silos": self.num_silos,
                      "data.samples_per_silo": self.samples_per_silo + self.test_samples_per_silo, "data.dim": self.dim})
        check_real("data.signal", self.signal, 0.0, float("inf"), high_open=True)
        check_real("data.noise", self.noise, 0.0, float("inf"), low_open=True, high_open=True)
        if self.adversary is not None:
            check_int("data.adversary", self.adversary, 0)
            if self.adversary >= self.num_silos:
                raise ConfigError("data.adversary", self.adversary, f"null or a user id below num_silos = {self.num_silos}")
            check_real("data.adversarial_label", self.adversarial_label, -float("inf"), float("inf"), low_open=True,
                       high_open=True)
        check_real("data.shifted_fraction", self.shifted_fraction, 0.0, 1.0)
        check_real("data.shift", self.shift, 0.0, float("inf"), high_open=True)

    def describe(self) -> FederationShape:
        return FederationShape(num_silos=self.num_silos, n_train=(self.samples_per_silo,) * self.num_silos,
                               dim=self.dim, num_outputs=1, task="regression")

    def source(self) -> str:
        return "generated (fedray.data.SphereRegression, keyed by seed and trial)"

    def optimum(self, seed: int, trial: int = 0) -> np.ndarray:
        """w* (d,) of (seed, trial)."""
        e = data_generator(seed, trial).standard_normal(self.dim)
        return self.signal * e / np.linalg.norm(e)

    @property
    def shifted_users(self) -> int:
        return int(np.ceil(self.shifted_fraction * self.num_silos - 1e-9)) if self.shift > 0 else 0   # 0.07 * 200 = 14.000000000000002

    def shifted_optimum(self, seed: int, trial: int = 0) -> np.ndarray:
        """w* + shift u, u a unit vector orthogonal to w* (the shifted minority's optimum)."""
        w_star = self.optimum(seed, trial)
        g = data_generator(seed, trial).standard_normal((2, self.dim))[1]
        u = g - (g @ w_star) * w_star / max(w_star @ w_star, 1e-300)
        return w_star + self.shift * u / np.linalg.norm(u)

    def load(self, seed: int, trial: int = 0, silo_ids=None) -> Federation:
        ids = np.arange(self.num_silos) if silo_ids is None else np.asarray(silo_ids, dtype=np.int64)
        w_star = self.optimum(seed, trial)
        blocks = {b: self._block(seed, trial, b, w_star) for b in np.unique(ids // BLOCK)}
        x_train, y_train, x_test, y_test = (np.stack([blocks[i // BLOCK][k][i % BLOCK] for i in ids]) for k in range(4))
        shifted = ids < self.shifted_users
        if shifted.any():                      # a minority with its own optimum: the same noise, moved means
            y_train[shifted] += x_train[shifted] @ (self.shifted_optimum(seed, trial) - w_star)
        if self.adversary is not None:         # the neighbour that replaces one user's labels (seed 002's P3)
            y_train[ids == self.adversary] = self.adversarial_label
        return Federation(x_train=x_train, y_train=y_train, n_train=np.full(len(ids), self.samples_per_silo),
                          x_test=x_test, y_test=y_test, n_test=np.full(len(ids), self.test_samples_per_silo),
                          task="regression", num_outputs=1)

    def _block(self, seed: int, trial: int, block: int, w_star: np.ndarray) -> tuple[np.ndarray, ...]:
        rng = generator(seed, Stream.DATA, trial, block)
        size = min(BLOCK, self.num_silos - block * BLOCK)
        return (*self._records(rng, size, self.samples_per_silo, w_star),
                *self._records(rng, size, self.test_samples_per_silo, w_star))

    def _records(self, rng, units: int, count: int, w_star: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = rng.standard_normal((units, count, self.dim))
        x /= np.linalg.norm(x, axis=2, keepdims=True)
        y = x @ w_star + rng.uniform(-self.noise, self.noise, size=(units, count))
        return x, y

    def excess_risk(self, params: np.ndarray, w_star: np.ndarray, loss: str) -> np.ndarray:
        """F(w) - F* for models ``params`` (..., d) or (..., d, 1), in closed form (module docstring)."""
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
        w = np.asarray(params, dtype=np.float64)
        w = w[..., 0] if w.shape[-1] == 1 and w.ndim >= 2 and w.shape[-2] == self.dim else w
        distance = np.linalg.norm(w - w_star, axis=-1)
        if loss == "squared":
            return distance**2 / (2.0 * self.dim)
        return self._absolute_risk(distance) - self.noise / 2.0

    def population_excess_risk(self, params: np.ndarray, seed: int, trial: int, loss) -> np.ndarray | None:
        """F(w) - F* of the released models ``params`` (P, d, 1) of the run (seed, trial) under the
        run's ``loss`` (a ``fedray.losses.Squared``, a ``fedray.smoothing.Absolute``, or a Moreau
        envelope of either, whose excess is that of its base: the problem the smoothing solves); None
        where this population's risk has no closed form here (another loss, a shifted minority)."""
        base = getattr(loss, "base", loss)
        name = {"Squared": "squared", "Absolute": "absolute"}.get(type(base).__name__)
        if name is None or self.shifted_users > 0:
            return None
        return self.excess_risk(params, self.optimum(seed, trial), name)

    def _absolute_risk(self, distance: np.ndarray) -> np.ndarray:
        """E h(||v|| t) with q = t^2 ~ Beta(1/2, (d - 1)/2) and c = min(1, s / ||v||):
        (s/2) P(q <= c^2) + (||v||^2 / (2 s)) E[q; q <= c^2] + ||v|| E[sqrt q; q > c^2], each an
        incomplete beta function (E[q^k; q <= z] = B(a + k, b) / B(a, b) I_z(a + k, b))."""
        s, dist = self.noise, np.asarray(distance, dtype=np.float64)
        if self.dim == 1:                                    # t = +-1
            return np.where(dist <= s, (dist**2 + s**2) / (2.0 * s), dist)
        a, b = 0.5, (self.dim - 1) / 2.0
        with np.errstate(divide="ignore", over="ignore"):
            z = np.minimum(1.0, (s / dist) ** 2)             # dist = 0: z = 1, every t inside the kinks
        inside = special.betainc(a, b, z)
        second = special.betainc(a + 1.0, b, z) / self.dim                     # B(a+1, b) / B(a, b) = 1/d
        first_tail = np.exp(special.betaln(a + 0.5, b) - special.betaln(a, b)) * (1.0 - special.betainc(a + 0.5, b, z))
        return 0.5 * s * inside + dist**2 / (2.0 * s) * second + dist * first_tail
