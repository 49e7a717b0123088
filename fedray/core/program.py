"""The driver-side program contract: a protocol whose server computes on the data through an oracle.

Some protocols are not rounds of client messages but a solver at a trusted server that queries
the data many times (loss, gradient, Hessian-vector sums, per-unit gradients, with deletion
weights) and then releases a privatised output: output perturbation, seed 003's phased ERM. The
driver runs such a program once::

    run = program.run(oracle, keys)        driver: oracle calls over the actors' shards
    ledger.record(run.charge)              what the release cost each (replica, unit)
    evaluate(run.outputs)                  diagnostics, as for a round protocol

The trust model is central (the driver is the curator): what the oracle returns stays inside
the program, and only ``outputs`` is released. Metrics are ``fedray.core.evaluation.Metric``
values, tagged released (functions of the outputs or of public values) or diagnostic (read from
the data, e.g. a solver's iteration count). Server draws come from ``keys.generator(stream,
replica)``, so each replica's noise is its own and a run is reproducible from its seed.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from fedray.core.oracle import Oracle
from fedray.core.protocol import RoundKeys


class ProgramRun(NamedTuple):
    outputs: dict[str, np.ndarray]    # released models by name, (P, ...); the first is the model
    charge: np.ndarray                # (P, N) releases per (replica, unit)
    metrics: dict                     # name -> Metric, (P,) values


@runtime_checkable
class CentralProgram(Protocol):
    constants: dict

    def run(self, oracle: Oracle, keys: RoundKeys) -> ProgramRun: ...

    def evaluate(self, models: np.ndarray, federation: Any) -> dict: ...

    def combine(self, parts: list[dict]) -> dict: ...
