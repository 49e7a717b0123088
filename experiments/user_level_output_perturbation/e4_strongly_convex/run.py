"""E4 (seed-003 spec §4): the strongly convex pipelines (Alg. 5 and 6) and Phased-SCO, on
population risk.

Data: E2's (``data=synthetic``, x ~ N(0, I/d) scaled into the unit ball, y ~ Bernoulli(sigmoid(<w0,
x>)), d = 10), every user's items i.i.d. from one D. The item loss is logistic + (mu/2)||theta||^2
with mu = 0.1 on K = B(0, 1/mu) (G = 2) for Alg. 5 / 6, and plain logistic on K = B(0, 5) for the
convex Phased-SCO (Alg. 4, arm c). eps = 1, delta = 1e-5, beta as the paper's (1/(2 n^2 m) for
Alg. 5 / 6, 1/(n m) for Alg. 4), lambda balanced unless named.

Population excess risk: L(thetahat) - L(theta_D), both on 1e7 fresh items from D
(``SyntheticLinear.population_sample``, a stream no user reads), theta_D their (ridge) minimiser by
Newton. B0 is the non-private theta*(x) of the training records, scored the same way (the
statistical floor). Every cell uses seed 0, so D is one distribution throughout, and the users of
a smaller n are the first users of a larger one; arms a and c average TRIALS data draws (trial =
0..2, each its own D), the others use trial 0.

Arms (REPLICAS noise draws per run):
- a (rates): Alg. 5 (erm) and Alg. 6 (sco, sco_eq) at s = 1e-12 (every sigma_i, and the
  localization's, scaled by s: NOT DP), n in {1e4, 2e4, 4e4} at m = 10 and m in {30, 100} at n = 1e4:
  the statistical term's slope in n m (predicted -1 for a strongly convex loss; spec's 1/sqrt(nm)
  is the convex worst case). The diagnostic arms set allow_few_users (Alg. 5 at n m = 1e6 has 20
  phases at eps / 40, N0 = 10,450 > n); privacy does not depend on it, and these arms are not DP.
- b (literal against EQ): Alg. 6 sco and sco_eq at s in {1e-6, 1e-9}, n = 1e4, m in {10, 100}: the
  literal final phase's noise term, flat in m (spec A9), against EQ's, falling with m.
- c (lambda for SCO, spec A8): the convex Phased-SCO-EQ (Alg. 4, no mu) at s = 1e-12 with lambda
  paper and balanced, n in {1e4, 2e4, 4e4}, m = 10.
- d (split_localization): Alg. 6 sco_eq with the flag on, s in {1e-9, 1e-12}, n in {2e4, 4e4}.
- faithful (DP, s = 1): Alg. 5 and 6 at n = 2e4, m = 10: the ledger and the localization rate.

    python experiments/user_level_output_perturbation/e4_strongly_convex/run.py [--report]
"""

from __future__ import annotations

import csv
import functools
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.special import expit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from experiments.report.tables import bootstrap_log_slope, log_slope, write_csv  # noqa: E402
from fedray.compose import compose_plan  # noqa: E402
from fedray.runtime.driver import run  # noqa: E402

REPLICAS, DIM, MU, FRESH, TRIALS = 3, 10, 0.1, 10_000_000, 3
STRONG = {"alg5": "erm", "alg6": "sco", "alg6_eq": "sco_eq"}


def risk(theta: np.ndarray, x: np.ndarray, y: np.ndarray, mu: float) -> np.ndarray:
    """Mean logistic loss + (mu/2)||theta||^2 of each model (P, d) over records x (N, d), y in {0, 1}."""
    z = theta @ x.T
    return np.mean(np.logaddexp(0.0, z) - y * z, axis=1) + 0.5 * mu * np.sum(theta**2, axis=1)


def minimiser(x: np.ndarray, y: np.ndarray, mu: float) -> np.ndarray:
    theta = np.zeros(x.shape[1])
    for _ in range(100):
        p = expit(x @ theta)
        gradient = x.T @ (p - y) / len(y) + mu * theta
        if np.linalg.norm(gradient) < 1e-13:
            return theta
        theta -= np.linalg.solve((x * (p * (1 - p))[:, None]).T @ x / len(y) + mu * np.eye(x.shape[1]), gradient)
    raise RuntimeError("Newton did not converge")


