"""The log-log fits seed 001's experiments report: a slope of the mean against x with a 95%
bootstrap CI over replicas (each cell's replicas resampled with replacement)."""

from __future__ import annotations

import numpy as np

BOOTSTRAP = 2000


def bootstrap_slope(xs, per_x: list[np.ndarray], rng: np.random.Generator) -> tuple[float, float, float]:
    """(slope, CI low, CI high) of log mean(per_x[i]) against log xs[i]. Means are floored at
    1e-12 so a certified gap that rounds to 0 stays finite on the log scale."""
    x = np.log(np.asarray(xs, dtype=float))
    fit = lambda means: float(np.polyfit(x, np.log(np.maximum(means, 1e-12)), 1)[0])   # noqa: E731
    point = fit([g.mean() for g in per_x])
    boots = [fit([rng.choice(g, g.size).mean() for g in per_x]) for _ in range(BOOTSTRAP)]
    return point, float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))
