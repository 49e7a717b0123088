"""DP-FedAvg written outside fedray: clipped client deltas, Gaussian noise at a trusted server.

Select it with ``hydra.searchpath=[pkg://examples.dp_fedavg.conf] algorithm=dp_fedavg`` and ship it
to Ray workers with ``runtime.py_modules=[examples]`` (docs/extending.md, "Write a protocol in
your own package").
"""

from examples.dp_fedavg.protocol import DpFedAvg

__all__ = ["DpFedAvg"]