@functools.cache
def population_sample(spec, trial: int) -> tuple:
    """D's fresh sample of trial ``trial``."""
    return spec.population_sample(0, trial, FRESH)


@functools.cache
def population(spec, trial: int, mu: float) -> tuple:
    """D's fresh sample, its minimiser theta_D and L(theta_D)."""
    x, y = population_sample(spec, trial)
    theta = minimiser(x, y, mu)
    return x, y, theta, risk(theta[None], x, y, mu)[0]


def run_cell(arm: str, algorithm: str, n: int, m: int, scale: float, regularization: str = "balanced",
             split: bool = False, trial: int = 0) -> dict:
    strong = algorithm in STRONG
    mu, radius = (MU, 1 / MU) if strong else (0.0, 5.0)
    overrides = ["experiment=strongly_convex_sco_synthetic", f"data.spec.num_silos={n}",
                 f"data.spec.samples_per_silo={m}", "data.spec.test_samples_per_silo=1",
                 f"data.spec.dim={DIM}", f"algorithm.variant={STRONG.get(algorithm, 'sco_eq')}",
                 f"algorithm.strong_convexity={MU if strong else 'null'}", f"algorithm.radius={radius}",
                 f"algorithm.regularization={regularization}", f"algorithm.noise_scale={scale}",
                 f"algorithm.split_localization={str(split).lower()}", f"algorithm.allow_few_users={scale < 1}",
                 f"repetitions={REPLICAS}", "progress=false", "seed=0", f"trial={trial}"]
    plan = compose_plan(overrides)
    started = time.perf_counter()
    result = run(plan, inline=True)
    seconds = time.perf_counter() - started
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train.reshape(-1, DIM), fed.y_train.reshape(-1)
    fresh_x, fresh_y, theta_d, floor = population(replace(plan.dataset, num_silos=1), trial, mu)
    assert np.linalg.norm(theta_d) < radius, "theta_D outside K"
    excess = risk(result.model[:, :, 0], fresh_x, fresh_y, mu) - floor
    erm = risk(minimiser(x, y, mu)[None], fresh_x, fresh_y, mu)[0] - floor
    resolved, last = plan.protocol.resolved, result.history[-1]
    return {"arm": arm, "algorithm": algorithm, "variant": STRONG.get(algorithm, "sco_eq"), "n": n, "m": m,
            "trial": trial, "regularization": regularization, "split": split, "noise_scale": scale,
            "dp": scale == 1.0, "phases": resolved["phases"], "lambda": resolved["regularization"],
            "localization_radius": resolved.get("localization_radius", float("nan")),
            "localized": float(np.mean(last["localized"])) if "localized" in last else float("nan"),
            "phases_without_release": float(np.mean(last["phases_without_release"])),
            "phases_settled": float(np.mean(last["phases_settled"])),
            "excess_mean": float(excess.mean()), "excess_draws": " ".join(f"{e:.6g}" for e in excess),
            "erm_excess": float(erm),
            "zero_model_excess": float(risk(np.zeros((1, DIM)), fresh_x, fresh_y, mu)[0] - floor),
            "epsilon_spent": float(result.epsilon_spent.max()) if result.epsilon_spent is not None else float("nan"),
            "seconds": seconds}


def cells():
    for algorithm in STRONG:
        for n, m in ((10_000, 10), (20_000, 10), (40_000, 10), (10_000, 30), (10_000, 100)):
            for trial in range(TRIALS):
                yield "a", algorithm, n, m, 1e-12, "balanced", False, trial
    for algorithm in ("alg6", "alg6_eq"):
        for scale in (1e-6, 1e-9):
            for m in (10, 100):
                yield "b", algorithm, 10_000, m, scale, "balanced", False, 0
    for regularization in ("paper", "balanced"):
        for n in (10_000, 20_000, 40_000):
            for trial in range(TRIALS):
                yield "c", "alg4_eq", n, 10, 1e-12, regularization, False, trial
    for scale in (1e-9, 1e-12):
        for n in (20_000, 40_000):
            yield "d", "alg6_eq", n, 10, scale, "balanced", True, 0
    for algorithm in ("alg5", "alg6_eq"):
        yield "faithful", algorithm, 20_000, 10, 1.0, "balanced", False, 0


