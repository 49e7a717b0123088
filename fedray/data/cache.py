"""Preprocessed federations kept on disk, so a run does not redo a dataset's preprocessing.

MNIST's federations cost seconds to build (reading 70,000 images, importing scikit-learn, fitting
PCA), and every silo actor of every run built the whole federation before its first round. With
``cache: true`` in the dataset's spec the first build of a (spec, seed, trial) is written to
``$FEDRAY_CACHE_DIR/federations`` (default ``~/.cache/fedray/federations``) and later loads read it.

The key is a hash of everything the federation is a function of: the spec's fields, the seed and
trial, the source code of the spec's module (a change to the preprocessing misses the old entry)
and the name and content (SHA-256) of every file in the raw data folder: a copy of the same files
elsewhere or with new modification times (a fresh checkout, another node) hits the entry, a changed
byte misses it. Hashing MNIST's raw files takes milliseconds. An entry is
written to a temporary file and renamed into place, so actors building the same entry at once
never read a half-written file; an unreadable entry is rebuilt. The records are those of public
datasets already on disk: caching them reveals nothing a run does not already read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Callable

import numpy as np

from fedray.data.download import cache_root
from fedray.data.federation import Federation

ARRAYS = ("x_train", "y_train", "n_train", "x_test", "y_test", "n_test")


def cache_key(spec, seed: int, trial: int, inputs: Path) -> str:
    """A hash of what ``spec``'s federation of (seed, trial) is built from (module docstring)."""
    # not where the raw files are (their content is hashed), nor whether to cache
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name not in ("cache", "directory")}
    files = sorted((p.name, _digest(p)) for p in Path(inputs).iterdir() if p.is_file())
    code = inspect.getsource(sys.modules[type(spec).__module__])
    text = json.dumps([type(spec).__qualname__, fields, int(seed), int(trial), files, code], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _digest(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def cached_federation(spec, seed: int, trial: int, inputs: Path, build: Callable[[], Federation]) -> Federation:
    """``build()``'s federation, read from the cache when it holds this key, else built and stored;
    ``build()`` alone where the spec says ``cache: false``."""
    if not spec.cache:
        return build()
    path = cache_root() / "federations" / f"{type(spec).__name__}-{cache_key(spec, seed, trial, inputs)}.npz"
    try:
        with np.load(path, allow_pickle=False) as stored:
            items = stored["summarised_items"]
            return Federation(**{name: stored[name] for name in ARRAYS}, task=str(stored["task"]),
                              num_outputs=int(stored["num_outputs"]),
                              summarised_items=None if items.size == 0 else int(items))
    except (OSError, KeyError, ValueError):     # absent, or unreadable: build it (again)
        pass
    fed = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.npz")
    np.savez(partial, **{name: getattr(fed, name) for name in ARRAYS}, task=np.array(fed.task),
             num_outputs=np.array(fed.num_outputs),
             summarised_items=np.array([] if fed.summarised_items is None else fed.summarised_items))
    os.replace(partial, path)
    return fed
