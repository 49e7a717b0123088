"""Metrics a protocol reports, each tagged released or diagnostic.

A released metric is a function of what the protocol releases (the messages, the model, the
ledger): publishing it costs no privacy beyond the run's statement. A diagnostic metric reads
data the server would not see in a deployment (training loss on the silos' records, test error
on their held-out records); a simulator may compute it, and the run names it as diagnostic.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Metric(NamedTuple):
    value: np.ndarray      # (P,) one value per replica
    released: bool


def split(metrics: dict[str, Metric]) -> tuple[dict[str, np.ndarray], set[str]]:
    """Plain values by name, and the names of the diagnostic ones."""
    values = {name: metric.value for name, metric in metrics.items()}
    return values, {name for name, metric in metrics.items() if not metric.released}
