"""Shared pieces of the ISRL-DP algorithms: the server state, tail averaging, projection.

An algorithm is a frozen dataclass of resolved hyperparameters with pure functions, the parts
``fedray.core.protocol.SampledRounds`` runs::

    init(params0, keys) -> ServerState                params0 (P, d, C); keys: round 0's RoundKeys
    broadcast(state) -> array sent to silos           (P, d, C)
    silo_step(broadcast, silos, draws) -> messages    (P, S, ...), privatized inside the silo
    server_step(state, messages, mask, keys)          mask (P, S): who took part, per replica; keys:
        -> ServerState                                the round's (these servers draw nothing)
    output(state) -> {"last": ..., "avg": ...}        the released models

(a ``fedray.core.protocol.RoundsAlgorithm``) and one class attribute, ``recipe``: its privacy (``fedray.protocols.isrl_dp.planning``).

No Ray, MLflow or Hydra here: the runtime moves arrays, the algorithm does the math.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fedray.core.protocol import RoundKeys


class ServerState(NamedTuple):
    """Round index, current iterate and a ring of the last iterates for tail averaging."""

    round: int
    params: np.ndarray       # (P, d, C)
    tail: np.ndarray         # (W, P, d, C), W = iterates averaged for the output
    tail_filled: int


def initial_state(params0: np.ndarray, average_last: int) -> ServerState:
    tail = np.zeros((max(1, average_last),) + params0.shape)
    return ServerState(0, params0.copy(), tail, 0)


def advance(state: ServerState, new_params: np.ndarray) -> ServerState:
    """Next state with ``new_params`` appended to the tail ring."""
    w = state.tail.shape[0]
    tail = state.tail.copy()
    tail[state.round % w] = new_params
    return ServerState(state.round + 1, new_params, tail, min(state.tail_filled + 1, w))


def tail_average(state: ServerState) -> np.ndarray:
    """Average of the last min(W, rounds) iterates (seed-004 experiments average the last 8)."""
    if state.tail_filled == 0:
        return state.params
    return state.tail[: state.tail_filled].mean(axis=0) if state.tail_filled < state.tail.shape[0] \
        else state.tail.mean(axis=0)


def outputs(state) -> dict[str, np.ndarray]:
    """The released models: the last iterate and the average of the last iterates."""
    return {"last": state.params, "avg": tail_average(state)}


class PlainIterate:
    """The state-handling halves of an algorithm whose state is a ``ServerState`` (an iterate and
    its tail): it starts at params0, broadcasts the iterate and releases it with its tail average.
    Needs ``average_last`` on the algorithm."""

    average_last: int        # the algorithm's field: how many last iterates the tail average takes

    @staticmethod
    def check_fields(fields: dict) -> None:
        """Nothing beyond the planner's checks."""

    def init(self, params0: np.ndarray, keys: RoundKeys) -> ServerState:
        return initial_state(params0, self.average_last)

    def broadcast(self, state: ServerState) -> np.ndarray:
        return state.params

    def output(self, state: ServerState) -> dict[str, np.ndarray]:
        return outputs(state)


def masked_mean(messages: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over the silo axis of the participating messages; also the participant counts (P,)."""
    m = mask.astype(np.float64)
    counts = m.sum(axis=1)
    total = np.einsum("ps,ps...->p...", m, messages)
    denom = np.maximum(counts, 1.0).reshape((-1,) + (1,) * (messages.ndim - 2))
    return total / denom, counts
