"""E4 (seed-002 spec §4.4): excess population risk against the number of users n, on P1.

The arms, tuning and measurements of E3 (``../e3_risk_vs_m/run.py``: Alg. 3 under the exploratory
profile with c_tau tuned, Alg. 3 without privacy, the ERM (B0), user-level DP-SGD (B1) and
full-batch filtered DP-GD (B2), tuned per cell on a separate draw), at m = 64 items per user,
n in {2,000; 8,000; 32,000}, eps in {1, 4}, d = 10, 8 repetitions. Log-log slopes in n.

Writes results.csv, tuning.csv, slopes.csv and figure.png next to this file; ``--report`` redraws
figure.png from results.csv without running anything; ``--arms a,b`` runs only those arms and
replaces their rows (E3's ``alg1`` arm included).

    python experiments/user_level_fast/e4_risk_vs_n/run.py [--report | --arms alg1]
"""

from __future__ import annotations

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

USERS, ITEMS = (2_000, 8_000, 32_000), 64


def main(arms: tuple = e3.ARMS) -> None:
    started = time.perf_counter()
    rows, tuning = [], []
    for eps, n in itertools.product(e3.EPSILONS, USERS):
        threshold = None
        for arm in e3.ARMS:
            if arm in ("b0", "alg3_np") and eps != e3.EPSILONS[0]:
                continue
            if arm not in arms:
                if arm == "alg3":           # B2 takes Alg. 3's c_tau: read it back, do not rerun
                    threshold = e3.kept_threshold(HERE / "results.csv", "n", n, eps)
                continue
            row, tries, threshold = e3.run_cell(arm, ITEMS, eps, threshold, users=n)
            rows.append({"n": n, **row})
            tuning += [{"n": n, **t} for t in tries]
    e3.write_csv(HERE / "results.csv", e3.merged(HERE / "results.csv", rows, arms))
    e3.write_csv(HERE / "tuning.csv", e3.merged(HERE / "tuning.csv", tuning, arms))
    report([{**r, "n": int(r["n"])} for r in e3.read_results(HERE / "results.csv")])
    print(f"wall time {time.perf_counter() - started:.1f} s")


def report(rows: list[dict]) -> None:
    slopes = []
    for arm, eps in itertools.product(e3.ARMS, e3.EPSILONS):
        private = arm not in ("b0", "alg3_np")
        if not private and eps != e3.EPSILONS[0]:
            continue
        picked = [r for r in rows if r["arm"] == arm and (not private or r["epsilon"] == eps)]
        if len(picked) < 2:
            continue
        slope = float(np.polyfit(np.log([r["n"] for r in picked]), np.log([r["excess_mean"] for r in picked]), 1)[0])
        slopes.append({"arm": arm, "epsilon": eps if private else float("inf"), "slope_in_n": slope})
        print(f"{arm} eps {eps}: slope in n {slope:.3f}")
    e3.write_csv(HERE / "slopes.csv", slopes)
    figure(rows, HERE / "figure.png")


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(e3.EPSILONS), figsize=(10, 4), sharey=True)
    for ax, eps in zip(axes, e3.EPSILONS):
        for arm in e3.ARMS:
            picked = [r for r in rows if r["arm"] == arm and (arm in ("b0", "alg3_np") or r["epsilon"] == eps)]
            ax.errorbar([r["n"] for r in picked], [r["excess_mean"] for r in picked],
                        yerr=[r["ci95_half"] for r in picked], marker="o", capsize=3, label=arm)
        ax.axhline(0.25 / (2 * e3.DIM), color="grey", ls=":", lw=0.8, label="the zero model")
        ax.set(xscale="log", yscale="log", xlabel="users n", title=f"eps = {eps:g}, m = {ITEMS}, d = {e3.DIM}")
        ax.set_xticks(USERS, labels=[f"{n:,}" for n in USERS])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0].set_ylabel("excess population risk")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--report" in sys.argv:         # slopes and figure again from results.csv, no runs
        report([{**r, "n": int(r["n"])} for r in e3.read_results(HERE / "results.csv")])
    else:
        main(e3.arms_from_argv())
