"""Privacy events dp-accounting has no class for, and events as JSON.

Compatibility rule (dp-accounting's, adopted here): the meaning of an existing event class or
field never changes; a mechanism that means something else gets a new class.

dp-accounting's accountants do not support the events declared here (``supports`` is False);
fedray prices them with the composition theorems of ``fedray.privacy.composition`` through
``ComposedAccountant``.

``event_to_json`` / ``event_from_json``: an event as plain JSON data, through dp-accounting's own
public form (``DpEvent.to_named_tuple`` / ``DpEvent.from_named_tuple``): every event is an object
with ``module_name`` and ``class_name`` and its fields, nested events as objects, composed events'
lists as lists. Floats are written with ``repr`` (Python's ``json``), so a round trip is exact.
Reading accepts only classes of dp-accounting and of this module (the names in a file choose which
class is built).
"""

from __future__ import annotations

import collections
from typing import Any

import attr
import dp_accounting

_READABLE = ("dp_accounting.", "fedray.privacy.events")


@attr.s(frozen=True, slots=True, auto_attribs=True)
class EpsilonDeltaDpEvent(dp_accounting.DpEvent):
    """A release that a theorem (not an accountant) shows (epsilon, delta)-DP, e.g. one shuffled
    P_vec invocation (seed-000 Thm 3.2)."""

    epsilon: float
    delta: float


def _plain(value: Any) -> Any:
    if isinstance(value, tuple) and hasattr(value, "_fields"):       # an event's named tuple
        return {key: _plain(getattr(value, key)) for key in value._fields}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def event_to_json(event: dp_accounting.DpEvent) -> dict:
    """``event`` as JSON data (module docstring)."""
    return _plain(event.to_named_tuple())


def _named(value: Any) -> Any:
    if isinstance(value, dict):
        module = value.get("module_name", "")
        if not any(module == prefix.rstrip(".") or module.startswith(prefix) for prefix in _READABLE):
            raise ValueError(f"event module_name must be dp_accounting's or fedray.privacy.events; got {module!r}")
        wrapper = collections.namedtuple(f"_{value['class_name']}Json", list(value))   # type: ignore[misc]
        return wrapper(**{key: _named(v) for key, v in value.items()})
    if isinstance(value, list):
        return [_named(v) for v in value]
    return value


def event_from_json(data: dict) -> dp_accounting.DpEvent:
    """The event ``event_to_json`` wrote; ``ValueError`` names a module outside dp-accounting and fedray's."""
    return dp_accounting.DpEvent.from_named_tuple(_named(data))
