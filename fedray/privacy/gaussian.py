"""One release of the Gaussian mechanism: the noise that makes it (epsilon, delta)-DP.

The mechanism releases f(D) + N(0, sigma^2 I) where ||f(D) - f(D')|| <= sensitivity for every
pair of neighbours (the caller's relation and unit). Two calibrations:

- ``classic_sigma``: sigma = sensitivity sqrt(2 ln(1.25 / delta)) / epsilon (Dwork & Roth 2014,
  Thm A.1), proved for epsilon < 1 only;
- ``analytic_sigma``: the smallest sigma for which the mechanism is (epsilon, delta)-DP, any
  epsilon > 0 (Balle & Wang 2018, Thm 8): the privacy profile of the Gaussian mechanism is exactly

      delta(epsilon) = Phi(s / 2 - epsilon / s) - e^epsilon Phi(-s / 2 - epsilon / s),  s = sensitivity / sigma,

  decreasing in sigma, solved here by root finding on log scale.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr


def gaussian_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """The exact delta at ``epsilon`` of one Gaussian release (module docstring)."""
    s = sensitivity / sigma
    return float(ndtr(s / 2.0 - epsilon / s) - np.exp(epsilon + log_ndtr(-s / 2.0 - epsilon / s)))


def analytic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest sigma with ``gaussian_delta(sigma) <= delta`` (to a relative 1e-12)."""
    if not (epsilon > 0 and 0 < delta < 1 and sensitivity > 0):
        raise ValueError(f"need epsilon > 0, 0 < delta < 1, sensitivity > 0; got {epsilon}, {delta}, {sensitivity}")
    # delta(sigma) - target changes sign between a sigma far too small and one far too large.
    low, high = math.log(sensitivity) - 30.0, math.log(sensitivity) + 30.0
    log_sigma = brentq(lambda t: gaussian_delta(math.exp(t), sensitivity, epsilon) - delta, low, high,
                       xtol=1e-13, rtol=1e-13)
    sigma = math.exp(log_sigma)
    while gaussian_delta(sigma, sensitivity, epsilon) > delta:    # land on the private side of the root
        sigma *= 1.0 + 1e-12
    return sigma


def classic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """sensitivity sqrt(2 ln(1.25 / delta)) / epsilon, for epsilon < 1 (module docstring)."""
    if not (0 < epsilon < 1 and 0 < delta < 1):
        raise ValueError(f"the classic Gaussian mechanism needs 0 < epsilon < 1 and 0 < delta < 1; got {epsilon}, {delta}")
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
