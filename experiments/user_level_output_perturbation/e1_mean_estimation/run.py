"""E1 (seed-003 spec §4): user-level mean estimation by SCOutputPert on sufficient statistics,
and its crossover against output perturbation with the global sensitivity (B1).

Items z in {-1/sqrt(d), +1/sqrt(d)}^d, coordinate biases p_k ~ U(0.3, 0.7); n users of m items
each, held as their exact mean item (``data=user_means``: Binomial counts, m up to 10^13 at O(n d)
cost). Item loss (1/2)||theta - z||^2 on K = B(0, 1): G = 2, mu = 1 (``Linear`` loss + the ridge
term). delta = 1e-5, beta = 1e-3, eps in {0.5, 1}, n in {300, 1e3, 3e3, 1e4, 3e4, 1e5}, m in
10^{0..13}, d in {1, 10, 100}; 20 replicas per cell (independent output noise and deletion
budgets on one data draw). Every cell, arms included, has its own seed (its index in the grid):
data and noise are independent between cells, so slopes and crossovers carry sampling error
instead of repeating sigma's formula through shared draws.

Arms:
- exact: SCOutputPert, exact mode (d = 1): Delta_{4 kappa} of the mean by its sorted formula,
  against Delta_exact (Thm 3.6 with a union bound);
- cert: SCOutputPert, certificate mode (any d): the per-user gradient certificate (App. C);
- b1: the mean released with the analytic Gaussian for the global user-level sensitivity 2 / n
  (``output_perturbation``, lambda = 1, the tight mean baseline).
Refused cells (n < N0 = 8 kappa + 2: 226 users at eps = 1, 426 at eps = 0.5) are rows with the
refusal. A run that releases nothing scores the worst case, error = diam K = 2.

Reported per cell: the mean error ||thetahat - abar|| (abar the users' mean, i.e. the ERM) and
||thetahat - E z||, 95% t-intervals, the release rate, sigma, and the prediction sigma E||N(0, I_d)||.
Slopes of the error in m and in n; the crossover m against B1 (where the error ratio crosses 1,
log-log interpolation) next to the predicted (sigma_ours(m = 1) / sigma_B1)^2.

    python experiments/user_level_output_perturbation/e1_mean_estimation/run.py [--report]
"""

from __future__ import annotations

import csv
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import special, stats

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from experiments.report.tables import log_slope, write_csv  # noqa: E402
from fedray.compose import compose_plan  # noqa: E402
from fedray.errors import ConfigError  # noqa: E402
from fedray.runtime.driver import run  # noqa: E402

EPSILONS = (0.5, 1.0)
USERS = (300, 1_000, 3_000, 10_000, 30_000, 100_000)
ITEMS = tuple(10**k for k in range(14))
DIMS = (1, 10, 100)
REPLICAS, DIAMETER = 20, 2.0
ARMS = ("exact", "cert", "b1")


def overrides(arm: str, eps: float, n: int, m: int, d: int, seed: int) -> list[str]:
    common = ["data=user_means", f"seed={seed}", "privacy=central_user", "participation=all", "num_rounds=1",
              f"privacy.epsilon={eps}", f"data.spec.num_silos={n}", f"data.spec.items_per_user={m}",
              f"data.spec.dim={d}", f"repetitions={REPLICAS}", "progress=false"]
    if arm == "b1":
        return [*common, "algorithm=output_perturbation", "algorithm.regularization=1.0",
                "algorithm.gradient_tolerance=1e-12", "privacy.calibration=accountant"]
    if arm == "exact":          # Alg. 1 with the window search: DP (every cell here passes at s* = 0)
        return [*common, "algorithm=sc_output_pert", "algorithm.strong_convexity=1.0", "privacy.calibration=paper",
                "algorithm.mode=exact"]
    # certificate mode's search is out of reach at these n: it aborts on a failed check, NOT DP
    return [*common, "algorithm=sc_output_pert", "algorithm.strong_convexity=1.0", "privacy.calibration=paper",
            "algorithm.mode=certificate", "algorithm.on_unstable=abort_not_private"]


def gaussian_norm_mean(d: int) -> float:
    """E||N(0, I_d)|| = sqrt(2) Gamma((d + 1) / 2) / Gamma(d / 2)."""
    return math.sqrt(2.0) * math.exp(special.gammaln((d + 1) / 2) - special.gammaln(d / 2))


