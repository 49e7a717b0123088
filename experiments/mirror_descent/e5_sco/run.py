"""E5: DP-SCO on the simplex, logistic regression (seed-001 spec §5 E5): Alg. 5 (anytime
online-to-batch with vertex sampling, Thm 4.2 (a) and (b)) against Alg. 1 specialised to
minimisation (vertex sampling, plain online-to-batch: the average of the output draws), DP
Frank-Wolfe and Gaussian-noise SMD (baselines, not from the paper) and non-private SMD.

Data (``fedray.data.LogisticTasks`` with one task): a in {+-1}^d, labels from a planted x* with
4 nonzeros and 10% label noise, the population D = a pool of 10,000 records, n samples drawn
from it. Metric: the excess population risk F(x) - min F of the released output, certified on
the pool (min F by accelerated projected gradient, with its Frank-Wolfe gap as the certificate;
the gap column is the upper end, ``width`` the certificate). Every cell is one fedray job (local
Ray, 2 actors) with 20 repetitions as replicas, eps = 1, delta = 1e-6; n = 1e3, 1e4, 1e5 and
d = 16, 64 (``--dims``; DP Frank-Wolfe's full passes make d = 256 at n = 1e5 about 25 min alone).
Rows are appended to results.csv as cells finish.

Writes results.csv, fits.csv (log-log slopes in n with 95% bootstrap CIs over replicas) and
figure.png next to this file, and prints them.

    python experiments/mirror_descent/e5_sco/run.py
    python experiments/mirror_descent/e5_sco/run.py --quick
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent))

from fedray.compose import compose_plan, job_session  # noqa: E402
from slopes import bootstrap_slope  # noqa: E402

DELTA = 1e-6
REPETITIONS = 20
BASE = ["experiment=sco_logistic", "data.spec.pool=10000", "data.spec.sparsity=4", "data.spec.label_noise=0.1"]
ARMS = {
    "alg5_second_order": ["algorithm.regime=second_order"],
    "alg5_first_order": ["algorithm.regime=first_order"],
    "alg1_vertex": ["algorithm=smd", "algorithm.regime=second_order"],
    "frank_wolfe": ["algorithm=frank_wolfe", "participation=all"],
    "gaussian_smd": ["algorithm=gaussian_smd", "privacy=central_gaussian", "privacy.l2_clip=null"],
    "non_private_smd": ["algorithm=smd", "algorithm.regime=second_order", "privacy=none"],
}


def overrides(arm: str, n: int, d: int, repetitions: int) -> list[str]:
    out = BASE + ARMS[arm] + [f"data.spec.num_samples={n}", f"data.spec.dim={d}", f"repetitions={repetitions}",
                              "progress=false", "evaluate_every=1000000000", "runtime.num_actors=2"]
    return out if arm == "non_private_smd" else out + ["privacy.epsilon=1.0", f"privacy.delta={DELTA}"]


def run_cell(arm: str, n: int, d: int, repetitions: int, pool) -> tuple[dict, np.ndarray]:
    from fedray.runtime.driver import run

    plan = compose_plan(overrides(arm, n, d, repetitions))
    start = time.perf_counter()
    result = run(plan, pool=pool)
    seconds = time.perf_counter() - start
    excess = result.final["gap"]
    game = plan.dataset.load(plan.seed, plan.trial, silo_ids=np.arange(1)).game
    min_f, width = game.inner_minimum(np.ones((1, 1)))
    row = {"arm": arm, "n": n, "d": d, "T": plan.num_rounds, "reps": len(excess),
           "excess_mean": float(excess.mean()), "excess_ci95": float(1.96 * excess.std(ddof=1) / math.sqrt(len(excess))),
           "certificate_width": float(width[0]), "min_F": float(min_f[0]),
           "eps_spent": float(result.epsilon_spent.max()) if result.epsilon_spent is not None else math.inf,
           "seconds": seconds}
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    return row, excess


def fits(rows: list[dict], excess: list[np.ndarray]) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for arm in ARMS:
        for d in sorted({r["d"] for r in rows}):
            picked = [(r["n"], e) for r, e in zip(rows, excess) if r["arm"] == arm and r["d"] == d]
            if len(picked) < 2:
                continue
            value, low, high = bootstrap_slope([n for n, _ in picked], [e for _, e in picked], rng)
            out.append({"arm": arm, "d": d, "slope_in_n": value, "ci_low": low, "ci_high": high})
    return out


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = sorted({r["d"] for r in rows})
    fig, axes = plt.subplots(1, len(dims), figsize=(5.5 * len(dims), 3.8), squeeze=False)
    for ax, d in zip(axes[0], dims):
        for i, arm in enumerate(ARMS):
            picked = sorted((r["n"], r["excess_mean"], r["excess_ci95"]) for r in rows if r["arm"] == arm and r["d"] == d)
            if picked:
                x, y, ci = map(np.array, zip(*picked))
                ax.errorbar(x, y, yerr=ci, marker="o", capsize=2, label=arm, color=f"C{i}")
        ax.set(xscale="log", yscale="log", xlabel="n (eps = 1)", ylabel="excess population risk (mean, 95% CI)",
               title=f"d = {d}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 1e3 and 1e4, d = 16, 4 repetitions")
    parser.add_argument("--dims", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ns, dims, reps = ((10**3, 10**4), (16,), 4) if args.quick else ((10**3, 10**4, 10**5), tuple(args.dims), REPETITIONS)
    rows, excess = [], []
    started = time.perf_counter()
    with job_session() as pool, open(args.out / "results.csv", "w", newline="") as f:
        writer = None
        for d in dims:
            for n in ns:
                for arm in ARMS:
                    row, e = run_cell(arm, n, d, reps, pool)
                    rows.append(row)
                    excess.append(e)
                    if writer is None:
                        writer = csv.DictWriter(f, list(row))
                        writer.writeheader()
                    writer.writerow(row)
                    f.flush()
    np.savez_compressed(args.out / "excess.npz", **{f"cell{i}": e for i, e in enumerate(excess)})
    fitted = fits(rows, excess)
    with open(args.out / "fits.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(fitted[0]))
        writer.writeheader()
        writer.writerows(fitted)
    figure(rows, args.out / "figure.png")
    for row in fitted:
        print(f"{row['arm']:18s} d={row['d']:4d} slope in n {row['slope_in_n']:7.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]")
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
