"""What the experiment scripts' tables share: CSV rows under the union of their keys, and
log-log slopes."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


def write_csv(path: Path, rows: list[dict]) -> None:
    """Rows with different keys (arms with settings of their own) under the union of the keys."""
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fields, restval="")
        writer.writeheader()
        writer.writerows(rows)


def log_slope(x, y) -> float:
    """The least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def bootstrap_log_slope(x, draws: list, rng: np.random.Generator, resamples: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of ``log_slope(x, means)``, each point's mean taken over its draws
    (``draws[i]``, an array) resampled with replacement."""
    slopes = [log_slope(x, [rng.choice(d, len(d)).mean() for d in draws]) for _ in range(resamples)]
    return tuple(float(q) for q in np.percentile(slopes, [2.5, 97.5]))
