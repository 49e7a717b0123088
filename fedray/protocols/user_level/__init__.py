"""User-level DP protocols (seeds 002 and 003): a user is a silo of m records, neighbours replace
one user's records. Driver-side programs: ``OutputPerturbation`` (global sensitivity; B0 without
privacy, B1), ``PhasedSgd`` (seed 002's Alg. 1: SGD chains relayed over the actors) ``SCOutputPert`` (local deletion sensitivity with a gradient certificate) and ``PhasedOutputPert``
(seed 003's Phased-ERM / Phased-SCO: SCOutputPert releases localising a convex problem); a
round protocol at a trusted server: ``AcceleratedPhasedERM`` (seed 002's Alg. 3; A2 with
``solver=sgd``) ``FilteredGradientDescent`` (its full-batch baseline B2), ``UserDpSgd`` (B1, user-level DP-SGD) and
``ItemDpSgd`` (seed 003's B3, item-level DP-SGD with group privacy)."""

from typing import TYPE_CHECKING

from fedray.protocols.user_level.accelerated_erm import AcceleratedPhasedERM, FilteredGradientDescent
from fedray.protocols.user_level.item_dp_sgd import ItemDpSgd
from fedray.protocols.user_level.output_perturbation import OutputPerturbation
from fedray.protocols.user_level.phased_output_pert import PhasedOutputPert
from fedray.protocols.user_level.phased_sgd import PhasedSgd
from fedray.protocols.user_level.sc_output_pert import SCOutputPert
from fedray.protocols.user_level.user_dp_sgd import UserDpSgd


if TYPE_CHECKING:   # mypy holds each algorithm to the halves its protocol shape runs (fedray.core.protocol)
    from fedray.core.protocol import CuratorRoundsAlgorithm

    _HALVES: tuple[type[CuratorRoundsAlgorithm], ...] = (      # CuratorSampledRounds
        AcceleratedPhasedERM, FilteredGradientDescent, ItemDpSgd, UserDpSgd)

__all__ = ["AcceleratedPhasedERM", "FilteredGradientDescent", "ItemDpSgd", "OutputPerturbation", "PhasedOutputPert", "PhasedSgd", "SCOutputPert", "UserDpSgd"]
