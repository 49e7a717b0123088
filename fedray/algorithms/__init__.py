"""Protocol families as pure numpy: a silo half, a server half, no Ray inside."""

from fedray.algorithms.base import ServerState, SiloArrays, tail_average
from fedray.algorithms.local_sgd import LocalSGD
from fedray.algorithms.minibatch_sgd import MinibatchSGD

__all__ = ["LocalSGD", "MinibatchSGD", "ServerState", "SiloArrays", "tail_average"]
