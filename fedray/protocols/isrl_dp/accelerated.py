"""Accelerated noisy minibatch SGD: ISRL-DP AC-SA (seed-004 Alg. 1, §3.2) and its one-pass form (§3.3).

Symbols: N silos, M participating per round, K records per minibatch, R rounds, L = 2 * l2_clip,
mu = ``strong_convexity``, lambda = ``regularization``, nu = 1 / ``step_size`` (the prox scale),
alpha_r the averaging weight and eta_r the PROX WEIGHT of round r (an inverse step size; §6 item 1).

Trust model: ISRL-DP with ``GaussianNoise`` (no trusted server; silos do not trust each other;
every message leaving a silo is already private). Non-private with ``NoNoise``.
Unit and neighbouring relation: record level; replace one record of one silo (REPLACE_ONE).
Guarantee: each silo's transcript is (eps, delta)-DP, where (eps, delta) is what the silo's ledger
reports. The iterates w^md, w, w^ag are post-processing of the transcript.
Silo half (lines 5-8): Alg. 2's silo half at the query point w^md_r (``noisy_minibatch_mean``):
K records WITHOUT replacement, per-example gradients clipped to ``l2_clip``, mean, Gaussian noise
inside the silo. The one-pass variant takes the K records from disjoint blocks of a per-silo
permutation fixed for the run (``SiloDraws.epoch_slice``), so each record is used at most once.
Server half (lines 9-10): the mean of the M messages is the gradient estimate of the AC-SA
server ``fedray.acsa.AcSa`` (regularizer gradient lambda (w^md_r - w_0), which is data independent
so the sensitivity is unchanged; prox step; w^ag_r, the output). ``step_size`` carries 1/nu per
replica; GL's condition nu >= 2 beta reads step_size <= 1/(2 beta).
Built from parts: the AC-SA server (with ``SingleStage``, or ``Stages`` in ``multistage``) and a
silo half: a fresh minibatch per round (``minibatch_gradients``) or a block of a one-pass
permutation (``one_pass_gradients``).
Calibration: ERM (Thm F.1/F.2) uses Alg. 2's formulas (MinibatchSGD's ``recipe``, with Thm F.1 as its theorem). One-pass
(Thm 3.1/E.1): G2 per release, sigma^2 = 32 L^2 ln(1.25/delta)/(eps^2 K^2), and parallel
composition over the disjoint batches (``recipe.one_pass``: the ledger charges one release).
Randomness: NOISE stream keyed by (repetition, round, silo); MINIBATCH keyed by (repetition,
round, silo), or for one-pass by (repetition, EPOCH_ROUND, silo) (see ``fedray.rng``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from fedray.acsa import AcceleratedState, AcSa, SingleStage
from fedray.core.protocol import RoundKeys
from fedray.core.terms import Calibration
from fedray.data.federation import SiloArrays
from fedray.protocols.isrl_dp.base import masked_mean, outputs
from fedray.protocols.isrl_dp.planning import AcSaSettings, SiloGaussian
from fedray.protocols.isrl_dp.minibatch_sgd import MinibatchSGD, noisy_minibatch_mean
from fedray.protocols.isrl_dp import calibration, theory
from fedray.rng import SiloDraws


def minibatch_gradients(alg, query: np.ndarray, silos: SiloArrays, draws: SiloDraws) -> np.ndarray:
    """Alg. 2's silo half at the query point: K records without replacement, one minibatch per
    repetition shared by its replicas (the same draws as per replica)."""
    idx = draws.without_replacement(silos.sizes, alg.batch_size, by_repetition=True)
    return noisy_minibatch_mean(alg.loss, query, silos, idx, alg.l2_clip, alg.noise, draws, batch_of=draws.replica_to_rep)


def one_pass_gradients(alg, query: np.ndarray, silos: SiloArrays, draws: SiloDraws) -> np.ndarray:
    """The same on block r of a per-silo permutation fixed for the run: each record used once."""
    idx = draws.epoch_slice(silos.sizes, alg.batch_size)
    return noisy_minibatch_mean(alg.loss, query, silos, idx, alg.l2_clip, alg.noise, draws)


@dataclass(frozen=True)
class AcSaFields:
    """The hyperparameters every AC-SA algorithm of this package takes (module docstring)."""

    loss: Any
    step_size: np.ndarray         # (P,) 1/nu
    batch_size: int               # K
    l2_clip: float | np.ndarray      # or one per replica (a clip grid)
    noise: Any                 # GaussianNoise(noise_std (P, N)) or NoNoise()
    strong_convexity: float = 0.0  # mu >= 0 of the loss
    regularization: float = 0.0    # lambda >= 0: the run minimises f + lambda/2 ||w - w_0||^2
    radius: float | None = None    # W = l2 ball of this radius; None = R^d
    average_last: int = 1          # the output is w^ag; the tail average is reported as well


class AcSaRounds:
    """The halves ``SampledRounds`` runs, delegated to an algorithm's parts: the AC-SA server
    (``stages``: one run, or multi-stage restarts), ``silo_gradients`` (its silo half) and
    ``gradient_estimate`` (what the server makes of the messages; the participants' mean unless
    the algorithm says otherwise)."""

    # The algorithm's fields (``AcSaFields``) and parts these halves read.
    step_size: np.ndarray
    strong_convexity: float
    regularization: float
    radius: float | None
    average_last: int
    silo_gradients: ClassVar[Callable[..., np.ndarray]]
    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def stages(self) -> Any:
        """One AC-SA run (``StageFields`` gives multi-stage restarts)."""
        return SingleStage()

    @property
    def server(self) -> AcSa:
        return AcSa(self.step_size, self.strong_convexity, self.regularization, self.radius, self.average_last,
                    self.stages)

    def init(self, params0: np.ndarray, keys: RoundKeys) -> AcceleratedState:
        self.check_fields({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        return self.server.init(params0)

    def broadcast(self, state: AcceleratedState) -> np.ndarray:
        return self.server.broadcast(state)

    def silo_step(self, query: np.ndarray, silos: SiloArrays, draws: SiloDraws) -> np.ndarray:
        return self.silo_gradients(self, query, silos, draws)

    def gradient_estimate(self, messages: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return masked_mean(messages, mask)

    def server_step(self, state: AcceleratedState, messages: np.ndarray, mask: np.ndarray,
                    keys: RoundKeys) -> AcceleratedState:
        return self.server.step(state, *self.gradient_estimate(messages, mask))

    def output(self, state: AcceleratedState) -> dict[str, np.ndarray]:
        return outputs(state)

    @staticmethod
    def check_fields(fields: dict) -> None:
        """Nothing beyond the planner's checks."""


