"""E1 (seed-002 spec §4.4): the gradient evaluations of Alg. 3 and Alg. 1 as formulas, from the
implemented calculator (``fedray.protocols.user_level.phased_parameters``); no training.

Smooth (Thm C.3's lambda and p, q = 0.1, eps = 1, beta = L = R = 1, delta = (n m)^-1.5, n = m = d
from 1e3 to 1e12): sum_i T_i K_i m by the log-free order calculator (T_i = ceil(1 + sqrt(beta /
lambda_i)), K_i = n_i eps / sqrt(T_i) + 1 / eps) and by the printed formulas (with their logs and
constants, K_i uncapped), against the paper's (n m)^(9/8); Alg. 1's count, sum_i n_i m; and the
comparator beta (n m)^(3/2) of the earlier method (AL24). Non-smooth (Thm D.3: beta_r = (L / R) eps
n sqrt(m), lambda = (L / R) / sqrt(n m), order calculator): in n at m = 100 (1e6 .. 1e12) and in m
at n = 1e6 (1e2 .. 1e6), against n^(11/8) m^(5/4). Local slopes between neighbouring points.

Writes results.csv, slopes.csv and figure.png next to this file, and prints the slopes.

    python experiments/user_level_fast/e1_complexity/run.py
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from fedray.protocols.user_level.phased_parameters import (  # noqa: E402
    Problem,
    accelerated_schedule,
    order_gradients,
    phased_sgd_schedule,
    smoothed,
)

SIZES = np.logspace(3, 12, 19)          # n = m = d
NONSMOOTH_N = np.logspace(6, 12, 13)
NONSMOOTH_M = np.logspace(2, 6, 9)


def smooth_rows() -> list[dict]:
    rows = []
    for n in SIZES:
        n = int(round(n))
        problem = Problem(n, n, n, 1.0, float(n) ** -3)
        rows.append({"case": "smooth", "n": n, "m": n, "nm": float(n) * n,
                     "alg3_order": order_gradients(problem),
                     "alg3_printed": float((accelerated_schedule(problem).steps
                                            * accelerated_schedule(problem).batch_printed).sum() * n),
                     "alg1": phased_sgd_schedule(problem).gradients,
                     "al24": (float(n) * n) ** 1.5})
    return rows


def nonsmooth_rows() -> list[dict]:
    rows = []
    for case, grid in (("nonsmooth_in_n", [(int(round(n)), 100) for n in NONSMOOTH_N]),
                       ("nonsmooth_in_m", [(10**6, int(round(m))) for m in NONSMOOTH_M])):
        for n, m in grid:
            problem, lam = smoothed(Problem(n, m, 10, 1.0, 1e-9))
            rows.append({"case": case, "n": n, "m": m, "nm": float(n) * m,
                         "alg3_order": order_gradients(problem, regularization=lam),
                         "alg3_printed": np.nan, "alg1": np.nan, "al24": np.nan})
    return rows


def local_slopes(rows: list[dict], case: str, axis: str, column: str) -> np.ndarray:
    picked = [r for r in rows if r["case"] == case]
    x = np.array([r[axis] for r in picked], dtype=np.float64)
    y = np.array([r[column] for r in picked], dtype=np.float64)
    return np.diff(np.log(y)) / np.diff(np.log(x))


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    smooth = [r for r in rows if r["case"] == "smooth"]
    nm = np.array([r["nm"] for r in smooth])
    fig, ax = plt.subplots(figsize=(6, 4))
    for column, label in (("alg3_order", "Alg. 3, order calculator"), ("alg3_printed", "Alg. 3, printed formulas"),
                          ("alg1", "Alg. 1 (sum n_i m)"), ("al24", "AL24: (nm)^(3/2)")):
        ax.plot(nm, [r[column] for r in smooth], marker=".", label=label)
    ax.plot(nm, nm ** (9 / 8), ls=":", color="grey", label="(nm)^(9/8)")
    ax.plot(nm, nm, ls="--", color="grey", lw=0.8, label="nm")
    ax.set(xscale="log", yscale="log", xlabel="n m (n = m = d, eps = 1)", ylabel="gradient evaluations",
           title="seed 002: gradient evaluations by formula")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    started = time.perf_counter()
    rows = smooth_rows() + nonsmooth_rows()
    with open(HERE / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    slopes = []
    for case, axis, column in (("smooth", "nm", "alg3_order"), ("smooth", "nm", "alg3_printed"),
                               ("smooth", "nm", "alg1"), ("nonsmooth_in_n", "n", "alg3_order"),
                               ("nonsmooth_in_m", "m", "alg3_order")):
        picked = [r for r in rows if r["case"] == case]
        values = local_slopes(rows, case, axis, column)
        for (lo, hi), slope in zip(zip(picked[:-1], picked[1:]), values):
            slopes.append({"case": case, "count": column, "axis": axis, "from": lo[axis], "to": hi[axis],
                           "local_slope": float(slope)})
        print(f"{case:15s} {column:13s} local slope in {axis}: first {values[0]:.3f}, last {values[-1]:.3f}, "
              f"range [{values.min():.3f}, {values.max():.3f}]")
    with open(HERE / "slopes.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(slopes[0]))
        writer.writeheader()
        writer.writerows(slopes)
    figure(rows, HERE / "figure.png")
    print(f"wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
