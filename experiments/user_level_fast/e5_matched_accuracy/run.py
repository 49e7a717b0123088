"""E5 (seed-002 spec §4.4, the headline): gradient evaluations to reach a matched accuracy, Alg. 3
against full-batch filtered DP-GD (B2) and the ablations A1 (every user of a phase in every step,
no subsampling) and A2 (projected SGD instead of AC-SA in each phase).

P1 (SphereRegression, the half squared loss, d = 10), eps = 4 and delta = 1 / (10 n m), every arm
under the exploratory profile kappa = 1e-3 (the same nominal eps and the same filter for all
four), (n, m) in {2,000; 8,000} x {16; 64}, 8 repetitions. Each arm runs a grid of its compute
knob, so each cell gives a compute-accuracy frontier:
- alg3, a1, a2: c_T (T_i = c_T (1 + sqrt(beta / lambda_i)) ln(n d m); A2: beta / lambda_i) and
  c_tau in {0.25, 1};
- b2: T in {5, 10, 20, 40, 80} steps over all n users and c_tau in {0.25, 1}, step 1 / beta.
For each target excess risk (0.01, 0.005, 0.002; the zero model has 0.0125), the fewest mean
gradient evaluations of a setting whose mean excess risk reaches the target (on the evaluation
draw: a frontier of compute against accuracy, not a tuned privacy claim), and the wall time of
that run (inline, one process).

Writes results.csv (every run), matched.csv (per cell, arm and target) and figure.png; ``--report``
redoes matched.csv and figure.png from results.csv without running anything.

    python experiments/user_level_fast/e5_matched_accuracy/run.py [--report]
"""

from __future__ import annotations

import csv
import importlib.util
import itertools
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("e3_risk_vs_m", HERE.parent / "e3_risk_vs_m" / "run.py")
e3 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(e3)

from fedray.compose import compose_plan  # noqa: E402
from fedray.runtime.driver import run  # noqa: E402

CELLS = tuple(itertools.product((2_000, 8_000), (16, 64)))
EPSILON, THRESHOLDS = 4.0, (0.25, 1.0)
STEPS_CONSTANTS = {"alg3": (0.25, 1.0, 4.0), "a1": (0.25, 1.0, 4.0), "a2": (0.25, 1.0)}
B2_ROUNDS = (5, 10, 20, 40, 80)
TARGETS = (0.01, 0.005, 0.002)
ARMS = ("alg3", "a1", "a2", "b2")


def settings(arm: str) -> list[dict]:
    if arm == "b2":
        return [{"rounds": t, "threshold_constant": c} for t, c in itertools.product(B2_ROUNDS, THRESHOLDS)]
    return [{"steps_constant": s, "threshold_constant": c} for s, c in itertools.product(STEPS_CONSTANTS[arm], THRESHOLDS)]


def overrides(arm: str, setting: dict) -> list[str]:
    if arm == "b2":
        return ["algorithm=filtered_gd", "participation=all", f"num_rounds={setting['rounds']}", *e3.EXPLORATORY,
                f"algorithm.threshold_constant={setting['threshold_constant']}"]
    extra = {"alg3": [], "a1": ["algorithm.full_batch=true"], "a2": ["algorithm.solver=sgd"]}[arm]
    return [*e3.EXPLORATORY, f"algorithm.steps_constant={setting['steps_constant']}",
            f"algorithm.threshold_constant={setting['threshold_constant']}", *extra]


def run_one(arm: str, n: int, m: int, setting: dict) -> dict:
    plan = compose_plan([*e3.base(m, EPSILON, 0, n), *overrides(arm, setting)])
    started = time.perf_counter()
    result = run(plan, inline=True)
    seconds = time.perf_counter() - started
    risk = e3.excess(plan, result.model)
    last = result.history[-1]
    row = {"arm": arm, "n": n, "m": m, "nm": n * m, **setting, "excess_mean": float(risk.mean()),
           "halt_rate": float(np.mean(last["halted"])), "gradients_mean": float(np.mean(last["gradient_evaluations"])),
           "seconds": round(seconds, 2)}
    print(", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    return row


def matched(rows: list[dict]) -> list[dict]:
    out = []
    for (n, m), arm, target in itertools.product(CELLS, ARMS, TARGETS):
        reached = [r for r in rows if r["arm"] == arm and r["n"] == n and r["m"] == m and r["excess_mean"] <= target]
        best = min(reached, key=lambda r: r["gradients_mean"]) if reached else None
        out.append({"n": n, "m": m, "nm": n * m, "arm": arm, "target": target,
                    "gradients": best["gradients_mean"] if best else float("nan"),
                    "seconds": best["seconds"] if best else float("nan"),
                    "setting": " ".join(f"{k}={best[k]}" for k in ("steps_constant", "rounds", "threshold_constant")
                                        if k in best) if best else "not reached"})
    return out


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {"alg3": "Alg. 3", "a1": "A1: K_i = n_i (x: on Alg. 3 where K_i = n_i already)", "a2": "A2: SGD phases", "b2": "B2: filtered DP-GD"}
    fig, axes = plt.subplots(1, len(CELLS), figsize=(14, 3.8), sharey=True)
    for ax, (n, m) in zip(axes, CELLS):
        for arm, label in labels.items():
            picked = sorted((r for r in rows if r["arm"] == arm and r["n"] == n and r["m"] == m),
                            key=lambda r: r["gradients_mean"])
            ax.plot([r["gradients_mean"] for r in picked], [r["excess_mean"] for r in picked],
                    "x" if arm == "a1" else "o", label=label, alpha=0.8)
        for target in TARGETS:
            ax.axhline(target, color="grey", ls=":", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel="gradient evaluations (mean)", title=f"n = {n:,}, m = {m}")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0].set_ylabel(f"excess risk (eps = {EPSILON:g} nominal)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    started = time.perf_counter()
    rows = [run_one(arm, n, m, setting) for (n, m), arm in itertools.product(CELLS, ARMS) for setting in settings(arm)]
    e3.write_csv(HERE / "results.csv", rows)
    table = matched(rows)
    e3.write_csv(HERE / "matched.csv", table)
    for row in table:
        print(row)
    figure(rows, HERE / "figure.png")
    print(f"wall time {time.perf_counter() - started:.1f} s")


def read_results(path: Path) -> list[dict]:
    numbers = ("excess_mean", "gradients_mean", "seconds")
    return [{**r, **{k: float(r[k]) for k in numbers}, "n": int(r["n"]), "m": int(r["m"])}
            for r in csv.DictReader(open(path))]


if __name__ == "__main__":
    if "--report" in sys.argv:         # matched.csv and the figure again from results.csv, no runs
        rows = read_results(HERE / "results.csv")
        e3.write_csv(HERE / "matched.csv", matched(rows))
        figure(rows, HERE / "figure.png")
    else:
        main()
