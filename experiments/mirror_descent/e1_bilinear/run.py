"""E1: seed 001's Alg. 1 (vertex sampling, regime (7), K = 1) on the padded bilinear matrix game,
against the Gaussian-noise SMD baseline (not from the paper) and non-private SMD (spec §5 E1).

The game (``fedray.data.PaddedMatrixGame``): a 3 x 3 cyclic base game padded to d x d strategies
per player with strictly dominated ones (a = 0.5), sample payoffs A_z = Abar + 0.5 u_z v_z^T with
Rademacher u_z, v_z (L0 = L1 = 1, L2 = 0), generated per sample from a counter-based stream. The
metric is the exact duality gap of the released output on the population (a diagnostic: it reads
Abar). Every cell is one fedray job (local Ray, 2 actors) carrying 20 repetitions as replicas,
delta = 1e-6. Studies:

- ``n``: eps = 3, d = 64, n = 1e3 .. 1e6 (non-private to 1e5: T = n steps of one sample);
- ``eps``: n = 1e5, d = 64, eps in {0.3, 1, 3, 10};
- ``d``: n = 1e5, eps = 3, d = 2^3 .. 2^15 (power-law fit gap = c d^q);
- ``K``: n = 1e5, eps = 3, d = 64, K in {1, 4, 16} at regime (7)'s T and B, tau = min(tau_util, tau_priv(K));
- ``bound``: n = 1e6, eps = 10, d = 64, where the spec's explicit bound (§3.1) is informative.

Alg. 1 runs twice in the n, eps and d studies: ``vertex`` with Thm 3.1 (7)'s T = n eps /
sqrt(ell ln(1/delta)) (``algorithm.parameters=paper``) and ``vertex_bound`` with the (T, K) that
minimise the explicit bound (``parameters=bound``, the spec's optional data-independent rule).
In the n and eps studies ``vertex_tight`` runs Alg. 1 with ``privacy.calibration=tight``: regime
(7)'s T, and tau_priv from bounded-range draws composed in zCDP instead of Cor. 3.6.

Writes results.csv (one row per cell: mean gap and its 95% CI over replicas, the iterate average's
gap, the explicit bound, eps spent, seconds), fits.csv (log-log slopes with 95% bootstrap CIs over
replicas) and figure.png next to this file, and prints them.

    python experiments/mirror_descent/e1_bilinear/run.py
    python experiments/mirror_descent/e1_bilinear/run.py --quick        # small n and d, 5 repetitions
    python experiments/mirror_descent/e1_bilinear/run.py --figure-only
    python experiments/mirror_descent/e1_bilinear/run.py --refit        # fits.csv and figure.png from the stored runs
    python experiments/mirror_descent/e1_bilinear/run.py --arms vertex_tight   # re-run one arm, keep the rest
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
from fedray.protocols.mirror_descent.calibration import (  # noqa: E402
    explicit_gap_bound, log_dimensions, private_step_size, sgd_schedule,
)

DELTA = 1e-6
REPETITIONS = 20
VERTEX = ["experiment=smd_bilinear"]
GAUSSIAN = ["experiment=smd_bilinear", "algorithm=gaussian_smd", "privacy=central_gaussian", "privacy.l2_clip=null"]
NON_PRIVATE = ["experiment=smd_bilinear", "privacy=none"]
ARMS = {"vertex": VERTEX, "vertex_bound": VERTEX + ["algorithm.parameters=bound"], "gaussian": GAUSSIAN,
        "non_private": NON_PRIVATE, "vertex_tight": VERTEX + ["privacy.calibration=tight"]}
COMPARED = ("vertex", "vertex_bound", "gaussian")


def cells(quick: bool) -> list[dict]:
    """(study, arm, n, eps, d, K) of every job."""
    ns = (10**3, 10**4) if quick else (10**3, 10**4, 10**5, 10**6)
    n0 = 10**4 if quick else 10**5
    dims = (8, 32, 128) if quick else tuple(2**k for k in (3, 5, 7, 9, 11, 13, 15))
    out = []
    for n in ns:
        out += [dict(study="n", arm=arm, n=n, eps=3.0, d=64, K=1) for arm in COMPARED + ("vertex_tight",)]
        if n <= n0:
            out.append(dict(study="n", arm="non_private", n=n, eps=math.inf, d=64, K=1))
    for eps in (0.3, 1.0, 3.0, 10.0):
        out += [dict(study="eps", arm=arm, n=n0, eps=eps, d=64, K=1) for arm in COMPARED + ("vertex_tight",)]
    for d in dims:
        out += [dict(study="d", arm=arm, n=n0, eps=3.0, d=d, K=1) for arm in COMPARED]
    for k in (1, 4, 16):
        out.append(dict(study="K", arm="vertex", n=n0, eps=3.0, d=64, K=k))
    if not quick:
        out.append(dict(study="bound", arm="vertex", n=10**6, eps=10.0, d=64, K=1))
    return out


def overrides(cell: dict, repetitions: int) -> list[str]:
    base = ARMS[cell["arm"]] + [f"data.spec.num_samples={cell['n']}", f"data.spec.dim={cell['d']}",
                                f"repetitions={repetitions}", "progress=false", "evaluate_every=1000000000",
                                "runtime.num_actors=2"]
    if cell["arm"] != "non_private":
        base += [f"privacy.epsilon={cell['eps']}", f"privacy.delta={DELTA}"]
    if cell["K"] != 1:   # regime (7)'s T and B, with K draws and its own tau_priv
        schedule = sgd_schedule("bilinear", cell["n"], cell["eps"], DELTA, cell["d"], cell["d"], 1.0)
        tau = min(schedule.utility_step, private_step_size(schedule.batch_size, schedule.num_steps, cell["K"],
                                                           cell["eps"], DELTA, 1.0))
        base += ["algorithm.parameters=manual", f"num_rounds={schedule.num_steps}",
                 f"participation.batch_size={schedule.batch_size}", f"algorithm.draws={cell['K']}",
                 f"algorithm.step_size={tau!r}"]
    return base


def run_cell(cell: dict, repetitions: int, pool) -> tuple[dict, np.ndarray]:
    from fedray.runtime.driver import run

    plan = compose_plan(overrides(cell, repetitions))
    start = time.perf_counter()
    result = run(plan, pool=pool)
    seconds = time.perf_counter() - start
    gaps = result.final["gap"]
    diag = result.final.get("gap_iterate_average", result.final.get("gap_last"))
    tau = float(plan.step_sizes[0])
    d, steps = cell["d"], plan.num_rounds
    bound = explicit_gap_bound(tau, steps, cell["K"], log_dimensions(d, d), 1.0, 1.0, 0.0, "bilinear") \
        if cell["arm"].startswith("vertex") else math.nan
    row = {**cell, "T": steps, "B": plan.sampler.batch_size, "tau": tau, "reps": len(gaps),
           "gap_mean": float(gaps.mean()), "gap_ci95": float(1.96 * gaps.std(ddof=1) / math.sqrt(len(gaps))),
           "gap_diagnostic_mean": float(np.mean(diag)), "explicit_bound": bound,
           "eps_spent": float(result.epsilon_spent.max()) if result.epsilon_spent is not None else math.inf,
           "seconds": seconds}
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    return row, gaps


def fits(rows: list[dict], gaps: list[np.ndarray]) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    specs = [("n", arm, "n", "slope in n (eps 3, d 64)") for arm in COMPARED + ("non_private",)]
    specs += [("eps", arm, "eps", "slope in eps (n 1e5, d 64)") for arm in COMPARED]
    specs += [("d", arm, "d", "power q in d (n 1e5, eps 3)") for arm in COMPARED]
    # Added arms come last, so the bootstrap draws of the arms before them do not move.
    specs += [("n", "vertex_tight", "n", "slope in n (eps 3, d 64)"), ("eps", "vertex_tight", "eps", "slope in eps (n 1e5, d 64)")]
    for study, arm, key, label in specs:
        picked = [(r[key], g) for r, g in zip(rows, gaps) if r["study"] == study and r["arm"] == arm]
        if len(picked) >= 2:
            value, low, high = bootstrap_slope([x for x, _ in picked], [g for _, g in picked], rng)
            out.append({"arm": arm, "fit": label, "value": value, "ci_low": low, "ci_high": high})
    for arm in COMPARED:
        by_d = {r["d"]: r["gap_mean"] for r in rows if r["study"] == "d" and r["arm"] == arm}
        if by_d:
            lo, hi = min(by_d), max(by_d)
            out.append({"arm": arm, "fit": f"gap(d={hi:g}) / gap(d={lo:g})", "value": by_d[hi] / by_d[lo],
                        "ci_low": math.nan, "ci_high": math.nan})
    return out


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    styles = {"vertex": ("C0", "Alg. 1, regime (7) T"), "vertex_bound": ("C3", "Alg. 1, bound-optimal T"),
              "vertex_tight": ("C4", "Alg. 1, tight (bounded-range zCDP)"),
              "gaussian": ("C1", "Gaussian SMD (baseline)"),
              "non_private": ("C2", "non-private SMD")}
    for ax, (study, key, title) in zip(axes, (("n", "n", "eps = 3, d = 64"), ("eps", "eps", "n = 1e5, d = 64"),
                                               ("d", "d", "n = 1e5, eps = 3"), ("K", "K", "Alg. 1, n = 1e5, eps = 3, d = 64"))):
        for arm, (color, label) in styles.items():
            picked = sorted((r[key], r["gap_mean"], r["gap_ci95"]) for r in rows if r["study"] == study and r["arm"] == arm)
            if picked:
                x, y, ci = map(np.array, zip(*picked))
                ax.errorbar(x, y, yerr=ci, marker="o", color=color, label=label, capsize=2)
        ax.set(xscale="log", yscale="log", xlabel=key, ylabel="duality gap (mean, 95% CI)", title=title)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _number(text: str):
    """A value as ``run_cell`` wrote it: an int stays an int, a float a float."""
    return int(text) if text.lstrip("-").isdigit() else float(text)


def _stored(out: Path) -> tuple[list[dict], list[np.ndarray]]:
    """results.csv's rows (numbers as written) and gaps.npz's replicas, row i with cell i."""
    with open(out / "results.csv") as f:
        rows = [{k: (v if k in ("study", "arm") else _number(v)) for k, v in r.items()} for r in csv.DictReader(f)]
    stored = np.load(out / "gaps.npz")
    return rows, [stored[f"cell{i}"] for i in range(len(rows))]


def _in_cell_order(rows: list[dict], gaps: list[np.ndarray], quick: bool) -> tuple[list[dict], list[np.ndarray]]:
    """Rows (and their gaps) in the order ``cells`` lists them, so a re-run arm lands where a full
    run would put it."""
    fields = ("study", "arm", "n", "eps", "d", "K")
    order = {tuple(c[k] for k in fields): i for i, c in enumerate(cells(quick))}
    ranked = sorted(range(len(rows)), key=lambda i: order.get(tuple(rows[i][k] for k in fields), len(order) + i))
    return [rows[i] for i in ranked], [gaps[i] for i in ranked]


def _write(out: Path, rows: list[dict], gaps: list[np.ndarray]) -> list[dict]:
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    fitted = fits(rows, gaps)
    with open(out / "fits.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(fitted[0]))
        writer.writeheader()
        writer.writerows(fitted)
    np.savez_compressed(out / "gaps.npz", **{f"cell{i}": g for i, g in enumerate(gaps)})
    figure(rows, out / "figure.png")
    return fitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small n and d, 5 repetitions")
    parser.add_argument("--figure-only", action="store_true", help="redraw figure.png from results.csv")
    parser.add_argument("--refit", action="store_true",
                        help="rewrite fits.csv and figure.png from results.csv and gaps.npz (no runs)")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--arms", nargs="+", choices=tuple(ARMS), default=None,
                        help="run only these arms' cells and replace their rows in the existing results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.figure_only:
        with open(args.out / "results.csv") as f:
            rows = [{k: (v if k in ("study", "arm") else float(v)) for k, v in r.items()} for r in csv.DictReader(f)]
        figure(rows, args.out / "figure.png")
        return
    if args.refit:
        _write(args.out, *_in_cell_order(*_stored(args.out), args.quick))
        return
    repetitions = 5 if args.quick else REPETITIONS
    rows, gaps = [], []
    todo = cells(args.quick)
    if args.arms:
        rows, gaps = _stored(args.out)
        kept = [i for i, r in enumerate(rows) if r["arm"] not in args.arms]
        rows, gaps = [rows[i] for i in kept], [gaps[i] for i in kept]
        todo = [cell for cell in todo if cell["arm"] in args.arms]
    started = time.perf_counter()
    with job_session() as pool:
        for cell in todo:
            row, g = run_cell(cell, repetitions, pool)
            rows.append(row)
            gaps.append(g)
    fitted = _write(args.out, *_in_cell_order(rows, gaps, args.quick))
    for row in fitted:
        print(f"{row['arm']:13s} {row['fit']:34s} {row['value']:8.3f}  [{row['ci_low']:.3f}, {row['ci_high']:.3f}]")
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
