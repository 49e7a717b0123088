"""Checkpoints: the server state, the privacy ledger and the metric history after a round.

Randomness is keyed by (seed, stream, repetition, round, silo), so a run resumed from the
checkpoint of round r continues exactly as the uninterrupted run would have. A checkpoint carries a
fingerprint of everything that shapes the run (the config without runtime, tracking and progress);
resuming with a different config is refused rather than silently mixing two runs. Files are
written atomically (temporary file, then rename), so a crash never leaves half a checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

from fedray.errors import ConfigError

NOT_IN_FINGERPRINT = ("runtime", "tracking", "progress", "hydra")


@dataclass
class Checkpoint:
    next_round: int
    state: object            # the algorithm's state (a NamedTuple of arrays)
    ledger: dict             # the ledger's ``state()``
    history: list
    fingerprint: str
    steps: list | None = None        # the step each history entry was logged at (its round's last step)
    run_id: str | None = None        # the MLflow run the checkpointed rounds were logged to


def fingerprint(config: dict) -> str:
    shaping = {k: v for k, v in config.items() if k not in NOT_IN_FINGERPRINT}
    return hashlib.sha256(json.dumps(shaping, sort_keys=True, default=str).encode()).hexdigest()[:16]


def save(path: str | Path, checkpoint: Checkpoint) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(checkpoint, f)
    os.replace(tmp, path)


def resumable(runtime: dict, config: dict) -> Checkpoint | None:
    """The checkpoint a run of ``config`` continues from (``runtime.resume`` and a file at
    ``runtime.checkpoint_path``), or None; one written by another config is refused."""
    path = runtime.get("checkpoint_path")
    if not (path and runtime.get("resume") and Path(path).exists()):
        return None
    return load(path, fingerprint(config))


def load(path: str | Path, expected_fingerprint: str) -> Checkpoint:
    with open(path, "rb") as f:
        checkpoint = pickle.load(f)
    if checkpoint.fingerprint != expected_fingerprint:
        raise ConfigError("runtime.checkpoint_path", str(path),
                          "a checkpoint written by a run with the same config (its fingerprint differs)")
    return checkpoint
