"""Empirical audits of the sums seed 000's protocols release, end to end.

Worst-case neighbours for one release: B users; user 0 holds +L e_1 in D and -L e_1 in D' (the
replace-one sensitivity 2 L of the sum), the others hold 0. Every draw is an independent
deployment (a replica with its own stream key), so one call of the mechanism gives all draws.

- P_vec: the users' randomizer (``SplitVectorSum.randomize``, the code P_SGD / P_GD run in the
  users' actor), the real shuffler ACTOR summing the counts, and the analyzer. P_vec's noise is
  far above what its claim needs at these sizes (X1: ~6e4 x the central Gaussian's variance), so
  the honest audit can only show a bound near 0; the test that has teeth is the broken variant
  with the binomial noise dropped (the rounding alone reaches the server), which must be caught.
- The Gaussian baselines: local DP audited on user 0's own message (what its guarantee covers: the
  server may see every message), central DP on the released sum; an honest bound at or below the
  claim, and half the noise caught (the bound exceeds the claim).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedray.core.protocol import RoundKeys
from fedray.privacy import audit_epsilon
from fedray.privacy.gaussian_sum import CentralGaussianSum, LocalGaussianSum, release_sigma
from fedray.privacy.vector_sum import SplitVectorSum, vector_sum_parameters
from fedray.rng import SiloDraws

pytestmark = pytest.mark.slow

DELTA, L2, USERS, DIM = 1e-6, 1.0, 4, 1


def neighbours(flag: int, draws: int) -> np.ndarray:
    """(draws, B, 1, d) user vectors of D (flag 0) or D' (flag 1), one deployment per draw."""
    x = np.zeros((draws, USERS, 1, DIM))
    x[:, 0, 0, 0] = L2 if flag == 0 else -L2
    return x


def draws_for(rng: np.random.Generator, draws: int) -> SiloDraws:
    streams = np.stack([np.full(draws, int(rng.integers(2**31))), np.arange(draws)], axis=1)
    return SiloDraws(int(rng.integers(2**31)), streams, 0, np.arange(USERS))


def pvec_sampler(vector_sum: SplitVectorSum, shuffler):
    import ray

    def sample(flag, num_draws, rng):
        counts = vector_sum.randomize(neighbours(flag, num_draws), draws_for(rng, num_draws))   # users' actor
        mask = np.ones(counts.shape[:2], dtype=bool)
        shuffled = ray.get(shuffler.shuffle.remote(0, (counts, mask)))                          # shuffler actor
        return vector_sum.estimate(shuffled.messages[:, 0], shuffled.counts)                    # analyzer

    return sample


def test_p_vec_through_the_shuffler_actor_stays_below_its_claim_and_a_noiseless_one_is_caught(ray_local):
    from fedray.runtime.shuffler import ShufflerActor

    ray = ray_local
    eps = 15.0
    params = vector_sum_parameters(eps, DELTA, DIM, USERS, L2)
    shuffler = ShufflerActor.options(num_cpus=0).remote(0, np.zeros((4000, 1)), "sum")
    try:
        honest = audit_epsilon(pvec_sampler(SplitVectorSum(params), shuffler), 4000, np.random.default_rng(0),
                               delta=DELTA)
        # The noise dropped: one "noise bit" with p ~ 0, so ones = xhat, the rounded inputs themselves.
        noiseless = dataclasses.replace(params, noise_bits=1, bit_probability=1e-12)
        broken = audit_epsilon(pvec_sampler(SplitVectorSum(noiseless), shuffler), 4000, np.random.default_rng(1),
                               delta=DELTA)
    finally:
        ray.kill(shuffler)
    print(f"P_vec eps={eps}: honest lower bound {honest.eps_lower:.3f}, noiseless {broken.eps_lower:.3f}")
    assert honest.eps_lower <= eps
    assert broken.eps_lower > 5.0        # 2000 evaluation draws cap the bound near ln(2000 / 3) = 6.5


def gaussian_sampler(sum_step, central: bool):
    def sample(flag, num_draws, rng):
        x = neighbours(flag, num_draws)
        if central:
            keys = RoundKeys(int(rng.integers(2**31)), np.zeros(num_draws), 0, np.arange(num_draws)[:, None])
            return sum_step.estimate(sum_step.randomize(x, None).sum(axis=1), USERS, keys)
        return sum_step.randomize(x, draws_for(rng, num_draws))[:, 0]     # local DP: user 0's own message

    return sample


@pytest.mark.parametrize("central", [False, True])
def test_gaussian_sums_stay_below_their_claim_and_half_the_noise_is_caught(central):
    eps = 4.0            # half the noise then gives a bound of ~4.5-4.7 (100,000 evaluation draws)
    sigma = release_sigma(eps, DELTA, L2)

    def make(s):
        return CentralGaussianSum(s) if central else LocalGaussianSum(s)

    honest = audit_epsilon(gaussian_sampler(make(sigma), central), 200_000, np.random.default_rng(2), delta=DELTA)
    broken = audit_epsilon(gaussian_sampler(make(sigma / 2), central), 200_000, np.random.default_rng(3), delta=DELTA)
    print(f"{'central' if central else 'local'} Gaussian eps={eps}: honest {honest.eps_lower:.3f}, "
          f"half noise {broken.eps_lower:.3f}")
    assert honest.eps_lower <= eps
    assert broken.eps_lower > eps
