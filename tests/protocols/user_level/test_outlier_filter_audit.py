"""Black-box audit of seed 002's filtered, noised server step under the derived profile (issue 39
item 5): the filter's coupling constant c_Delta = 120, "probed empirically, not proved"
(``fedray.protocols.user_level.phased_parameters.COUPLING_CONSTANT``).

The step (``OutlierRemovalStep``: AboveThreshold at eps / 2 on the concentration score, the outlier
filter at 2 tau, Gaussian noise) with profile D's sigma for one release: ``derived_noise`` at
T = 1, K = 100, (eps, delta) = (1, 1e-5), sigma = z Delta with Delta = c_Delta tau (7 + 3 ln(1 /
zeta)) / K, z = 7.35 (eps / 2, delta / 2 by the PLD accountant), ln(1 / zeta) = 14.82.

The pair, one adversarial user: K - 1 honest users' vectors at 0, user 0's at -2 tau in D and +2
tau in D'. Every pair is close (within 2 tau) on both sides, so both scores are K (the test's law
is the same) and the filter keeps everyone: the released means are 4 tau / K apart, the largest
shift one user can force deterministically (a kept point is within 2 tau of 2K/3 of the others).
In units of tau (7 + 3 ln(1 / zeta)) / K that is 4 / 51.46 = 0.078: any c_Delta below 0.078
leaves this pair's Gaussian under-noised, whatever the coupling argument says.
"""

import numpy as np
import pytest

from fedray.privacy import audit_epsilon
from fedray.privacy.mechanisms import ServerGaussianNoise
from fedray.protocols.user_level import phased_parameters
from fedray.protocols.user_level.outlier_removal import OutlierRemovalStep

EPS, DELTA, USERS, TAU, DRAWS = 1.0, 1e-5, 100, 1.0, 20_000


def derived_sigma() -> float:
    """Profile D's sigma for one release of a K-user step (the real calibration code)."""
    problem = phased_parameters.Problem(users=USERS, items=1, dim=1, epsilon=EPS, delta=DELTA)
    layout = phased_parameters.PhaseLayout((USERS,), (1,), (USERS,))
    return float(phased_parameters.derived_noise(problem, TAU, layout)[0][0])


def neighbours(flag: int) -> np.ndarray:
    """(1, K, 1): the honest users at 0, the adversary at -2 tau (D, flag 0) or +2 tau (D')."""
    vectors = np.zeros((1, USERS, 1))
    vectors[0, 0, 0] = 2 * TAU if flag else -2 * TAU
    return vectors


def step_sampler(noise_std: float, seen: list):
    """``sample(flag, draws, rng)``: the step's release per replica (each with its own generator,
    as Alg. 3 gives it); a halted replica releases nothing, recorded as 0 (midway between the two
    means). ``seen`` collects each call's StepResult."""
    def sample(flag, num_draws, rng):
        step = OutlierRemovalStep(EPS, TAU, ServerGaussianNoise(np.full(num_draws, noise_std), 1.0))   # std sigma each
        generators = rng.spawn(num_draws)
        vectors = np.broadcast_to(neighbours(flag), (num_draws, USERS, 1))
        result = step(vectors, step.pass_level(USERS, generators), generators)
        seen.append(result)
        return np.where(result.halted[:, None], 0.0, result.gradient)

    return sample


@pytest.mark.slow
def test_the_derived_filter_constant_stays_below_the_claim_and_a_tiny_constant_is_caught(monkeypatch):
    """Catches a coupled sensitivity far too small for the filtered mean (c_Delta set 12,000 times
    below 120, or a Delta without the 1 / K-scaled 4 tau a kept adversary moves the mean by).
    Measured (20,000 draws per neighbour, 95% confidence, delta 1e-5, claim eps = 1 for the step):
    c_Delta = 120 (sigma 453.8 against a shift of 0.04) gives a lower bound of 0.00; c_Delta = 0.01
    (sigma 0.0378) gives 2.29 > 1. The audit's reach: c_Delta = 0.02 gives 0.61, not caught at this
    size (break-even on this pair is 0.078, and the step's claim includes the test's eps / 2).
    About 20 s."""
    honest_seen, broken_seen = [], []
    honest = audit_epsilon(step_sampler(derived_sigma(), honest_seen), DRAWS, np.random.default_rng(0), delta=DELTA)
    monkeypatch.setattr(phased_parameters, "COUPLING_CONSTANT", 0.01)
    weak_sigma = derived_sigma()
    broken = audit_epsilon(step_sampler(weak_sigma, broken_seen), DRAWS, np.random.default_rng(1), delta=DELTA)
    print(f"derived filter step eps={EPS}: c_Delta=120 lower bound {honest.eps_lower:.3f}, "
          f"c_Delta=0.01 (sigma {weak_sigma:.4f}) {broken.eps_lower:.3f}")
    for result in honest_seen + broken_seen:                       # the pair is as described
        passed = ~result.halted
        assert np.all(result.score == USERS) and np.all(result.kept[passed] == USERS)
    halts = [result.halted.mean() for result in honest_seen]       # D, D': the same law (~17% at K = 100)
    assert max(halts) < 0.3 and abs(halts[0] - halts[1]) < 0.02
    assert honest.eps_lower <= EPS
    assert broken.eps_lower > EPS