def interval(values: np.ndarray) -> float:
    return float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def run_cell(arm: str, eps: float, n: int, m: int, d: int, seed: int = 0) -> dict:
    row = {"arm": arm, "epsilon": eps, "n": n, "m": m, "d": d, "seed": seed}
    try:
        plan = compose_plan(overrides(arm, eps, n, m, d, seed))
    except ConfigError as err:
        return {**row, "refused": str(err)}
    result = run(plan, inline=True)
    users = plan.dataset.load(plan.seed, plan.trial).x_train[:, 0, :]
    erm, population = users.mean(axis=0), plan.dataset.population_mean(plan.seed, plan.trial)
    released = result.model[:, :, 0]
    last = result.history[-1]
    passed = np.asarray(last.get("released", np.ones(REPLICAS)), dtype=bool)
    error = np.where(passed, np.linalg.norm(released - erm, axis=1), DIAMETER)
    error_population = np.where(passed, np.linalg.norm(released - population, axis=1), DIAMETER)
    sigma = float(np.asarray(last["noise_std"])[0]) if "noise_std" in last else float(plan.resolved["noise_std_max"])
    return {**row, "error_mean": float(error.mean()), "error_ci95": interval(error),
            "population_error_mean": float(error_population.mean()), "population_error_ci95": interval(error_population),
            "release_rate": float(passed.mean()), "sigma": sigma, "predicted_error": sigma * gaussian_norm_mean(d),
            "sampling_error": float(np.linalg.norm(erm - population)), "refused": ""}


def cells():
    for eps, n, d, m in itertools.product(EPSILONS, USERS, DIMS, ITEMS):
        for arm in ARMS:
            if arm == "exact" and d != 1:
                continue
            yield arm, eps, n, m, d


def main() -> None:
    started = time.perf_counter()
    rows = []
    for seed, (arm, eps, n, m, d) in enumerate(cells()):
        rows.append(run_cell(arm, eps, n, m, d, seed))
        if len(rows) % 50 == 0:
            print(f"{len(rows)} cells, {time.perf_counter() - started:.0f} s", flush=True)
    write_csv(HERE / "results.csv", rows)
    report(read_results(HERE / "results.csv"))
    print(f"wall time {time.perf_counter() - started:.1f} s")




def read_results(path: Path) -> list[dict]:
    rows = []
    for r in csv.DictReader(open(path)):
        row = {**r, "epsilon": float(r["epsilon"]), "n": int(r["n"]), "m": int(r["m"]), "d": int(r["d"])}
        if not r["refused"]:
            row.update({k: float(r[k]) for k in ("error_mean", "error_ci95", "population_error_mean", "release_rate",
                                                 "sigma", "predicted_error", "sampling_error")})
        rows.append(row)
    return rows



def _bootstrap_slope(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, draws: int = 2000) -> tuple:
    picks = rng.integers(0, len(x), (draws, len(x)))
    slopes = [log_slope(x[p], y[p]) for p in picks if len(set(x[p])) > 1]
    return tuple(float(q) for q in np.percentile(slopes, [2.5, 97.5]))


def crossover(ms: np.ndarray, ratio: np.ndarray) -> float:
    """The m where the error ratio (ours / B1) first falls below 1, log-log interpolated; nan if
    it never crosses inside the grid."""
    below = np.nonzero(ratio < 1)[0]
    if below.size == 0 or below[0] == 0:
        return float("nan")
    i = below[0]
    lo, hi = np.log(ms[i - 1]), np.log(ms[i])
    t = np.log(ratio[i - 1]) / (np.log(ratio[i - 1]) - np.log(ratio[i]))
    return float(np.exp(lo + t * (hi - lo)))


