"""Multi-stage AC-SA for strongly convex losses (seed-004 §3.4; App. E.1, Ghadimi-Lan 2013 Prop. 7).

Symbols: mu = ``strong_convexity`` > 0, beta = ``smoothness``, V = ``oracle_std`` (a bound on the
std of the noisy aggregate gradient, V^2 as in Lemma E.3), Delta = ``initial_gap`` >= F(w_0) - F*,
U stages of R_k rounds each, nu_k the stage's prox scale, q_k the stage outputs.

Stage k = 1, 2, ... runs R_k rounds of Alg. 1 (``AcceleratedMinibatchSGD``, this mu) from
w_0 = w^ag_0 = q_{k-1} (q_0 = w_0; the txt's "q_0 = 0" is taken as w_0, §6 item 2) with
alpha_r = 2/(r+1) and eta_r = 4 nu_k/(r(r+1)), r restarting at 1, and sets q_k = w^ag_{R_k}:
    R_k  = ceil(max{4 sqrt(2 beta/mu), 128 V^2 / (3 mu Delta 2^-(k+1))})
    nu_k = max{1/step_size, [mu V^2 / (3 Delta 2^-(k-1)) * R_k (R_k+1) (R_k+2)]^(1/2)}
GL's floor 2 beta is 1/step_size here (the replica axis), so step_size = 1/(2 beta) is the paper.
The run's ``num_rounds`` decides how many stages complete: choose sum_{k<=U} R_k
(``rounds_for_stages``) to output q_U; the state's params are always the current w^ag.
Lemma E.2: E F(q_U) - F* <~ Delta exp(-sqrt(mu/beta) R) + V^2/(mu R).

Trust model, neighbouring relation, silo half and noise are those of ``AcceleratedMinibatchSGD``
(or, for ``MultiStageOnePassSGD``, of the one-pass variant: Thm E.1.2 runs the stages on one pass,
so the total number of rounds must stay <= floor(n/K)). Randomness: as there.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedray.errors import ConfigError
from fedray.acsa import AcceleratedState
from fedray.protocols.isrl_dp.accelerated import (
    AcceleratedMinibatchSGD, AcSaFields, AcSaRounds, OnePassAcceleratedSGD, minibatch_gradients, one_pass_gradients,
)
from fedray.protocols.isrl_dp.planning import SiloGaussian, StageSettings


def stage_rounds(
    stage: int, smoothness: float, strong_convexity: float, oracle_std: float, initial_gap: float
) -> int:
    """R_k = ceil(max{4 sqrt(2 beta/mu), 128 V^2 / (3 mu Delta 2^-(k+1))}) (§3.4)."""
    mu = strong_convexity
    value = max(
        4.0 * math.sqrt(2.0 * smoothness / mu),
        128.0 * oracle_std**2 / (3.0 * mu * initial_gap * 2.0 ** -(stage + 1)),
    )
    return max(1, int(math.ceil(value)))


def stage_noise_scale(
    stage: int, num_rounds: int, strong_convexity: float, oracle_std: float, initial_gap: float
) -> float:
    """[mu V^2 / (3 Delta 2^-(k-1)) * R_k (R_k+1) (R_k+2)]^(1/2), the variance term of nu_k (§3.4)."""
    r = num_rounds
    per_round = strong_convexity * oracle_std**2 / (3.0 * initial_gap * 2.0 ** -(stage - 1))
    return math.sqrt(per_round * r * (r + 1) * (r + 2))


def rounds_for_stages(num_stages: int, smoothness: float, strong_convexity: float, oracle_std: float,
                      initial_gap: float) -> int:
    """sum_{k=1..U} R_k: the num_rounds that ends exactly at q_U."""
    return sum(stage_rounds(k, smoothness, strong_convexity, oracle_std, initial_gap) for k in range(1, num_stages + 1))


@dataclass(frozen=True)
class Stages:
    """AC-SA's stage schedule (``fedray.acsa.AcSa.stages``): nu_k per stage, and the restart at
    q_k = w^ag after R_k rounds of stage k."""

    smoothness: float
    strong_convexity: float
    oracle_std: float
    initial_gap: float

    def rounds(self, stage: int) -> int:
        """R_k of stage k."""
        return stage_rounds(stage, self.smoothness, self.strong_convexity, self.oracle_std, self.initial_gap)

    def prox_scale(self, step_size: np.ndarray, state: AcceleratedState) -> np.ndarray:
        """nu_k per replica (P,)."""
        k = state.stage
        noise_part = stage_noise_scale(k, self.rounds(k), self.strong_convexity, self.oracle_std, self.initial_gap)
        return np.maximum(1.0 / np.asarray(step_size, dtype=np.float64), noise_part)

    def after_round(self, state: AcceleratedState, advanced: AcceleratedState, w_ag: np.ndarray) -> AcceleratedState:
        if advanced.stage_round < self.rounds(state.stage):
            return advanced
        # q_k = w^ag_{R_k} starts stage k + 1 as both the prox centre and the aggregate.
        return advanced._replace(stage=state.stage + 1, stage_round=0, prox_center=w_ag.copy())


def _number(value: float | None) -> float:
    """A stage constant ``check_stage_fields`` has checked (never None by then)."""
    if value is None:
        raise ValueError("a multi-stage constant is None; check_fields requires every one")
    return value


def check_stage_fields(fields: dict) -> None:
    """The stage schedule's constants; ``ConfigError`` naming the value otherwise."""
    for key in ("strong_convexity", "smoothness", "initial_gap"):
        value = fields.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"algorithm.{key}", value, "> 0 for the multi-stage method")
    std = fields.get("oracle_std")
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not std >= 0:
        raise ConfigError("algorithm.oracle_std", std, ">= 0 for the multi-stage method")
    if fields.get("regularization", 0.0) != 0:
        raise ConfigError("algorithm.regularization", fields.get("regularization"), "0 for the multi-stage method")


@dataclass(frozen=True)
class StageFields(AcSaFields):
    """``strong_convexity``, ``smoothness`` and ``initial_gap`` must be positive, ``oracle_std`` >= 0
    (``check_fields``, run by the planner before any actor starts and again by ``init``)."""

    smoothness: float | None = None     # beta
    oracle_std: float | None = None     # V
    initial_gap: float | None = None    # Delta

    check_fields = staticmethod(check_stage_fields)

    @property
    def stages(self) -> Any:
        """The stage schedule (``check_fields`` has made every constant a number)."""
        return Stages(_number(self.smoothness), self.strong_convexity, _number(self.oracle_std),
                      _number(self.initial_gap))


@dataclass(frozen=True)
class MultiStageAcceleratedSGD(StageFields, AcSaRounds):
    """AC-SA restarted in stages of growing length (strongly convex ERM, Thm F.1 s.c. case)."""

    # The single-stage privacy; no theory preset takes the staged variants (theory.THEOREMS).
    recipe: ClassVar[SiloGaussian] = dataclasses.replace(AcceleratedMinibatchSGD.recipe, theorem=None,
                                                                     settings=StageSettings)
    silo_gradients: ClassVar = staticmethod(minibatch_gradients)


@dataclass(frozen=True)
class MultiStageOnePassSGD(StageFields, AcSaRounds):
    """The stages on disjoint batches (Thm E.1.2): total rounds <= floor(n / K), G2 + parallel composition."""

    recipe: ClassVar[SiloGaussian] = dataclasses.replace(OnePassAcceleratedSGD.recipe, theorem=None,
                                                                     settings=StageSettings)
    silo_gradients: ClassVar = staticmethod(one_pass_gradients)
