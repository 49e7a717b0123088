"""SDP one-pass accelerated MB-SGD: seed-004 Alg. 6 (Thm 5.2 / G.2, spec §3.8), AC-SA behind P_vec.

Symbols: N silos, M = ``silos_per_round`` participating every round, K = ``batch_size`` records
per silo per round, R <= floor(n / K) rounds, L = ``l2_clip`` (the per-record gradient bound
enforced by clipping), D = d C the length of one gradient, n_u = M K the users of one P_vec
invocation (one user per record gradient), (eps, delta) = (``target_epsilon``, ``target_delta``).

Trust model: shuffle DP. The server is untrusted; a record trusts its own silo and a shuffler
that is trusted only to permute and drop sender identity (seed-004 Definition 3). Nothing but
P_vec's randomized 1-bit counts leaves a silo, and the server sees only their sum.
Unit and neighbouring relation: record level; one record anywhere in the federation is replaced
(REPLACE_ONE over the union of the silos' records).
Guarantee: (eps, delta)-SDP for everything the server sees over the whole run. Each round is one
P_vec invocation over its n_u record gradients, (eps, delta)-DP (seed-000 Theorem 3.2, needs
0 < eps <= 15, 0 < delta < 1/2); each record enters at most one invocation (one pass, disjoint
batches), so parallel composition gives (eps, delta) for the run; no subsampling credit (seed-004
§3.8, on purpose). The AC-SA iterates are post-processing. The ledger is
``fedray.privacy.ledger.one_pass_ledger``.
Silo half (Alg. 6 line 6): K records WITHOUT replacement from disjoint blocks of a per-silo
permutation (``SiloDraws.epoch_slice``, as ``OnePassAcceleratedSGD``), the gradient of each at the
query point w^md_r clipped to L, no Gaussian noise. Each gradient runs P_vec's randomizer inside
the silo in its count form M2 (``SplitVectorSum.randomize``); the silo sends the sum of its K records'
count vectors. The shuffler (``Routing.SHUFFLE_SUM``) hands the server only the sum over the M
silos: exactly the per-label 1-bit counts of the message form M1, the analyzer's whole view.
Server half: A_vec on the summed counts (debiased with n_u = M_r K), divided by M_r K, then the
AC-SA step (``fedray.acsa.AcSa``: query point, prox step, w^ag; lines 4, 9, 10).
Calibration: seed-000 §2.2 (from the proof of Thm 3.2 / A.6; "paper" mode, the only one), with
the seed-004 §6 item 6 corrections (range 2L, re-centre by n_u L), computed in the silo from
(eps, delta, D, n_u = M K, L): ``fedray.privacy.vector_sum.vector_sum_parameters``. Its MSE on
the sum is O(D L^2 ln^2(D/delta)/eps^2) with a constant near 6e4: expect small steps.
Assumptions: exactly M silos every round (uniform participation, checked by the planner; P_vec
is calibrated for n_u users and a round with fewer would be less private, so the server raises
on one); the same parameters in every silo; participants independent of the data.
Randomness: MINIBATCH at (repetition, EPOCH_ROUND, silo) for the one-pass permutation; P_vec's
rounding and binomial draws from NOISE at (repetition, round, silo block), as ``SiloDraws`` keys them.
Without ``target_epsilon`` (trust model none) silos send their exact clipped gradient sums.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedray.protocols.isrl_dp.accelerated import AcSaFields, AcSaRounds
from fedray.protocols.isrl_dp.planning import ShuffledVectorSum, VectorSumSettings
from fedray.data.federation import SiloArrays
from fedray.errors import ConfigError
from fedray.losses import clipped_example_gradients
from fedray.privacy.vector_sum import ExactSum, SplitVectorSum, vector_sum_parameters
from fedray.rng import SiloDraws


@dataclass(frozen=True)
class ShuffledOnePassAcceleratedSGD(AcSaFields, AcSaRounds):
    """One-pass AC-SA whose silo messages are P_vec counts behind a summing shuffler.

    ``noise`` is unused: P_vec's binomial noise is the only privacy noise. ``target_epsilon``,
    ``target_delta`` and ``silos_per_round`` come from the privacy and participation config (see
    ``fedray/conf/algorithm/sdp_one_pass_accelerated.yaml``); the planner accounts the same values.
    """

    target_epsilon: float | None = None   # None: no privacy, exact sums
    target_delta: float | None = None
    silos_per_round: int | None = None    # M: P_vec is calibrated for n_u = M K users

    # Behind a summing shuffler (P_vec's M2 form); one P_vec invocation per record, parallel composition.
    recipe: ClassVar[ShuffledVectorSum] = ShuffledVectorSum(settings=VectorSumSettings)

    def vector_sum(self, dim: int) -> SplitVectorSum | ExactSum:
        """The sum step for D = ``dim``; raises ``ConfigError`` naming a bad P_vec input."""
        if self.target_epsilon is None:
            return ExactSum()
        if self.target_delta is None or np.ndim(self.l2_clip):
            raise ConfigError("privacy", {"delta": self.target_delta, "l2_clip": self.l2_clip},
                              "a delta and one clip L for P_vec's calibration")
        m = self.silos_per_round
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
            raise ConfigError("algorithm.silos_per_round", m,
                              "the fixed M >= 1 P_vec is calibrated for (participation=uniform)")
        return SplitVectorSum(vector_sum_parameters(
            self.target_epsilon, self.target_delta, dim, int(m) * self.batch_size, float(self.l2_clip)))

    @staticmethod
    def silo_gradients(alg, query: np.ndarray, silos: SiloArrays, draws: SiloDraws) -> np.ndarray:
        """Each of K one-pass records' clipped gradient through P_vec's randomizer; the silo's counts."""
        idx = draws.epoch_slice(silos.sizes, alg.batch_size)
        grads = clipped_example_gradients(alg.loss, query, silos.x, silos.y, silos.x_norms, idx, alg.l2_clip)
        p, s, k, d, c = grads.shape
        return alg.vector_sum(d * c).randomize(grads.reshape(p, s, k, d * c), draws).reshape(p, s, d, c)

    def gradient_estimate(self, messages: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """g~_r = A_vec(summed counts) / (M_r K) per replica (P, d, C), and M_r (P,).

        The sum over the masked rows is the same whether the shuffler summed or permuted.
        """
        p, _, d, c = messages.shape
        senders = mask.sum(axis=1)
        if self.target_epsilon is not None and np.any((senders > 0) & (senders < (self.silos_per_round or 0))):
            raise ValueError(f"a round had {senders.tolist()} silos; P_vec is calibrated for "
                             f"M = {self.silos_per_round} and would be less private with fewer")
        total = (messages * mask[:, :, None, None]).sum(axis=1).reshape(p, d * c)
        users = senders * self.batch_size
        estimate = self.vector_sum(d * c).estimate(total, users)
        return (estimate / np.maximum(users, 1)[:, None]).reshape(p, d, c), senders
