"""What the driver may ask of the data it does not hold: map-reduce calls over the actors' shards.

``map(fn, *args)`` runs ``fn(federation, *args)`` where each actor's records live and returns the
results in unit order (one per actor); ``sum`` adds them. Raw records never reach the driver, only
what ``fn`` returns; a protocol that uses a returned value names it in its privacy statement
(a data-dependent constant) unless the value is itself privatised. The runtime implements it
over Ray actors or in-process groups alike.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable


@runtime_checkable
class Oracle(Protocol):
    def map(self, fn: Callable[..., Any], *args: Any) -> list: ...

    def sum(self, fn: Callable[..., Any], *args: Any) -> Any: ...
