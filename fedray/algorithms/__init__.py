"""Protocol families as pure numpy: a silo half, a server half, no Ray inside."""

from fedray.algorithms.accelerated import AcceleratedMinibatchSGD, AcceleratedState, OnePassAcceleratedSGD
from fedray.algorithms.base import ServerState, SiloArrays, tail_average
from fedray.algorithms.local_sgd import LocalSGD
from fedray.algorithms.minibatch_sgd import MinibatchSGD
from fedray.algorithms.shuffled_accelerated import ShuffledOnePassAcceleratedSGD
from fedray.algorithms.shuffled_sgd import ShuffledSGD
from fedray.algorithms.multistage import MultiStageAcceleratedSGD, MultiStageOnePassSGD

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
    "SiloArrays",
    "tail_average",
]
