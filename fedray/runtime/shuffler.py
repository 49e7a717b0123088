"""The secure shuffler of shuffle-DP protocols (the shuffle model's trusted shuffler).

Trust model: the shuffler is trusted only to permute and to drop sender identity. It receives the
round's already-privatized messages straight from the silo-group actors, concatenates them,
forgets which silo (and which actor) sent which message, applies a uniformly random permutation,
and returns only the permuted multiset of the participating messages. The server (the driver, the
analyzer) sees nothing else: no silo ids, no per-silo masks, no order that depends on the sender.
It sees how many messages arrived per replica, which the analyzer of a shuffle protocol always
sees (the length of the shuffled list).

Wiring (Ray): the driver passes the silo-group actors' ObjectRefs directly,

    shuffler = ShufflerActor.remote(plan.seed, plan.replicas.streams)
    refs = [actor.round.remote(payload_ref) for actor in actors]   # RoundReply refs, never ray.get
    shuffled = ray.get(shuffler.shuffle.remote(round_index, *refs))
    state, charge, metrics = protocol.aggregate(state, spec, Messages(shuffled.messages, shuffled.mask), keys)

Ray resolves top-level ObjectRef arguments inside the shuffler actor, so un-shuffled messages move
from the silo actors to the shuffler through the object store and never into the driver's heap.
A block is anything with ``messages`` (P, S_g, ...) and ``mask`` (P, S_g) attributes (a
``RoundReply``) or a ``(messages, mask)`` pair; other attributes (silo ids,
evaluation metrics) are ignored and not returned, so per-silo evaluation must travel separately.

Summed output (``Shuffler(..., output="sum")``, for a randomizer whose messages are labelled
one-bit messages sent as per-label counts): each sender's message is a vector of 1-bit counts that encodes its multiset of
labelled one-bit messages without loss. The analyzer's view of the permuted multiset of all those
one-bit messages is, up to randomness independent of the data, exactly the per-label count of
1-bits, i.e. the SUM of the count vectors; so the shuffler returns that sum and nothing else (row
0; the other rows are zero and ``counts`` still says how many messages arrived). Permuting the
count vectors instead would show each sender's counts to the server, which such a randomizer's
guarantee does not cover.

Randomness: one generator per replica from ``fedray.rng.generator(run_seed, Stream.SHUFFLE,
*stream_key, round)`` (``Replicas.streams``: each replica its own permutation, unless the run asks
for common random numbers); the permutation depends neither on the actor layout nor on block order
beyond the silo-id order the driver already guarantees, so runs with 1 or 8 actors agree bit for bit.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import ray

from fedray.errors import invalid_argument
from fedray.rng import Stream, generator, stream_rows

__all__ = ["MessageBlock", "ShuffledMessages", "Shuffler", "ShufflerActor"]


@dataclass(frozen=True)
class ShuffledMessages:
    """The analyzer's view of one round: per replica, a uniformly permuted list of messages.

    Replica p's messages are ``messages[p, :counts[p]]``; the rows after them are zero padding
    (replicas may have different participant counts). Row order is a fresh uniform permutation,
    so a row index says nothing about the sender.
    """

    messages: np.ndarray   # (P, M_max, ...)
    counts: np.ndarray     # (P,) int64

    @property
    def mask(self) -> np.ndarray:
        """(P, M_max) prefix mask of the real rows, for ``server_step(state, messages, mask, keys)``."""
        return np.arange(self.messages.shape[1])[None, :] < self.counts[:, None]


@runtime_checkable
class MessageBlock(Protocol):
    """One silo group's part of a round as the shuffler reads it (a ``RoundReply``): ``messages``
    (P, S_g, ...) and ``mask`` (P, S_g); anything else it carries is ignored."""

    @property
    def messages(self) -> np.ndarray: ...

    @property
    def mask(self) -> np.ndarray: ...


def _as_block(block: MessageBlock | tuple[np.ndarray, np.ndarray], index: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(block, tuple) and len(block) == 2:
        messages, mask = block
    elif isinstance(block, MessageBlock):
        messages, mask = block.messages, block.mask
    else:
        raise invalid_argument(
            f"message block {index}", type(block).__name__, "a (messages, mask) pair or an object with .messages and .mask"
        )
    return np.asarray(messages), np.asarray(mask, dtype=bool)


class Shuffler:
    """Concatenate, drop identity, permute uniformly per replica. Plain class; ``ShufflerActor`` runs it in Ray.

    Parameters
    ----------
    run_seed : int or None
        The run seed (``plan.seed``); None (faithful runs) draws the shuffler's own seed from OS
        entropy, which never leaves the shuffler.
    streams : array of int, shape (P,) or (P, k)
        The stream key of every replica (``plan.replicas.streams``); replica p shuffles with the
        stream (run_seed, SHUFFLE, *streams[p], round).
    output : {"permutation", "sum"}
        What the server receives: the permuted messages, or only their sum (see the module
        docstring; a protocol asks for it with ``Routing.SHUFFLE_SUM``).
    """

    OUTPUTS = ("permutation", "sum")

    def __init__(self, run_seed: int | None, streams: np.ndarray, output: str = "permutation"):
        self.run_seed = secrets.randbits(63) if run_seed is None else int(run_seed)
        if np.ndim(streams) not in (1, 2) or np.size(streams) == 0:
            raise invalid_argument("streams", np.shape(streams), "a non-empty (P,) or (P, k) array, one row per replica")
        self.streams = stream_rows(streams)
        if output not in self.OUTPUTS:
            raise invalid_argument("shuffler output", output, f"one of {self.OUTPUTS}")
        self.output = output

    def shuffle(self, round_index: int, *blocks: MessageBlock | tuple[np.ndarray, np.ndarray]) -> ShuffledMessages:
        """The permuted multiset of the participating messages of round ``round_index``.

        Parameters
        ----------
        round_index : int
            The round (the permutation's stream coordinate).
        *blocks
            One per silo group, in silo-id order: ``(messages, mask)`` pairs or objects with
            ``.messages`` (P, S_g, ...) and ``.mask`` (P, S_g). A (p, s) cell with mask False
            (silo s did not take part for replica p) contributes nothing.

        Returns
        -------
        ShuffledMessages
            Messages (P, M_max, ...) and counts (P,); nothing identifies a sender. With
            ``output="sum"``, row 0 holds the sum of the participating messages, the rest are zero.

        Raises
        ------
        ValueError
            If no block is given, or blocks disagree on the replica count or message shape.
        """
        if not blocks:
            raise invalid_argument("blocks", 0, "at least one message block")
        num_replicas = self.streams.shape[0]
        pairs = [_as_block(b, i) for i, b in enumerate(blocks)]
        message_shape = None
        flat_messages, flat_mask = [], []
        for i, (messages, mask) in enumerate(pairs):
            if mask.ndim != 2 or mask.shape[0] != num_replicas:
                raise invalid_argument(f"message block {i} mask", mask.shape, f"(P, S_g) with P = {num_replicas}")
            if messages.shape[:2] != mask.shape:
                raise invalid_argument(f"message block {i} messages", messages.shape, f"leading axes {mask.shape}")
            shape = messages.shape[2:]
            if message_shape is None:
                message_shape = shape
            elif shape != message_shape:
                raise invalid_argument(f"message block {i} messages", messages.shape, f"messages of shape {message_shape}")
            flat_messages.append(messages)
            flat_mask.append(mask)
        assert message_shape is not None     # set by the first of the (non-empty) blocks
        messages = np.concatenate(flat_messages, axis=1)
        mask = np.concatenate(flat_mask, axis=1)

        counts = mask.sum(axis=1).astype(np.int64)
        out = np.zeros((num_replicas, int(counts.max(initial=0))) + message_shape, dtype=messages.dtype)
        if self.output == "sum":
            if out.shape[1]:
                out[:, 0] = (messages * mask.reshape(mask.shape + (1,) * len(message_shape))).sum(axis=1)
            return ShuffledMessages(out, counts)
        for p in range(num_replicas):
            rows = np.flatnonzero(mask[p])
            rng = generator(self.run_seed, Stream.SHUFFLE, *self.streams[p], int(round_index))
            perm = rng.permutation(rows.size)
            out[p, : rows.size] = messages[p, rows[perm]]
        return ShuffledMessages(out, counts)


ShufflerActor = ray.remote(Shuffler)
