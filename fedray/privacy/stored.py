"""Accountant answers kept on disk, so planning a run again neither recomputes nor imports dp-accounting.

Planning a run asks the accountant for a few numbers (the RDP curve of one sampled release, the
epsilon after c participations, a calibrated noise multiplier) that take a second or more to
compute, and a second more to import dp-accounting (scipy.signal, scipy.stats) for them. They
are deterministic functions of their arguments and of the accounting code, so ``stored`` keeps
each answer in ``$FEDRAY_CACHE_DIR/accounting.sqlite`` (default ``~/.cache/fedray``).

The key of an answer is the function's qualified name, its arguments (floats written with
``repr``, which round-trips exactly), the installed dp-accounting version and a hash of the
source of fedray's accounting modules (``SOURCES``): a new dp-accounting or a change to that code
misses every old entry. Values are stored as JSON (floats exactly, arrays as lists of floats).
A store that cannot be opened or written (read-only home, a locked file) is skipped: the value
is computed as without it, so the cache can make planning faster and never makes it fail.

Trust: the store holds epsilons and noise multipliers the planner then believes; whoever can
write to the cache folder could make a run under-report its spend. That is the same trust as in
the installed code and the data folder, which the same user owns; ``FEDRAY_CACHE_DIR`` moves it.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import sqlite3
import threading
from importlib import metadata
from pathlib import Path
from typing import Callable

import numpy as np

SOURCES = ("accounting.py", "replace_one_pld.py", "stored.py")     # in fedray/privacy: what the answers depend on
TIMEOUT = 30.0          # seconds a write waits for another process's write


@functools.cache
def _version() -> str:
    """dp-accounting's version and the hash of the accounting sources, read once per process."""
    here = Path(__file__).resolve().parent
    code = hashlib.sha256(b"".join((here / name).read_bytes() for name in SOURCES)).hexdigest()[:16]
    return f"dp-accounting {metadata.version('dp-accounting')}; fedray accounting {code}"


def store_path() -> Path:
    from fedray.data.download import cache_root

    return cache_root() / "accounting.sqlite"


_open: dict[Path, sqlite3.Connection] = {}
_lock = threading.Lock()


def _connection() -> sqlite3.Connection:
    """This process's connection to the store (one per path: tests move ``FEDRAY_CACHE_DIR``)."""
    path = store_path()
    if path not in _open:
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, timeout=TIMEOUT, check_same_thread=False, isolation_level=None)
        # WAL: readers never wait for a writer, and a commit needs no fsync (a lost entry is recomputed).
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        _open[path] = connection
    return _open[path]


def _encode(value) -> str:
    if isinstance(value, tuple):
        return json.dumps({"tuple": [np.asarray(v, dtype=np.float64).tolist() for v in value]})
    return json.dumps({"float": float(value)})


def _decode(text: str):
    stored = json.loads(text)
    if "tuple" in stored:
        return tuple(np.asarray(v, dtype=np.float64) for v in stored["tuple"])
    return float(stored["float"])


def stored(fn: Callable) -> Callable:
    """``fn`` (of numbers and strings, returning a float or a tuple of float arrays) with its
    answers kept on disk (module docstring). ``fn.uncached`` computes without the store."""

    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        args = tuple(bound.arguments.values())
        key = json.dumps([fn.__module__, fn.__qualname__, _version(), [_argument(a) for a in args]])
        try:
            with _lock:
                row = _connection().execute("SELECT value FROM answers WHERE key = ?", (key,)).fetchone()
            if row is not None:
                return _decode(row[0])
        except (sqlite3.Error, OSError, ValueError, KeyError, TypeError):
            pass            # an unreadable store or entry: compute the answer
        value = fn(*args)
        try:
            with _lock:
                _connection().execute("INSERT OR REPLACE INTO answers VALUES (?, ?)", (key, _encode(value)))
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
