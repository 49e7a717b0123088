"""Accountant answers kept on disk, so planning a run again neither recomputes nor imports dp-accounting.

Planning a run asks the accountant for a few numbers (the RDP curve of one sampled release, the
epsilon after c participations, a calibrated noise multiplier) that take a second or more to
compute, and a second more to import dp-accounting (scipy.signal, scipy.stats) for them. They
are deterministic functions of their arguments and of the accounting code, so ``stored`` keeps
each answer in ``$FEDRAY_CACHE_DIR/accounting-<host>.sqlite`` (default ``~/.cache/fedray``; one
file per host, so a cache folder shared by a cluster's nodes never has two hosts in one SQLite
file, and SQLite's rollback journal, which network file systems support).

The key of an answer is the function's qualified name, its arguments after defaults are applied
(floats written with ``repr``, which round-trips exactly), the installed versions of
dp-accounting, scipy and numpy, and a hash of the source of fedray's accounting modules
(``SOURCES``, read when this module is imported): a new library or a change to that code misses
every old entry. A stored value carries a hash of its key and itself, checked on every read. A
store that cannot be opened, read or written is skipped: the answer is computed as without it.

Trust: the store holds the epsilons and noise multipliers the planner and the ledger then
believe; whoever can write to it could make a run under-report its spend. A store file or folder
that another user owns, or that its group or others may write, is not used. Faithful runs
(``runtime.faithful``) use no store at all: every answer is computed in the process
(``accountant_store(False)``, a scope of the calling thread's context, not a process-wide switch:
two plans made at once, one faithful, do not change each other's answers).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import inspect
import json
import os
import socket
import sqlite3
import stat
import threading
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

SOURCES = ("accounting.py", "replace_one_pld.py", "stored.py")     # in fedray/privacy: what the answers depend on
LIBRARIES = ("dp-accounting", "scipy", "numpy")
TIMEOUT = 30.0          # seconds a write waits for another process's write
_HERE = Path(__file__).resolve().parent
_SOURCE_HASH = hashlib.sha256(b"".join((_HERE / name).read_bytes() for name in SOURCES)).hexdigest()[:16]

_open: dict[Path, sqlite3.Connection] = {}
_lock = threading.Lock()
# Whether the store is read and written, for the code running in this context (a thread starts
# with the default); set only for the length of an ``accountant_store`` block.
_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("fedray_accountant_store", default=True)


@contextlib.contextmanager
def accountant_store(enabled: bool) -> Iterator[None]:
    """Within the block, in this thread (and the asyncio tasks it starts), read and write the store
    (True), or compute every answer in this process (False); outside it, as before."""
    token = _enabled.set(bool(enabled))
    try:
        yield
    finally:
        _enabled.reset(token)


def store_enabled() -> bool:
    """Whether answers are read from and written to the store here (``accountant_store``)."""
    return _enabled.get()


@functools.cache
def _version() -> str:
    """The libraries' versions and the hash of the accounting sources, read once per process."""
    return "; ".join([f"{name} {metadata.version(name)}" for name in LIBRARIES] + [f"fedray accounting {_SOURCE_HASH}"])


def store_path() -> Path:
    from fedray.data.download import cache_root

    return cache_root() / f"accounting-{socket.gethostname()}.sqlite"


def _private(path: Path) -> None:
    """Refuse (OSError) a file or folder another user owns or others may write."""
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(f"{path} is not private to this user: its accountant answers are not used")


def _connection() -> sqlite3.Connection:
    """This process's connection to the store (one per path: tests move ``FEDRAY_CACHE_DIR``)."""
    path = store_path()
    if path not in _open:
        path.parent.mkdir(parents=True, exist_ok=True)
        _private(path.parent)
        connection = sqlite3.connect(path, timeout=TIMEOUT, check_same_thread=False, isolation_level=None)
        _private(path)
        # No fsync per answer (1 ms each, per round of a new run's ledger): a crash may lose or
        # damage entries, and a damaged one fails its check and is computed again.
        connection.execute("PRAGMA synchronous=OFF")
        connection.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        _open[path] = connection
    return _open[path]


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _encode(key: str, value) -> str:
    if isinstance(value, tuple):
        payload = json.dumps({"tuple": [np.asarray(v, dtype=np.float64).tolist() for v in value]})
    else:
        payload = json.dumps({"float": float(value)})
    return json.dumps({"check": _digest(key + payload), "payload": payload})


def _decode(key: str, text: str):
    stored = json.loads(text)
    if stored["check"] != _digest(key + stored["payload"]):
        raise ValueError("a stored answer that is damaged or under another key")
    answer = json.loads(stored["payload"])
    if "tuple" in answer:
        return tuple(np.asarray(v, dtype=np.float64) for v in answer["tuple"])
    return float(answer["float"])


def stored(fn: Callable) -> Callable:
    """``fn`` (of numbers and strings, returning a float or a tuple of float arrays) with its
    answers kept on disk (module docstring). ``fn.uncached`` computes without the store."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = [_argument(a) for a in bound.arguments.values()]
        if not _enabled.get():
            return fn(*bound.args, **bound.kwargs)
        key = None
        try:
            key = json.dumps([fn.__module__, fn.__qualname__, _version(), arguments])
            with _lock:
                row = _connection().execute("SELECT value FROM answers WHERE key = ?", (key,)).fetchone()
            if row is not None:
                return _decode(key, row[0])
        except (sqlite3.Error, OSError, ValueError, KeyError, TypeError, metadata.PackageNotFoundError):
            pass            # no usable store or entry: compute the answer
        value = fn(*bound.args, **bound.kwargs)
        if key is not None:
            try:
                with _lock:
                    _connection().execute("INSERT OR REPLACE INTO answers VALUES (?, ?)", (key, _encode(key, value)))
            except (sqlite3.Error, OSError):
                pass
        return value

    wrapper.uncached = fn
    return wrapper


def _argument(value):
    """An argument as it enters the key: ints and strings as they are, floats by their exact repr."""
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    raise TypeError(f"stored answers take numbers and strings; got {type(value).__name__}")
