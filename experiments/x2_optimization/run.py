"""X2: excess population risk of seed 000's protocols against n and eps, next to the local-DP,
central-DP and non-private baselines in the same runtime (issue 11; seed-000 §4 Table 1 and B).

Problems (``fedray.data.SphereRegression``, closed-form population risk; d = 10, ||w*|| = 0.5,
label noise Uniform[-0.5, 0.5], Theta = the ball of radius 1, so D = 2):

- ``smooth``: half squared loss, L = 2 (P_vec's Delta2 and every arm's clip), beta = 1, and
  population strong convexity lambda = 1/d for the phased method (Thm 4.8b);
- ``nonsmooth``: absolute loss, L = 1.

Every arm is one fedray job per (problem, n, eps) with ``experiment=x2_sphere``: n users with one
record each, delta = 1e-6, repetitions carried as replicas of the job (each its own noise; 5 at
n = 1e3, 20 at 1e4, 10 at 1e5, 5 at 1e6; the fully interactive arms only at n = 1e3 and 3e3, with 5), B,
T and the step from the paper's formulas with the arm's own sum error (``parameters=exact``), so
the private arms and their baselines share B and T. The jobs run on a local Ray (2 actors, kept
between jobs). The excess risk of each replica's released model (P_SGD / P_GD: the average
iterate; P_AGD: theta^ag) is computed in closed form. Writes results.csv (one row per cell),
slopes.csv (log-log slope in n per arm and eps with a 95% bootstrap CI over replicas),
sum_error_ratios.csv (closed forms: P_vec's sum error against the local and central Gaussian sums
at each protocol's B, n up to 1e12) and figure.png next to this file, and prints them.

    python experiments/x2_optimization/run.py            # the full grid
    python experiments/x2_optimization/run.py --quick    # n = 1e3 and 3e3, 5 repetitions (a smoke run)
    python experiments/x2_optimization/run.py --ratios-only   # sum_error_ratios.csv alone, in a second
    python experiments/x2_optimization/run.py --figure-only   # figure.png again from results.csv
    python experiments/x2_optimization/run.py --arms "P_SGD tight" ...   # re-run these arms, keep the rest

Every shuffle arm has a twin named "<arm> tight" (issue 44): the same protocol, B, T and step rule
with P_vec calibrated by its exact privacy loss (``privacy.calibration=tight``,
``fedray.privacy.vector_sum_tight``; for P_GD its T rounds together by the binomial's moments,
``fedray.privacy.vector_sum_rounds``) instead of seed-000 §2.2's b and p, at the same (eps, delta).
``--arms`` runs only the named arms' cells and merges their rows into the existing results.csv and
slopes.csv in ``--out`` (every other arm's rows stay as they were); each cell's per-replica excess
risks go to excess.npz, merged the same way.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from fedray.compose import compose_plan, job_session  # noqa: E402

NS = (10**3, 10**4, 10**5, 10**6)
# Repetitions per n, every arm (as results.csv was made: 5 at n = 1e3 too, where the P_GD cells set it;
# see the README), and for the fully interactive arms.
REPETITIONS = {10**3: 5, 10**4: 20, 10**5: 10, 10**6: 5}
GD_NS = (10**3, 3 * 10**3)      # P_GD: T = min(n, eps^2 n^2 / (d ln^2(nd/delta))) rounds of all n users
GD_REPETITIONS = 5
EPSILONS = (1.0, 4.0)
BOOTSTRAP = 2000

SMOOTH = ["data.loss._target_=fedray.losses.Squared", "privacy.l2_clip=2.0"]
NONSMOOTH = ["data.loss._target_=fedray.smoothing.Absolute", "privacy.l2_clip=1.0"]
ENVELOPE = ["data.loss._target_=fedray.smoothing.MoreauEnvelope", "+data.loss.base={_target_: fedray.smoothing.Absolute}",
            "+data.loss.smoothing=null", "privacy.l2_clip=1.0"]
SGD, AGD = ["algorithm=p_sgd"], ["algorithm=p_agd", "algorithm.smoothness=1.0"]
GD = ["algorithm=p_gd", "participation=all"]

# arm -> (problem, overrides, released output, fully interactive, kind)
ARMS = {
    "P_SGD": ("smooth", SMOOTH + SGD, "avg", False, "shuffle"),
    "P_AGD": ("smooth", SMOOTH + AGD, "last", False, "shuffle"),
    "P_AGD phases (4.8b)": ("smooth", SMOOTH + AGD + ["algorithm.strong_convexity=0.1"], "last", False, "shuffle"),
    "P_GD": ("smooth", SMOOTH + GD, "avg", True, "shuffle"),
    "local SGD": ("smooth", SMOOTH + SGD + ["privacy=local_gaussian"], "avg", False, "local"),
    "central SGD": ("smooth", SMOOTH + SGD + ["privacy=central_gaussian"], "avg", False, "central"),
    "central GD": ("smooth", SMOOTH + GD + ["privacy=central_gaussian"], "avg", True, "central"),
    "non-private SGD": ("smooth", SMOOTH + SGD + ["privacy=none", "privacy.l2_clip=2.0"], "avg", False, "none"),
    "P_SGD (abs)": ("nonsmooth", NONSMOOTH + SGD, "avg", False, "shuffle"),
    "smoothed P_AGD (abs)": ("nonsmooth", ENVELOPE + ["algorithm=p_agd"], "last", False, "shuffle"),
    "local SGD (abs)": ("nonsmooth", NONSMOOTH + SGD + ["privacy=local_gaussian"], "avg", False, "local"),
    "central SGD (abs)": ("nonsmooth", NONSMOOTH + SGD + ["privacy=central_gaussian"], "avg", False, "central"),
    "non-private SGD (abs)": ("nonsmooth", NONSMOOTH + SGD + ["privacy=none", "privacy.l2_clip=1.0"], "avg", False,
                              "none"),
}
TIGHT = " tight"      # the suffix of P_vec's exactly calibrated twin of a shuffle arm (issue 44)
# Every shuffle arm has its tight twin. P_GD's calibrates its T rounds together by the binomial's
# moments (fedray.privacy.vector_sum_rounds): the per-round route at eps_0 = 0.0024 to 0.012 did not
# finish (L = 212 to 357 unit pairs a round on a PLD grid of 3e-5; see the README).
NO_TIGHT_TWIN: tuple[str, ...] = ()
ARMS |= {arm + TIGHT: (problem, overrides + ["privacy.calibration=tight"], output, interactive, kind)
         for arm, (problem, overrides, output, interactive, kind) in list(ARMS.items())
         if kind == "shuffle" and arm not in NO_TIGHT_TWIN}
LOSS = {"smooth": "squared", "nonsmooth": "absolute"}


def run_cell(arm: str, n: int, eps: float, repetitions: int, pool) -> dict:
    from fedray.runtime.driver import run

    problem, overrides, output, _, kind = ARMS[arm]
    plan = compose_plan(["experiment=x2_sphere", f"data.spec.num_silos={n}", f"privacy.epsilon={eps}",
                         f"repetitions={repetitions}", "progress=false", *overrides])
    started = time.perf_counter()
    result = run(plan, pool=pool)
    seconds = time.perf_counter() - started
    w_star = plan.dataset.optimum(plan.seed, plan.trial)
    excess = plan.dataset.excess_risk(result.outputs[output], w_star, LOSS[problem])
    zero = float(plan.dataset.excess_risk(np.zeros_like(w_star), w_star, LOSS[problem]))
    spent = float(np.max(result.epsilon_spent)) if plan.privacy.private else float("nan")
    return {"arm": arm, "problem": problem, "kind": kind, "n": n, "eps": eps, "reps": excess.size,
            "excess_mean": float(excess.mean()), "excess_se": float(excess.std(ddof=1) / np.sqrt(excess.size)),
            "excess_median": float(np.median(excess)), "excess_at_zero": zero, "eps_spent": spent,
            "batch": int(getattr(plan.protocol.algorithm, "batch_size", n)), "steps": plan.num_rounds,
            "step_size": float(plan.protocol.algorithm.step_size[0]), "seconds": round(seconds, 2),
            "samples": excess}


def sum_error_ratios(epsilons=EPSILONS, dim: int = 10, delta: float = 1e-6, lipschitz: float = 2.0) -> list[dict]:
    """Where P_vec's sum would catch up with the local Gaussian sum, from the closed forms alone: at
    the B each protocol's formula gives for n (P_SGD: B does not depend on n; P_AGD: B ~ n^(3/5)),
    MSE_vec(B) / (B d sigma^2) (below 1: the shuffled sum is the more accurate) and MSE_vec(B) /
    (d sigma^2) (against the central sum), sigma the analytic Gaussian of one user at (eps, delta)."""
    from fedray.privacy.gaussian_sum import release_sigma
    from fedray.protocols.shuffle_sco.hyperparameters import (
        agd_batch_size_raw, clamp_batch, pvec_mse, sgd_batch_size_raw,
    )

    rows = []
    for eps in epsilons:
        sigma2 = release_sigma(eps, delta, lipschitz) ** 2
        for exponent in range(3, 13):
            n = 10**exponent
            for protocol, raw in (("P_SGD", sgd_batch_size_raw(dim, eps, delta)),
                                  ("P_AGD", agd_batch_size_raw(n, dim, eps, delta, lipschitz, 1.0, 2.0))):
                batch = clamp_batch(raw, n)
                mse = pvec_mse(eps, delta, dim, batch, lipschitz)
                rows.append({"protocol": protocol, "eps": eps, "n": n, "batch": batch,
                             "shuffle_over_local": mse / (batch * dim * sigma2), "shuffle_over_central": mse / (dim * sigma2)})
    return rows


def slopes(rows: list[dict], rng: np.random.Generator) -> list[dict]:
    """Least-squares slope of log10 mean excess risk against log10 n per (arm, eps), with a 95%
    percentile bootstrap CI (replicas resampled within each n)."""
    out = []
    for arm in ARMS:
        for eps in sorted({r["eps"] for r in rows}):
            cells = sorted((r for r in rows if r["arm"] == arm and r["eps"] == eps), key=lambda r: r["n"])
            if len(cells) < 2:
                continue
            logn = np.log10([c["n"] for c in cells])
            fit = np.polyfit(logn, np.log10([c["excess_mean"] for c in cells]), 1)[0]
            boot = [np.polyfit(logn, np.log10([rng.choice(c["samples"], c["samples"].size).mean() for c in cells]), 1)[0]
                    for _ in range(BOOTSTRAP)]
            low, high = np.percentile(boot, [2.5, 97.5])
            out.append({"arm": arm, "eps": eps, "n_min": int(cells[0]["n"]), "n_max": int(cells[-1]["n"]),
                        "slope": round(float(fit), 3), "ci_low": round(float(low), 3), "ci_high": round(float(high), 3)})
    return out


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    epsilons = sorted({r["eps"] for r in rows})
    # One colour per method in both problems (the absolute-loss arms share their squared-loss twin's).
    palette = dict(zip(("P_SGD", "P_AGD", "P_AGD phases (4.8b)", "P_GD", "local SGD", "central SGD", "central GD",
                        "non-private SGD"), (f"C{i}" for i in range(8))))
    fig, axes = plt.subplots(2, len(epsilons), figsize=(6.4 * len(epsilons), 9.6), squeeze=False)
    styles = {"shuffle": "-", "local": "--", "central": ":", "none": "-."}
    for row_index, problem in enumerate(("smooth", "nonsmooth")):
        for col, eps in enumerate(epsilons):
            ax = axes[row_index, col]
            for arm, (arm_problem, _, _, _, kind) in ARMS.items():
                cells = sorted((r for r in rows if r["arm"] == arm and r["eps"] == eps), key=lambda r: r["n"])
                if arm_problem != problem or not cells:
                    continue
                n = [c["n"] for c in cells]
                mean = np.array([c["excess_mean"] for c in cells])
                se = np.array([c["excess_se"] for c in cells])
                tight = arm.endswith(TIGHT)
                base = arm.removesuffix(TIGHT).removesuffix(" (abs)").removeprefix("smoothed ")
                ax.errorbar(n, mean, yerr=1.96 * se, linestyle=(0, (1, 1)) if tight else styles[kind],
                            marker="s" if tight else "o", markersize=4 if tight else 3, capsize=2,
                            color=palette[base], markerfacecolor="white" if tight else None, label=arm)
            zero = next(r["excess_at_zero"] for r in rows if r["problem"] == problem)
            ax.axhline(zero, color="grey", linewidth=0.8, label="the model 0 (releases nothing)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_title(f"{'half squared' if problem == 'smooth' else 'absolute'} loss, eps = {eps:g}")
            ax.set_xlabel("n (users, one record each)")
            ax.set_ylabel("excess population risk (mean, 95% CI)")
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _cell(arm: str, n, eps) -> str:
    return f"{arm}|{int(float(n))}|{float(eps):g}"


def _kept(out: Path, todo: set) -> tuple[list[dict], list[dict], dict]:
    """The existing rows of results.csv and slopes.csv (as written) and replicas of excess.npz for
    every cell (arm, n, eps) not in ``todo``; slopes only of arms with no cell in ``todo``; nothing
    if ``out`` has no results yet."""
    if not (out / "results.csv").exists():
        return [], [], {}
    arms = {key.split("|")[0] for key in todo}
    with open(out / "results.csv") as f:
        rows = [r for r in csv.DictReader(f) if _cell(r["arm"], r["n"], r["eps"]) not in todo]
    with open(out / "slopes.csv") as f:
        fitted = [r for r in csv.DictReader(f) if r["arm"] not in arms]
    samples = {}
    if (out / "excess.npz").exists():
        with np.load(out / "excess.npz") as stored:
            samples = {k: stored[k] for k in stored.files if k not in todo}
    return rows, fitted, samples


def _typed(row: dict) -> dict:
    return {k: (v if k in ("arm", "problem", "kind") or not isinstance(v, str) else float(v)) for k, v in row.items()}


def _order(row: dict) -> tuple:
    """A full run's order: eps, then n, then the arm's place in ARMS."""
    return float(row["eps"]), float(row["n"]), list(ARMS).index(row["arm"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 1e3 and 3e3, 5 repetitions")
    parser.add_argument("--out", type=Path, default=HERE, help="where the CSVs and the figure go")
    parser.add_argument("--ratios-only", action="store_true", help="only sum_error_ratios.csv (closed forms, no runs)")
    parser.add_argument("--figure-only", action="store_true", help="redraw figure.png from results.csv (no runs)")
    parser.add_argument("--arms", nargs="+", choices=tuple(ARMS), default=None, metavar="ARM",
                        help="run only these arms' cells and replace their rows in the existing results "
                             f"(one of: {', '.join(ARMS)})")
    parser.add_argument("--ns", nargs="+", type=float, default=None, metavar="N",
                        help="with --arms: run only these n of the grid (the arms' other cells are kept)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ratios = sum_error_ratios()
    with open(args.out / "sum_error_ratios.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(ratios[0]))
        writer.writeheader()
        writer.writerows(ratios)
    for protocol in ("P_SGD", "P_AGD"):
        for eps in EPSILONS:
            cells = [r for r in ratios if r["protocol"] == protocol and r["eps"] == eps]
            first = next((r for r in cells if r["shuffle_over_local"] < 1), None)
            where = f"from n = {first['n']:.0e} (B = {first['batch']})" if first else f"at no n <= {cells[-1]['n']:.0e}"
            print(f"{protocol} eps={eps:g}: P_vec's sum beats the local Gaussian sum {where}; "
                  f"P_vec / central = {cells[0]['shuffle_over_central']:.3g}")
    if args.ratios_only:
        return
    if args.figure_only:
        with open(args.out / "results.csv") as f:
            rows = [_typed(r) for r in csv.DictReader(f)]
        figure(rows, args.out / "figure.png")
        return
    if args.quick:
        ns, gd_ns, repetitions = (10**3, 3 * 10**3), (10**3, 3 * 10**3), dict.fromkeys((10**3, 3 * 10**3), 5)
    else:
        ns, gd_ns, repetitions = NS, GD_NS, REPETITIONS
    arms = set(args.arms or ARMS)
    only = set(ns) | set(gd_ns) if args.ns is None else {int(n) for n in args.ns}
    todo = [(arm, n, eps) for eps in EPSILONS for n in sorted(set(ns) | set(gd_ns)) for arm in ARMS
            if arm in arms and n in only and n in (gd_ns if ARMS[arm][3] else ns)]
    kept_rows, kept_slopes, samples = (_kept(args.out, {_cell(*c) for c in todo}) if args.arms
                                       else ([], [], {}))
    started = time.perf_counter()
    rows = []
    with job_session() as pool:
        for arm, n, eps in todo:
            reps = GD_REPETITIONS if ARMS[arm][3] and not args.quick else repetitions[n]
            row = run_cell(arm, n, eps, reps, pool)
            rows.append(row)
            samples[_cell(arm, n, eps)] = row["samples"]
            print(f"{arm:30s} n={n:>8d} eps={eps:g}  excess {row['excess_mean']:.3e} +- {row['excess_se']:.1e}"
                  f"  B={row['batch']} T={row['steps']} eta={row['step_size']:.3g}  {row['seconds']:.1f} s",
                  flush=True)
    columns = [k for k in rows[0] if k != "samples"]
    merged = sorted(kept_rows + [{k: r[k] for k in columns} for r in rows], key=_order)
    with open(args.out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(merged)
    # Slopes of the arms run now, over every cell of theirs that has its replicas (this run's or kept).
    refit = {r["arm"] for r in rows}
    cells = [_typed(r) | {"samples": samples[_cell(r["arm"], r["n"], r["eps"])]} for r in merged
             if r["arm"] in refit and _cell(r["arm"], r["n"], r["eps"]) in samples]
    fitted = slopes(cells, np.random.default_rng(0))
    arm_order = list(ARMS)
    merged_slopes = sorted(kept_slopes + fitted, key=lambda s: (arm_order.index(s["arm"]), float(s["eps"])))
    with open(args.out / "slopes.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(merged_slopes[0]))
        writer.writeheader()
        writer.writerows(merged_slopes)
    np.savez_compressed(args.out / "excess.npz", **samples)
    figure([_typed(r) for r in merged], args.out / "figure.png")
    for s in fitted:
        print(f"slope {s['arm']:30s} eps={s['eps']:g}: {s['slope']:+.3f} [{s['ci_low']:+.3f}, {s['ci_high']:+.3f}]")
    print(f"X2 done in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
