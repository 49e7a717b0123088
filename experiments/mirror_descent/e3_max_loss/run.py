"""E3: the smooth max-loss game min_x max_y sum_i y_i F_i(x) (seed-001 spec §5 E3): Alg. 1 in
regimes (5) (first-order smooth, K ~ T / ell) and (6) (second-order smooth, K ~ sqrt(T / ell))
and Alg. 3 (bias-reduced vertex sampling, Thm 3.14, safe c_v = 20), with non-private SMD.

Data: ``fedray.data.LogisticTasks`` with m = 8 tasks of unequal difficulty, d = 64, a in {+-1}^d,
every task's labels the sign of one shared planted coordinate, task i's flipped with probability
0.3 i / 7 (so the max-loss player ends on the noisiest tasks, and the uniform start is far from
equilibrium: gap 0.228), the population a pool of 10,000 records (spec: 1e5; smaller so the
certified gap's ~1,000 passes over the pool per replica stay cheap). Metric: the duality gap
max_i F_i(x) - min_v sum_i y_i F_i(v) of the released output, certified (the upper end of the
interval; accelerated projected gradient for the inner minimum, its Frank-Wolfe gap as the
certificate, at most the solver's tolerance 1e-5 wide). delta = 1e-6; n = 1e4, 1e5, 1e6 at
eps = 1 and 10 (n eps = 1e4 .. 1e7); non-private SMD (T = n steps of one sample) to n = 1e5;
20 repetitions per cell as replicas of one job, local Ray with 2 actors.

Writes results.csv, fits.csv and figure.png next to this file, and prints them.

    python experiments/mirror_descent/e3_max_loss/run.py
    python experiments/mirror_descent/e3_max_loss/run.py --quick
"""

from __future__ import annotations

import argparse
import csv
import itertools
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
BASE = ["experiment=smd_max_loss", "data.spec.pool=10000", "data.spec.tasks=8", "data.spec.shared_support=true", "data.spec.sparsity=1", "data.spec.label_noise=0.0", "data.spec.noise_spread=0.3"]
ARMS = {
    "alg1_first_order": ["algorithm.regime=first_order"],
    "alg1_second_order": ["algorithm.regime=second_order"],
    "alg3_bias_reduced": ["algorithm=bias_reduced_smd", "participation=leveled"],
    "non_private_smd": ["algorithm.regime=second_order", "privacy=none"],
}


def overrides(arm: str, n: int, epsilon: float, d: int, repetitions: int) -> list[str]:
    out = BASE + ARMS[arm] + [f"data.spec.num_samples={n}", f"data.spec.dim={d}", f"repetitions={repetitions}",
                              "progress=false", "evaluate_every=1000000000", "runtime.num_actors=2"]
    return out if arm == "non_private_smd" else out + [f"privacy.epsilon={epsilon}", f"privacy.delta={DELTA}"]


def run_cell(arm: str, n: int, epsilon: float, d: int, repetitions: int, pool) -> tuple[dict, np.ndarray]:
    from fedray.runtime.driver import run

    plan = compose_plan(overrides(arm, n, epsilon, d, repetitions))
    start = time.perf_counter()
    result = run(plan, pool=pool)
    seconds = time.perf_counter() - start
    gaps = result.final["gap"]
    row = {"arm": arm, "n": n, "eps": epsilon, "n_eps": n * epsilon, "d": d, "T": plan.num_rounds, "reps": len(gaps),
           "gap_mean": float(gaps.mean()), "gap_ci95": float(1.96 * gaps.std(ddof=1) / math.sqrt(len(gaps))),
           "eps_spent": float(result.epsilon_spent.max()) if result.epsilon_spent is not None else math.inf,
           "seconds": seconds}
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    return row, gaps


def start_gap(d: int) -> float:
    """The certified gap of the uniform pair (where every arm starts) on the runs' pool."""
    plan = compose_plan(overrides("non_private_smd", 1000, 1.0, d, 1))
    spec = plan.dataset
    game = spec.load(plan.seed, plan.trial, silo_ids=[0]).game
    return float(game.gap(np.full((1, spec.dim), 1.0 / spec.dim), np.full((1, spec.tasks), 1.0 / spec.tasks))[0])


def fits(rows: list[dict], gaps: list[np.ndarray]) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for arm in ARMS:
        picked = [(r["n_eps"], g) for r, g in zip(rows, gaps) if r["arm"] == arm]
        if len(picked) < 2:
            continue
        value, low, high = bootstrap_slope([n for n, _ in picked], [g for _, g in picked], rng)
        out.append({"arm": arm, "slope_in_n_eps": value, "ci_low": low, "ci_high": high})
    return out


def figure(rows: list[dict], start: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, arm in enumerate(ARMS):
        for epsilon, marker in ((1.0, "o"), (10.0, "s")):
            picked = sorted((r["n_eps"], r["gap_mean"], r["gap_ci95"]) for r in rows
                            if r["arm"] == arm and r["eps"] == epsilon)
            if picked:
                x, y, ci = map(np.array, zip(*picked))
                ax.errorbar(x, y, yerr=ci, marker=marker, capsize=2, color=f"C{i}",
                            label=arm if arm == "non_private_smd" else f"{arm}, eps = {epsilon:g}")
    ax.axhline(start, color="grey", lw=0.8, ls=":", label="uniform start")
    ax.set(xscale="log", yscale="log", xlabel="n eps (non-private: n)", ylabel="certified duality gap (mean, 95% CI)",
           title="max-loss logistic game, m = 8 tasks of unequal noise, d = 64")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 1e4, 3e4 at eps = 1, 4 repetitions")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ns, epsilons, reps = ((10**4, 3 * 10**4), (1.0,), 4) if args.quick else \
        ((10**4, 10**5, 10**6), (1.0, 10.0), REPETITIONS)
    rows, gaps = [], []
    started = time.perf_counter()
    with job_session() as pool, open(args.out / "results.csv", "w", newline="") as f:
        writer = None
        for n, epsilon, arm in itertools.product(ns, epsilons, ARMS):
            if arm == "non_private_smd" and (n > 10**5 or epsilon != epsilons[0]):
                continue
            row, g = run_cell(arm, n, epsilon, 64, reps, pool)
            rows.append(row)
            gaps.append(g)
            if writer is None:
                writer = csv.DictWriter(f, list(row))
                writer.writeheader()
            writer.writerow(row)
            f.flush()
    fitted = fits(rows, gaps)
    with open(args.out / "fits.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(fitted[0]))
        writer.writeheader()
        writer.writerows(fitted)
    start = start_gap(64)
    print(f"uniform start: certified gap {start:.4f}")
    figure(rows, start, args.out / "figure.png")
    for row in fitted:
        print(f"{row['arm']:18s} slope in n eps {row['slope_in_n_eps']:7.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]")
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
