"""Protocol families as pure numpy: a silo half, a server half, no Ray inside."""

from typing import TYPE_CHECKING

from fedray.acsa import AcceleratedState
from fedray.protocols.isrl_dp.accelerated import AcceleratedMinibatchSGD, OnePassAcceleratedSGD
from fedray.protocols.isrl_dp.base import ServerState, tail_average
from fedray.protocols.isrl_dp.local_sgd import LocalSGD
from fedray.protocols.isrl_dp.minibatch_sgd import MinibatchSGD
from fedray.protocols.isrl_dp.shuffled_accelerated import ShuffledOnePassAcceleratedSGD
from fedray.protocols.isrl_dp.shuffled_sgd import ShuffledSGD
from fedray.protocols.isrl_dp.multistage import MultiStageAcceleratedSGD, MultiStageOnePassSGD


if TYPE_CHECKING:   # mypy holds each algorithm to the halves its protocol shape runs (fedray.core.protocol)
    from fedray.core.protocol import RoundsAlgorithm

    _HALVES: tuple[type[RoundsAlgorithm], ...] = (      # SampledRounds
        MinibatchSGD, LocalSGD, AcceleratedMinibatchSGD, OnePassAcceleratedSGD, ShuffledSGD,
        ShuffledOnePassAcceleratedSGD, MultiStageAcceleratedSGD, MultiStageOnePassSGD)

__all__ = [
    "AcceleratedMinibatchSGD",
    "AcceleratedState",
    "LocalSGD",
    "MinibatchSGD",
    "MultiStageAcceleratedSGD",
    "MultiStageOnePassSGD",
    "OnePassAcceleratedSGD",
    "ServerState",
    "ShuffledOnePassAcceleratedSGD",
    "ShuffledSGD",
    "tail_average",
]