def report(rows: list[dict]) -> None:
    """slopes.csv, crossover.csv and figure.png from the cells' rows."""
    ran = [r for r in rows if not r["refused"]]
    rng = np.random.default_rng(0)
    slopes, crossings = [], []
    for arm, eps, d in itertools.product(ARMS, EPSILONS, DIMS):
        for n in USERS:               # slope in m at fixed n, over the cells that released
            picked = [r for r in ran if (r["arm"], r["epsilon"], r["d"], r["n"]) == (arm, eps, d, n)
                      and r["release_rate"] == 1.0]
            if len(picked) >= 4:
                x, y = np.array([r["m"] for r in picked], float), np.array([r["error_mean"] for r in picked])
                slopes.append({"arm": arm, "epsilon": eps, "d": d, "fixed": f"n={n}", "variable": "m",
                               "slope": log_slope(x, y), "ci95": "%.3f..%.3f" % _bootstrap_slope(x, y, rng)})
        for m in (1, 10**6, 10**12):  # slope in n at fixed m
            picked = [r for r in ran if (r["arm"], r["epsilon"], r["d"], r["m"]) == (arm, eps, d, m)
                      and r["release_rate"] == 1.0]
            if len(picked) >= 4:
                x, y = np.array([r["n"] for r in picked], float), np.array([r["error_mean"] for r in picked])
                slopes.append({"arm": arm, "epsilon": eps, "d": d, "fixed": f"m={m}", "variable": "n",
                               "slope": log_slope(x, y), "ci95": "%.3f..%.3f" % _bootstrap_slope(x, y, rng)})
        if arm == "b1":
            continue
        for n in USERS:
            ours = {r["m"]: r for r in ran if (r["arm"], r["epsilon"], r["d"], r["n"]) == (arm, eps, d, n)}
            base = {r["m"]: r for r in ran if (r["arm"], r["epsilon"], r["d"], r["n"]) == ("b1", eps, d, n)}
            common = sorted(set(ours) & set(base))
            if not common:
                continue
            ms = np.array(common, float)
            ratio = np.array([ours[m]["error_mean"] / base[m]["error_mean"] for m in common])
            predicted = (ours[common[0]]["sigma"] * math.sqrt(common[0]) / base[common[0]]["sigma"]) ** 2
            crossings.append({"arm": arm, "epsilon": eps, "d": d, "n": n, "crossover_m": crossover(ms, ratio),
                              "predicted_m": predicted})
    write_csv(HERE / "slopes.csv", slopes)
    write_csv(HERE / "crossover.csv", crossings)
    figure(ran, HERE / "figure.png")
    for c in crossings:
        print(f"{c['arm']} eps {c['epsilon']:g} d {c['d']} n {c['n']}: crossover m {c['crossover_m']:.3g} "
              f"(predicted {c['predicted_m']:.3g})")


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    styles = {"exact": "-", "cert": "--", "b1": ":"}
    names = {"exact": "SCOutputPert exact", "cert": "SCOutputPert certificate", "b1": "B1 global sensitivity"}
    eps, n0, m0 = EPSILONS[-1], USERS[min(1, len(USERS) - 1)], ITEMS[len(ITEMS) // 2]
    for arm in ARMS:        # error against m, eps = 1, n = 1,000, each d
        for d, color in zip(DIMS, ("C0", "C1", "C2")):
            picked = [r for r in rows if (r["arm"], r["epsilon"], r["n"], r["d"]) == (arm, eps, n0, d)]
            if picked:
                axes[0].plot([r["m"] for r in picked], [r["error_mean"] for r in picked], styles[arm], color=color,
                             marker=".", label=f"{names[arm]}, d={d}")
    axes[0].set(xscale="log", yscale="log", xlabel="items per user m", ylabel="||thetahat - abar||",
                title=f"eps = {eps:g}, n = {n0:,}")
    axes[0].legend(fontsize=6)
    for arm in ARMS:        # error against n, d = 1
        picked = [r for r in rows if (r["arm"], r["epsilon"], r["m"], r["d"]) == (arm, eps, m0, 1)]
        axes[1].plot([r["n"] for r in picked], [r["error_mean"] for r in picked], styles[arm], marker=".",
                     label=names[arm])
    axes[1].set(xscale="log", yscale="log", xlabel="users n", title=f"eps = {eps:g}, m = {m0:.0e}, d = 1")
    axes[1].legend(fontsize=7)
    for arm in ARMS:        # measured / predicted error
        picked = [r for r in rows if r["arm"] == arm and r["release_rate"] == 1.0 and r["predicted_error"] > 0]
        axes[2].scatter([r["m"] for r in picked], [r["error_mean"] / r["predicted_error"] for r in picked], s=4,
                        label=names[arm])
    axes[2].set(xscale="log", xlabel="items per user m", ylabel="mean error / (sigma E||N(0, I_d)||)",
                title="every released cell")
    axes[2].axhline(1.0, color="grey", lw=0.8)
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--report" in sys.argv:
        report(read_results(HERE / "results.csv"))
    else:
        main()