def main() -> None:
    started = time.perf_counter()
    rows = []
    for cell in cells():
        rows.append(run_cell(*cell))
        r = rows[-1]
        print(f"{r['arm']} {r['algorithm']} n {r['n']} m {r['m']} {r['regularization']} split {r['split']} "
              f"trial {r['trial']} s {r['noise_scale']:g}: excess {r['excess_mean']:.3g} (ERM {r['erm_excess']:.3g})"
              f" T {r['phases']} settled {r['phases_settled']:.1f} localized {r['localized']} {r['seconds']:.1f} s",
              flush=True)
        write_csv(HERE / "results.csv", rows)
    report(read_results(HERE / "results.csv"))
    print(f"wall time {time.perf_counter() - started:.1f} s")


def read_results(path: Path) -> list[dict]:
    numbers = ("noise_scale", "lambda", "localization_radius", "localized", "phases_without_release", "phases_settled",
               "excess_mean", "erm_excess", "zero_model_excess", "epsilon_spent", "seconds")
    return [{**r, **{k: float(r[k]) for k in numbers}, "n": int(r["n"]), "m": int(r["m"]), "phases": int(r["phases"]),
             "trial": int(r["trial"]), "split": r["split"] == "True",
             "draws": np.array([float(v) for v in r["excess_draws"].split()])} for r in csv.DictReader(open(path))]


CELL = ("arm", "algorithm", "n", "m", "regularization", "split", "noise_scale")


def summarise(rows: list[dict]) -> list[dict]:
    """One row per cell: means over its trials (and replicas), the 95% CI of the mean over trials
    (over replicas with one trial), and each trial's mean excess as ``draws`` (for the slopes)."""
    cells: dict = {}
    for r in rows:
        cells.setdefault(tuple(r[k] for k in CELL), []).append(r)
    summary = []
    for key, group in cells.items():
        means = np.array([r["excess_mean"] for r in group])
        spread = means if len(group) > 1 else group[0]["draws"]
        summary.append({**dict(zip(CELL, key)), "dp": group[0]["dp"], "trials": len(group),
                        "phases": group[0]["phases"], "lambda": group[0]["lambda"],
                        "localization_radius": group[0]["localization_radius"],
                        "localized": float(np.mean([r["localized"] for r in group])),
                        "phases_settled": float(np.mean([r["phases_settled"] for r in group])),
                        "phases_without_release": float(np.mean([r["phases_without_release"] for r in group])),
                        "excess_mean": float(means.mean()),
                        "excess_ci95": float(1.96 * spread.std(ddof=1) / math.sqrt(len(spread))),
                        "erm_excess": float(np.mean([r["erm_excess"] for r in group])),
                        "zero_model_excess": float(np.mean([r["zero_model_excess"] for r in group])),
                        "epsilon_spent": group[0]["epsilon_spent"], "draws": means if len(group) > 1 else group[0]["draws"],
                        "erm_draws": np.array([r["erm_excess"] for r in group])})
    return summary


