"""Seed 000: shuffle-private stochastic convex optimization (users with one record each, P_vec)."""

from typing import TYPE_CHECKING

from fedray.protocols.shuffle_sco.p_agd import PAGD
from fedray.protocols.shuffle_sco.p_gd import PGD
from fedray.protocols.shuffle_sco.p_sgd import PSGD, PSGDState


if TYPE_CHECKING:   # mypy holds each algorithm to the halves its protocol shape runs (fedray.core.protocol)
    from fedray.core.protocol import RoundsAlgorithm, StepsAlgorithm

    _STEPS: tuple[type[StepsAlgorithm], ...] = (PSGD, PAGD)      # SequentialSteps
    _ROUNDS: type[RoundsAlgorithm] = PGD                          # SampledRounds

__all__ = ["PAGD", "PGD", "PSGD", "PSGDState"]
