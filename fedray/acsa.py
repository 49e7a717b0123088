"""AC-SA, the server half of accelerated stochastic approximation (Ghadimi & Lan 2012 [GL]),
shared by every protocol that feeds it gradient estimates (seed-004 Alg. 1 and its one-pass,
multi-stage and shuffled forms; seed-000 P_AGD, Lan 2012).

Symbols: mu = ``strong_convexity``, lambda = ``regularization``, nu = 1 / ``step_size`` (the
prox scale, per replica), alpha_r the averaging weight and eta_r the PROX WEIGHT of round r (an
inverse step size), W the feasible set (an l2 ball of ``radius``, or R^d).

Round r = 1, 2, ... (``stages`` may restart r: multi-stage AC-SA):
    w^md_r = query point from (w^ag_{r-1}, w_{r-1})                         broadcast
    g_r    = the protocol's gradient estimate at w^md_r, plus lambda (w^md_r - w_0)
    w_r    = Pi_W([alpha_r mu' w^md_r + ((1 - alpha_r) mu' + eta_r) w_{r-1} - alpha_r g_r] / (mu' + eta_r))
    w^ag_r = alpha_r w_r + (1 - alpha_r) w^ag_{r-1}                         the output
with mu' = mu + lambda, alpha_r = 2 / (r + 1), eta_r = 4 nu / (r (r + 1)). With mu' = 0 the prox
centre moves by alpha_r / eta_r = r step_size / 2 along the gradient (Lan 2012's 1 / L_t with
L_t = c / (t + 1) and alpha_t = 2 / (t + 2) is step_size = 2 / c with r = t + 1: ``first_round``
= 2). A replica whose round had no gradient keeps its iterates. Everything here is
post-processing of the gradient estimates.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from fedray.geometry import project_l2_ball


class AcceleratedState(NamedTuple):
    """AC-SA iterates per replica; ``params`` is w^ag, the output."""

    round: int                # rounds completed
    params: np.ndarray        # (P, d, C) w^ag
    prox_center: np.ndarray   # (P, d, C) w, the prox centre
    anchor: np.ndarray        # (P, d, C) w_0, the centre of the regularizer
    tail: np.ndarray          # (W, P, d, C) last iterates w^ag, for the tail average
    tail_filled: int
    stage: int = 1            # multi-stage: the current stage k (always 1 for a single stage)
    stage_round: int = 0      # rounds completed in the stage; the schedule's r is stage_round + 1


def averaging_weight(r: int) -> float:
    """alpha_r = 2 / (r + 1); alpha_1 = 1."""
    return 2.0 / (r + 1.0)


def prox_weight(r: int, prox_scale: np.ndarray) -> np.ndarray:
    """eta_r = 4 nu / (r (r + 1)) per replica (a prox weight, not a step size)."""
    return 4.0 * np.asarray(prox_scale, dtype=np.float64) / (r * (r + 1.0))


def query_point(w_ag: np.ndarray, w: np.ndarray, alpha: float, eta: np.ndarray, mu: float) -> np.ndarray:
    """w^md_r; ``eta`` (P,). With alpha = 1 it is w (so w^md_1 = w_0)."""
    eta = np.asarray(eta, dtype=np.float64)[:, None, None]
    denom = eta + (1.0 - alpha**2) * mu
    return ((1.0 - alpha) * (mu + eta) / denom) * w_ag + (alpha * ((1.0 - alpha) * mu + eta) / denom) * w


def prox_step(
    w_md: np.ndarray, w: np.ndarray, grad: np.ndarray, alpha: float, eta: np.ndarray, mu: float,
    radius: float | None,
) -> np.ndarray:
    """argmin_{w' in W} alpha [<g, w'> + mu/2 ||w^md - w'||^2] + ((1 - alpha) mu + eta)/2 ||w - w'||^2.

    The objective is an isotropic quadratic, so the constrained minimiser is the projection of the
    unconstrained one (closed form).
    """
    eta = np.asarray(eta, dtype=np.float64)[:, None, None]
    centre_weight = (1.0 - alpha) * mu + eta
    return project_l2_ball((alpha * mu * w_md + centre_weight * w - alpha * grad) / (mu + eta), radius)


@dataclass(frozen=True)
class SingleStage:
    """One AC-SA run: nu = 1 / step_size throughout."""

    def prox_scale(self, step_size: np.ndarray, state: AcceleratedState) -> np.ndarray:
        return 1.0 / np.asarray(step_size, dtype=np.float64)

    def after_round(self, state: AcceleratedState, advanced: AcceleratedState, w_ag: np.ndarray) -> AcceleratedState:
        return advanced


@dataclass(frozen=True)
class Phases:
    """AC-SA restarted in phases with a prox scale of their own: phase j runs ``rounds[j]`` rounds
    at nu_j = 1 / ``step_sizes[j]`` (for every replica), then phase j + 1 starts from its output
    w^ag as both prox centre and aggregate, its schedule back at r = ``first_round``."""

    step_sizes: tuple
    rounds: tuple
    first_round: int = 1

    def prox_scale(self, step_size: np.ndarray, state: AcceleratedState) -> np.ndarray:
        return np.full(np.shape(step_size), 1.0 / float(self.step_sizes[state.stage - 1]))

    def after_round(self, state: AcceleratedState, advanced: AcceleratedState, w_ag: np.ndarray) -> AcceleratedState:
        done = advanced.stage_round - (self.first_round - 1)
        if state.stage > len(self.rounds) or done < self.rounds[state.stage - 1]:
            return advanced
        return advanced._replace(stage=state.stage + 1, stage_round=self.first_round - 1, prox_center=w_ag.copy())


@dataclass(frozen=True)
class AcSa:
    """The AC-SA server (module docstring); ``stages`` gives nu per round and restarts stages."""

    step_size: np.ndarray                 # (P,) 1 / nu
    strong_convexity: float = 0.0         # mu >= 0 of the loss
    regularization: float = 0.0           # lambda >= 0: the run minimises f + lambda/2 ||w - w_0||^2
    radius: float | None = None           # W = l2 ball of this radius; None = R^d
    average_last: int = 1                 # iterates w^ag kept for the tail average
    stages: object = dataclasses.field(default_factory=SingleStage)
    first_round: int = 1                  # the schedule's r of the first round (module docstring)

    @property
    def mu(self) -> float:
        return float(self.strong_convexity) + float(self.regularization)

    def init(self, params0: np.ndarray) -> AcceleratedState:
        w0 = project_l2_ball(np.asarray(params0, dtype=np.float64), self.radius)
        tail = np.zeros((max(1, self.average_last),) + w0.shape)
        return AcceleratedState(0, w0.copy(), w0.copy(), w0.copy(), tail, 0, stage_round=self.first_round - 1)

    def schedule(self, state: AcceleratedState) -> tuple[float, np.ndarray]:
        """(alpha_r, eta_r (P,)) of the round ``state`` is about to run."""
        r = state.stage_round + 1
        return averaging_weight(r), prox_weight(r, self.stages.prox_scale(self.step_size, state))

    def broadcast(self, state: AcceleratedState) -> np.ndarray:
        alpha, eta = self.schedule(state)
        return query_point(state.params, state.prox_center, alpha, eta, self.mu)

    def step(self, state: AcceleratedState, gradient: np.ndarray, counts: np.ndarray) -> AcceleratedState:
        """The round's update from the gradient estimate (P, d, C) at the query point; ``counts``
        (P,) > 0 where a replica received one."""
        alpha, eta = self.schedule(state)
        w_md = query_point(state.params, state.prox_center, alpha, eta, self.mu)
        grad = gradient + self.regularization * (w_md - state.anchor)
        w = prox_step(w_md, state.prox_center, grad, alpha, eta, self.mu, self.radius)
        w_ag = alpha * w + (1.0 - alpha) * state.params
        took_part = (counts > 0)[:, None, None]
        w, w_ag = np.where(took_part, w, state.prox_center), np.where(took_part, w_ag, state.params)
        tail = state.tail.copy()
        tail[state.round % tail.shape[0]] = w_ag
        advanced = state._replace(round=state.round + 1, params=w_ag, prox_center=w, tail=tail,
                                  tail_filled=min(state.tail_filled + 1, tail.shape[0]),
                                  stage_round=state.stage_round + 1)
        return self.stages.after_round(state, advanced, w_ag)