def report(rows: list[dict]) -> None:
    rng = np.random.default_rng(0)
    summary = summarise(rows)
    slopes = []
    for algorithm in (*STRONG, "B0 (theta*(x))"):
        picked = sorted((r for r in summary if r["arm"] == "a" and r["algorithm"] == (algorithm if algorithm in STRONG
                                                                                     else "alg5")),
                        key=lambda r: r["n"] * r["m"])
        if len(picked) < 4:
            continue
        size = [r["n"] * r["m"] for r in picked]
        column, draws = ("excess_mean", "draws") if algorithm in STRONG else ("erm_excess", "erm_draws")
        low, high = bootstrap_log_slope(size, [r[draws] for r in picked], rng)
        slopes.append({"arm": "a", "algorithm": algorithm, "variable": "n m", "slope": log_slope(size, [r[column] for r in picked]),
                       "ci95_low": low, "ci95_high": high, "points": len(picked)})
    for regularization in ("paper", "balanced"):
        picked = sorted((r for r in summary if r["arm"] == "c" and r["regularization"] == regularization),
                        key=lambda r: r["n"])
        if len(picked) >= 3:
            low, high = bootstrap_log_slope([r["n"] for r in picked], [r["draws"] for r in picked], rng)
            slopes.append({"arm": "c", "algorithm": f"alg4_eq lambda {regularization}", "variable": "n (m = 10)",
                           "slope": log_slope([r["n"] for r in picked], [r["excess_mean"] for r in picked]),
                           "ci95_low": low, "ci95_high": high, "points": len(picked)})
    write_csv(HERE / "summary.csv", [{k: v for k, v in r.items() if k not in ("draws", "erm_draws")} for r in summary])
    write_csv(HERE / "slopes.csv", slopes)
    for r in summary:
        print(f"{r['arm']:>8} {r['algorithm']:>8} n {r['n']:>6} m {r['m']:>4} {r['regularization']:>8} "
              f"split {r['split']!s:>5} s {r['noise_scale']:<6g}{'' if r['dp'] == 'True' else ' (not DP)'}: "
              f"excess {r['excess_mean']:.3g} +- {r['excess_ci95']:.2g} ({r['trials']} trials), ERM {r['erm_excess']:.3g}, "
              f"T {r['phases']}, lambda {r['lambda']:.3g}, R' {r['localization_radius']:.3g}, "
              f"localized {r['localized']:g}, settled {r['phases_settled']:.1f}, eps spent {r['epsilon_spent']:g}")
    for s in slopes:
        print(f"slope {s['algorithm']} in {s['variable']}: {s['slope']:.2f} [{s['ci95_low']:.2f}, {s['ci95_high']:.2f}]")
    figure(summary, HERE / "figure.png")


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    ax = axes[0]
    for algorithm, color in zip(STRONG, ("C0", "C1", "C2")):
        picked = sorted((r for r in rows if r["arm"] == "a" and r["algorithm"] == algorithm), key=lambda r: r["n"] * r["m"])
        ax.errorbar([r["n"] * r["m"] for r in picked], [r["excess_mean"] for r in picked],
                    [r["excess_ci95"] for r in picked], fmt="o-", color=color, label=f"{algorithm} (s = 1e-12)")
    picked = sorted((r for r in rows if r["arm"] == "a" and r["algorithm"] == "alg5"), key=lambda r: r["n"] * r["m"])
    ax.plot([r["n"] * r["m"] for r in picked], [r["erm_excess"] for r in picked], "k:", label="B0: theta*(x)")
    ax.set(xscale="log", yscale="log", xlabel="items n m", ylabel="population excess risk", title="a: rates (not DP)")
    ax.legend(fontsize=7)
    ax = axes[1]
    for (algorithm, scale), style in zip(((a, s) for a in ("alg6", "alg6_eq") for s in (1e-6, 1e-9)),
                                         ("o-", "o--", "s-", "s--")):
        picked = sorted((r for r in rows if r["arm"] == "b" and r["algorithm"] == algorithm and r["noise_scale"] == scale),
                        key=lambda r: r["m"])
        ax.plot([r["m"] for r in picked], [r["excess_mean"] for r in picked], style,
                color="C1" if algorithm == "alg6" else "C2", label=f"{algorithm}, s = {scale:g}")
    ax.set(xscale="log", yscale="log", xlabel="items per user m (n = 1e4)", ylabel="population excess risk",
           title="b: literal Phased-SCO against EQ (not DP)")
    ax.legend(fontsize=7)
    ax = axes[2]
    for regularization, color in (("paper", "C3"), ("balanced", "C0")):
        picked = sorted((r for r in rows if r["arm"] == "c" and r["regularization"] == regularization), key=lambda r: r["n"])
        ax.errorbar([r["n"] for r in picked], [r["excess_mean"] for r in picked], [r["excess_ci95"] for r in picked],
                    fmt="o-", color=color, label=f"lambda {regularization}")
    picked = sorted((r for r in rows if r["arm"] == "c" and r["regularization"] == "balanced"), key=lambda r: r["n"])
    ax.plot([r["n"] for r in picked], [r["erm_excess"] for r in picked], "k:", label="B0: theta*(x)")
    ax.set(xscale="log", yscale="log", xlabel="users n (m = 10)", ylabel="population excess risk",
           title="c: convex Phased-SCO-EQ, s = 1e-12 (not DP)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--report" in sys.argv:
        report(read_results(HERE / "results.csv"))
    else:
        main()
