"""E9 (seed 002, Remark 3.6): Alg. 3 restarted for a strongly convex risk, against one run of
Alg. 3, as the number of users n grows, on P1.

P1 and the measurement are E3's (``../e3_risk_vs_m/run.py``): m = 64 items per user, d = 10, the
excess risk ||x - w*||^2 / (2 d) in closed form, 8 repetitions per cell as replicas. P1's risk is
mu-strongly convex with mu = 1 / d = 0.1 (its per-item loss is not: Remark 3.6's reduction only
needs the risk's modulus), passed as ``algorithm.strong_convexity``. n in {2,000 .. 32,000}.

Arms:
- alg3_np / restart_np: Alg. 3 without privacy (its eps -> inf schedule), once and restarted;
- alg3 / restart: under the exploratory profile (kappa = 1e-3, eps = 4, NOMINAL: E3's setting),
  c_tau tuned per cell on a separate draw (trial 1, seed 1) over {0.25, 0.5, 1}, each arm for itself;
- b0: the ERM on all n m records (E3's B0, the statistical floor).
Remark 3.6 predicts (L^2 / mu) O~(1 / (n m) + d ln(1 / delta) / (eps^2 n^2 m)): a slope of -1 in n
where the statistical term rules. Log-log slopes in n of the mean excess risk per arm.

Writes results.csv, tuning.csv, slopes.csv and figure.png next to this file; ``--report`` redraws
slopes.csv and figure.png from results.csv without running anything.

    python experiments/user_level_fast/e9_strongly_convex/run.py [--report]
"""

from __future__ import annotations

import csv
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("e3_risk_vs_m", HERE.parent / "e3_risk_vs_m" / "run.py")
e3 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(e3)

USERS, ITEMS, EPSILON = (2_000, 4_000, 8_000, 16_000, 32_000), 64, 4.0
MU = 1 / e3.DIM
ARMS = ("alg3_np", "restart_np", "alg3", "restart", "b0")
RESTART = [f"algorithm.strong_convexity={MU}"]
PRIVATE = ("alg3", "restart")


def overrides(arm: str, setting: dict) -> list[str]:
    inner = "alg3_np" if arm.endswith("_np") else "alg3" if arm in PRIVATE else arm
    return e3.arm_overrides(inner, setting) + (RESTART if arm.startswith("restart") else [])


def tune(arm: str, n: int) -> tuple[dict, list[dict]]:
    """c_tau with the best mean excess risk on the proxy draw (trial 1), and every try."""
    tries = []
    for c in e3.ALG3_THRESHOLDS:
        plan = e3.compose_plan([*e3.base(ITEMS, EPSILON, 1, n), *overrides(arm, {"threshold_constant": c})])
        risk = e3.excess(plan, e3.run(plan, inline=True).model)
        tries.append({"arm": arm, "n": n, "threshold_constant": c, "proxy_excess": float(risk.mean())})
    best = min(tries, key=lambda t: t["proxy_excess"])
    return {"threshold_constant": best["threshold_constant"]}, tries


def run_cell(arm: str, n: int) -> tuple[dict, list[dict]]:
    setting, tries = tune(arm, n) if arm in PRIVATE else ({}, [])
    plan = e3.compose_plan([*e3.base(ITEMS, EPSILON, 0, n), *overrides(arm, setting)])
    started = time.perf_counter()
    result = e3.run(plan, inline=True)
    resolved = plan.protocol.resolved
    row = {"arm": arm, "n": n, "epsilon": EPSILON if arm in PRIVATE else float("inf"),
           **e3.summary(e3.excess(plan, result.model), result.history[-1]),
           "runs": resolved.get("runs", 1), "run_radii": " ".join(f"{r:.4g}" for r in resolved.get("run_radii", [])),
           "setting": " ".join(f"{k}={v}" for k, v in setting.items()), "nominal": arm in PRIVATE,
           "seconds": time.perf_counter() - started}
    print(", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    return row, tries


def main() -> None:
    started = time.perf_counter()
    rows, tuning = [], []
    for n in USERS:
        for arm in ARMS:
            row, tries = run_cell(arm, n)
            rows.append(row)
            tuning += tries
    e3.write_csv(HERE / "results.csv", rows)
    e3.write_csv(HERE / "tuning.csv", tuning)
    report(read_results(HERE / "results.csv"))
    print(f"wall time {time.perf_counter() - started:.1f} s")


def read_results(path: Path) -> list[dict]:
    numbers = ("epsilon", "excess_mean", "ci95_half", "halt_rate", "gradients_mean")
    return [{**r, **{k: float(r[k]) for k in numbers}, "n": int(r["n"]), "runs": int(r["runs"])}
            for r in csv.DictReader(open(path))]


def report(rows: list[dict]) -> None:
    slopes = []
    for arm in ARMS:
        picked = [r for r in rows if r["arm"] == arm]
        slope = float(np.polyfit(np.log([r["n"] for r in picked]), np.log([r["excess_mean"] for r in picked]), 1)[0])
        slopes.append({"arm": arm, "slope_in_n": slope})
        print(f"{arm}: slope in n {slope:.3f}")
    for n in USERS:
        cell = {r["arm"]: r for r in rows if r["n"] == n}
        print(f"n {n}: restart / alg3 without privacy {cell['restart_np']['excess_mean'] / cell['alg3_np']['excess_mean']:.2f}"
              f", nominal {cell['restart']['excess_mean'] / cell['alg3']['excess_mean']:.2f}; gradients "
              f"{cell['restart_np']['gradients_mean'] / cell['alg3_np']['gradients_mean']:.2f}x; "
              f"runs {cell['restart_np']['runs']}")
    e3.write_csv(HERE / "slopes.csv", slopes)
    figure(rows, HERE / "figure.png")


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {"alg3_np": "Alg. 3 without privacy", "restart_np": "Alg. 3 restarted (Remark 3.6), without privacy",
              "alg3": "Alg. 3 (exploratory: nominal eps = 4)", "restart": "restarted (exploratory: nominal eps = 4)",
              "b0": "B0: the ERM on all records"}
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for arm, label in labels.items():
        picked = [r for r in rows if r["arm"] == arm]
        ax.errorbar([r["n"] for r in picked], [r["excess_mean"] for r in picked],
                    yerr=[r["ci95_half"] for r in picked], marker="o", capsize=3, label=label,
                    ls="--" if arm.startswith("restart") else "-")
    ax.axhline(0.25 / (2 * e3.DIM), color="grey", ls=":", lw=0.8, label="the zero model")
    ax.set(xscale="log", yscale="log", xlabel="users n", ylabel="excess population risk",
           title=f"P1, m = {ITEMS}, d = {e3.DIM}, mu = {MU:g}")
    ax.set_xticks(USERS, labels=[f"{n:,}" for n in USERS])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--report" in sys.argv:
        report(read_results(HERE / "results.csv"))
    else:
        main()
