"""The mechanism contract: a privacy step as a value that transforms, says where it runs, and
says what one application is to an accountant.

- ``placement``: where the step must run for the trust model to hold: inside the unit's actor
  (``CLIENT``: nothing leaves before it), in the shuffler actor (``SHUFFLER``) or at the server
  (``SERVER``: the trusted curator of central DP, or a step on data that is already private).
- ``apply(x, randomness) -> (x, metrics)``: the step on a batch of messages shaped
  (replica, unit, ...). ``randomness`` is what the runtime drew for it from the seeded streams
  (standard normals, or a generator for steps that draw as they go), so the step is a pure
  function of its inputs and a run is the same whichever actor holds a unit.
- ``round_metrics(participation)``: what the step reports of a round, for the (P, U) mask of
  the units that applied it, as ``fedray.core.evaluation.Metric`` values tagged released or
  diagnostic (``ReportsMetrics``; the runtime logs them with the round's metrics).
- ``event(replica, unit)``: one application to the messages of ``unit`` in ``replica``, as a
  dp-accounting ``DpEvent`` (fedray's own events in ``fedray.privacy.events`` for what
  dp-accounting lacks), under the neighbouring relation of the plan's privacy statement.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Protocol, runtime_checkable


class Placement(Enum):
    CLIENT = "client"
    SHUFFLER = "shuffler"
    SERVER = "server"


@runtime_checkable
class Mechanism(Protocol):
    placement: Placement

    def apply(self, x: Any, randomness: Any) -> tuple[Any, dict]: ...

    def event(self, replica: int, unit: int) -> Any: ...


@runtime_checkable
class ReportsMetrics(Protocol):
    """A step that reports, for a round's (P, U) participation mask, its (P,) metrics by name."""

    def round_metrics(self, participation: Any) -> dict: ...