@dataclass(frozen=True)
class AcceleratedMinibatchSGD(AcSaFields, AcSaRounds):
    """Alg. 1 (AC-SA) with per-replica prox scales 1/``step_size`` (P,) and per-(replica, silo) noise;
    ERM noise as Alg. 2 (Thm F.1), ISRL-DP or no privacy."""

    recipe: ClassVar[SiloGaussian] = dataclasses.replace(MinibatchSGD.recipe, theorem=theory.accelerated_erm,
                                                                     settings=AcSaSettings)
    silo_gradients: ClassVar = staticmethod(minibatch_gradients)


@dataclass(frozen=True)
class OnePassAcceleratedSGD(AcSaFields, AcSaRounds):
    """One-pass Alg. 1 for heterogeneous SCO (seed-004 §3.3): disjoint batches, R <= floor(n / K).

    Each record enters at most one noisy release, so the planner's ledger uses parallel
    composition (``recipe.one_pass``) and the noise is calibrated to the full budget per round.
    Running more than floor(n / K) rounds raises ``ValueError`` in the silo half
    (``SiloDraws.epoch_slice``); the private calibration already refuses such a plan.
    """

    # G2 + parallel composition; "paper" and "theory" coincide (Thm 3.1 / E.1).
    recipe: ClassVar[SiloGaussian] = SiloGaussian({
        Calibration.PAPER: calibration.one_pass_noise_multiplier,
        Calibration.THEORY: calibration.one_pass_noise_multiplier,
    }, one_pass=True, theorem=theory.one_pass_convex, settings=AcSaSettings)
    silo_gradients: ClassVar = staticmethod(one_pass_gradients)
