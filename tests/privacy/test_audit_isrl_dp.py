"""Empirical audit of ISRL-DP MB-SGD's silo message, run through the algorithm's own silo half.

Worst case for a silo: all its records are the same x (label 1) and the neighbour replaces one of
them by x with label 0, so the two clipped per-example gradients point in opposite directions with
norm l2_clip each: the minibatch mean moves by exactly the replace-one sensitivity 2 l2_clip / K.
The auditor (fedray.privacy.audit) turns many runs on both neighbours into a lower bound on
epsilon; it must stay at or below what fedray's ledger claims, and catch a mechanism that adds
half the noise it accounts for.
"""

import numpy as np
import pytest

from fedray.protocols.isrl_dp import MinibatchSGD
from fedray.data import SiloArrays
from fedray.losses import Logistic
from fedray.privacy import GaussianNoise, PerExampleClip, audit_epsilon, silo_ledger
from fedray.rng import SiloDraws

pytestmark = pytest.mark.slow

DELTA = 1e-5
L2_CLIP = 1.0


def neighbours(n):
    x = np.tile([2.0, 0.0], (n, 1))        # logistic residual at w = 0 is -0.5: gradient norm 1
    y = np.ones(n)
    y_prime = y.copy()
    y_prime[0] = 0.0                         # replaced record: gradient flips sign
    return (x, y), (x, y_prime)


def silo_sampler(n, k, noise_multiplier, rounds):
    datasets = neighbours(n)
    std = noise_multiplier * PerExampleClip(L2_CLIP).sensitivity(k, "replace_one")

    def sample(flag, num_draws, rng):
        # Independent runs are independent silos holding the same records: one replica, num_draws
        # silos, each with its own minibatch and noise streams.
        x, y = datasets[flag]
        silos = SiloArrays(np.arange(num_draws), np.broadcast_to(x, (num_draws, n, 2)), np.broadcast_to(y, (num_draws, n)),
                           np.full(num_draws, n), np.broadcast_to(np.linalg.norm(x, axis=1), (num_draws, n)))
        algorithm = MinibatchSGD(Logistic(), np.ones(1), k, L2_CLIP, GaussianNoise(np.full((1, num_draws), std)))
        seed = int(rng.integers(2**31))
        params = np.zeros((1, 2, 1))
        messages = [
            algorithm.silo_step(params, silos, SiloDraws(seed, np.zeros(1), r, np.arange(num_draws), width=n))[0, :, 0, 0]
            for r in range(rounds)
        ]
        return np.stack(messages, axis=1)

    return sample


def claimed_epsilon(noise_multiplier, k, n, rounds, accountant):
    ledger = silo_ledger(np.array([[noise_multiplier]]), k, np.array([n]), 1, np.array([DELTA]), accountant)
    ledger.counts[:] = rounds
    return float(ledger.epsilons()[0, 0])


@pytest.mark.parametrize("rounds", [1, 3])
def test_full_batch_message_audit_stays_below_the_claim_and_catches_half_noise(rounds):
    n = k = 20
    z = 1.2 * np.sqrt(rounds)   # per-round claim around 3, composed claim similar
    claim = claimed_epsilon(z, k, n, rounds, "pld")
    correct = audit_epsilon(silo_sampler(n, k, z, rounds), 100_000, np.random.default_rng(0), delta=DELTA)
    broken = audit_epsilon(silo_sampler(n, k, z / 2, rounds), 100_000, np.random.default_rng(1), delta=DELTA)
    print(f"rounds={rounds} claim={claim:.3f} correct_lower={correct.eps_lower:.3f} "
          f"half_noise_lower={broken.eps_lower:.3f} confidence={correct.confidence}")
    assert correct.eps_lower <= claim
    assert broken.eps_lower > claim


def test_subsampled_message_audit_stays_below_the_pld_claim():
    # K of n without replacement: the PLD claim uses the dominating pair; the worst-case silo
    # attains that pair, so an error in the reduction would show up as a bound above the claim.
    n, k, z = 20, 10, 0.6
    claim = claimed_epsilon(z, k, n, 1, "pld")
    assert claim <= claimed_epsilon(z, k, n, 1, "rdp")
    result = audit_epsilon(silo_sampler(n, k, z, 1), 100_000, np.random.default_rng(2), delta=DELTA)
    print(f"subsampled q=0.5 claim={claim:.3f} lower={result.eps_lower:.3f}")
    assert 0.3 * claim < result.eps_lower <= claim
