"""What the driver may ask of the data it does not hold: map-reduce calls over the actors' shards.

- ``map(fn, *args)`` runs ``fn(federation, *args)`` where each actor's records live and returns
  the results, one per actor in unit order.
- ``unit_sum(fn, *args)`` runs ``fn(federation, unit_ids, *args)``, which returns one row per unit
  of the shard (U, ...), and returns the sum of all units' rows. The sum is formed in a fixed order
  that depends on the unit ids only (``block_partials`` in the actors, ``sum_partials`` at the
  driver), so it is bit-identical whatever the number of actors: a solver that queries the data
  many times follows the same path on any layout.
- ``fold(fn, state, *args)`` is a pass over the units in id order: ``state = fn(federation,
  unit_ids, state, *args)`` runs in each actor in turn (lowest ids first), each starting from the
  state the previous one returned, and the last state comes back. The state goes from actor to
  actor without stopping at the driver. A sequential computation that reads one unit after
  another (an SGD chain relayed user to user) gives the same result on any layout, provided
  ``fn`` treats its units in id order.

Raw records never reach the driver, only what ``fn`` returns; a protocol that uses a returned
value names it in its privacy statement (a data-dependent constant) unless the value is itself
privatised, or the driver is the trusted curator of a central-DP protocol. The runtime implements
the oracle over Ray actors or in-process groups alike.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol, runtime_checkable

import numpy as np

# Units per summation block. Actors return one partial sum per block they hold whole and the rows
# of blocks they share with another actor, so a call moves at most N / BLOCK + 2 BLOCK rows.
BLOCK = 256


@runtime_checkable
class Oracle(Protocol):
    def map(self, fn: Callable[..., Any], *args: Any) -> list: ...

    def unit_sum(self, fn: Callable[..., np.ndarray], *args: Any) -> np.ndarray: ...

    def fold(self, fn: Callable[..., Any], state: Any, *args: Any) -> Any: ...


class Partial(NamedTuple):
    block: int
    whole: bool            # rows holds the block's sum (the actor had all of it), else its rows
    unit_ids: np.ndarray   # the ids of the rows (empty when whole)
    rows: np.ndarray


def _block_sum(rows: np.ndarray) -> np.ndarray:
    # The one reduction every block goes through, in the actor or at the driver: same input, same bits.
    return np.add.reduce(np.ascontiguousarray(rows), axis=0)


def block_partials(unit_ids: np.ndarray, rows: np.ndarray, num_units: int) -> list[Partial]:
    """The partial sums an actor holding ``unit_ids`` (sorted) returns for its per-unit ``rows``:
    blocks of ``BLOCK`` consecutive ids are summed where the actor holds all of the block's units
    (of ``num_units``), and returned as rows where it holds part of one."""
    unit_ids = np.asarray(unit_ids, dtype=np.int64)
    blocks = unit_ids // BLOCK
    parts = []
    for block in np.unique(blocks):
        where = np.flatnonzero(blocks == block)
        size = min(BLOCK, num_units - int(block) * BLOCK)
        if where.size == size:
            parts.append(Partial(int(block), True, unit_ids[:0], _block_sum(rows[where[0]:where[-1] + 1])))
        else:
            parts.append(Partial(int(block), False, unit_ids[where], rows[where]))
    return parts


def sum_partials(parts: list[Partial]) -> np.ndarray:
    """The total of every actor's partials: shared blocks are joined in id order and summed as one
    actor would, then the block sums are added in block order."""
    whole: dict[int, np.ndarray] = {}
    shared: dict[int, list[Partial]] = {}
    for part in parts:
        if part.whole:
            whole[part.block] = part.rows
        else:
            shared.setdefault(part.block, []).append(part)
    for block, pieces in shared.items():
        ids = np.concatenate([p.unit_ids for p in pieces])
        rows = np.concatenate([p.rows for p in pieces])[np.argsort(ids, kind="stable")]
        whole[block] = _block_sum(rows)
    if not whole:
        raise ValueError("unit_sum over no units")
    return np.add.reduce(np.stack([whole[b] for b in sorted(whole)]), axis=0)
