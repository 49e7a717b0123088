"""Shuffled noisy MB-SGD: seed-004 Alg. 2 with K = 1 and a secure shuffler (SDP; Thm 5.1, spec §3.7).

Symbols: N silos, M participating per round, K = 1 record per silo per round, R rounds,
L = ``l2_clip`` (the per-record gradient bound enforced by clipping), n records per silo.

Trust model: shuffle DP. The server is untrusted; each silo trusts itself and a shuffler that is
trusted only to permute the round's reports and drop sender identity (seed-004 Definition 3).
Every report is already noised inside the silo; the server sees only the shuffled multiset.
Unit and neighbouring relation: record level; one record anywhere in the federation is replaced
(REPLACE_ONE over the union of the silos' records).
Guarantee: (epsilon, delta)-SDP for the shuffled transcript of all R rounds, as computed by
``fedray.protocols.isrl_dp.shuffle_calibration`` (per-record Gaussian randomizer, FMT21 amplification by
shuffling among the M reports, subsampling q = 1/n in the record's silo (no credit for sampling
silos: the server knows who took part), composition over the rounds that silo joined). Each report is
also (eh0, dh0)-DP on its own, so the run is ISRL-DP too, with the weaker per-silo spend.
Silo half (Alg. 2 lines 6-7 with K = 1): draw one of the silo's n records uniformly, clip its
gradient to L (replace-one sensitivity 2L), add N(0, noise_std^2 I) inside the silo, with
noise_std = noise_multiplier * 2L and noise_multiplier = sqrt(2 ln(2/dh0)) / eh0
(sigma^2 = 8 L^2 ln(2/dh0) / eh0^2, spec §3.7).
Shuffler (between the halves, ``fedray.runtime.shuffler``): the recipe's ``Routing.SHUFFLE`` tells the
driver to route the silo messages through it; the server step receives the permuted messages and a prefix
mask that marks how many arrived, never who sent them.
Server half (lines 8-9): average the shuffled messages, step, project onto W.
Calibration: the planner solves the chain for the whole federation (N, smallest n, M, R) with
``privacy.calibration=paper`` (advanced composition, the paper's route) or ``accountant`` (PLD
composition); see ``fedray.plan`` and ``fedray.protocols.isrl_dp.shuffle_calibration``.
Assumptions: K = 1 (refused otherwise at planning, by the recipe); participants independent of
the data; the same randomizer (same noise_std) in every silo, which amplification by shuffling needs.
Randomness: MINIBATCH and NOISE streams keyed by (repetition, round, silo); the shuffler's
permutation comes from the SHUFFLE stream keyed by (repetition, round).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedray.protocols.isrl_dp.minibatch_sgd import MinibatchSGD
from fedray.protocols.isrl_dp import theory
from fedray.protocols.isrl_dp.planning import ShuffledGaussian


@dataclass(frozen=True)
class ShuffledSGD(MinibatchSGD):
    """Alg. 2 with K = 1 behind a shuffler; per-replica step sizes ``step_size`` (P,).

    The silo half (one record's clipped gradient plus noise) and the server half (average, step,
    project) are MinibatchSGD's with K = 1; the average is a symmetric function of the reports,
    so the shuffled order changes nothing. What differs is where the messages go and the privacy.
    """

    # Shuffle DP behind the shuffler: the planner solves the chain for the whole federation.
    recipe: ClassVar[ShuffledGaussian] = ShuffledGaussian(theorem=theory.shuffled_convex)
