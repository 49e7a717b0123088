"""Ctrl-C raised at safe points of a run, never in the middle of a library call.

Python raises ``KeyboardInterrupt`` between any two bytecodes of the main thread, including the one
after a lock's ``acquire()`` returned and before the ``try`` that releases it. ``logging``'s module
lock is taken that way (``Manager.getLogger``), and Ray's start-up takes it hundreds of times: a
Ctrl-C there left the lock held for good, the MLflow run opening in a background thread blocked on
it (SQLAlchemy's import asks for a logger), and the command waited forever for that run to mark it
KILLED. The same holds for any lock the main thread shares with a helper thread (the MLflow writer).

So while a run starts and runs, SIGINT only records that it came (``deferred``), and the driver
raises it where nothing is half done: after Ray and the actors started, after each gather of actor
results (every round, every oracle call of a driver-side program), after the MLflow run opened
(``check``). Ray's own ``DeferSigint`` sections call the handler they found, this one, at their end.
Opening the MLflow run before Ray starts would remove the thread that waited, not the race: the
lock would still be held for good, for Ray's own threads and the MLflow writer to block on, and a
Ctrl-C in the middle of MLflow's schema migration could leave a half-written store. Outside the main
thread (the ray_jobs launcher's jobs) signals do not arrive and both calls do nothing.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

_state = {"active": False, "pending": False, "ignore": False}


def _record(signum, frame) -> None:
    if not _state["ignore"]:
        _state["pending"] = True


def check() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C came since the last check (a safe point)."""
    if _state["pending"]:
        _state["pending"] = False
        raise KeyboardInterrupt


def pending() -> bool:
    """Whether a Ctrl-C came that no ``check`` has raised yet."""
    return _state["pending"]


def ignore() -> None:
    """Drop every Ctrl-C from here on (the run is recorded; what is left must run to its end)."""
    _state["ignore"], _state["pending"] = True, False


@contextmanager
def deferred():
    """Within the block, SIGINT is recorded and raised by ``check`` (or at the block's end, if it
    ends normally and none was raised); the previous handler is back afterwards, or SIGINT is
    ignored if ``ignore`` was called. Nested blocks and other threads leave the handler alone."""
    if threading.current_thread() is not threading.main_thread() or _state["active"]:
        yield
        return
    previous = signal.signal(signal.SIGINT, _record)
    _state.update(active=True, pending=False, ignore=False)
    try:
        yield
    finally:
        ignored = _state["ignore"]
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else previous)
        _state["active"] = False
    check()
