"""Seed 001: differentially private stochastic mirror descent with vertex sampling for saddle
points on simplices (central DP; privacy from the exponential mechanism of vertex draws)."""

from typing import TYPE_CHECKING

from fedray.protocols.mirror_descent.bias_reduced_smd import BiasReducedSMD
from fedray.protocols.mirror_descent.boosting import Boosting
from fedray.protocols.mirror_descent.frank_wolfe import PrivateFrankWolfe
from fedray.protocols.mirror_descent.gaussian_smd import GaussianSMD
from fedray.protocols.mirror_descent.online_to_batch import OnlineToBatchSMD
from fedray.protocols.mirror_descent.smd import PrivateSMD, SmdState


if TYPE_CHECKING:   # mypy holds each algorithm to the halves its protocol shape runs (fedray.core.protocol)
    from fedray.core.protocol import CuratorBatchesAlgorithm, CuratorStepsAlgorithm

    _STEPS: tuple[type[CuratorStepsAlgorithm], ...] = (PrivateSMD, GaussianSMD, OnlineToBatchSMD)   # CuratorSteps
    _BATCHES: tuple[type[CuratorBatchesAlgorithm], ...] = (BiasReducedSMD, PrivateFrankWolfe)     # CuratorRounds

__all__ = ["BiasReducedSMD", "Boosting", "GaussianSMD", "OnlineToBatchSMD", "PrivateFrankWolfe", "PrivateSMD", "SmdState"]
