"""E2 (seed-002 spec §4.4, test T2): measured gradient evaluations against the calculator.

Every protocol's released counter (``gradient_evaluations``: a function of the public schedule
and the halting round) is compared, per replica, with the count the formulas give for the steps
the replica ran: Alg. 3 sum over executed steps of K_i m (sum_i T_i K_i m without a halt), A2 the
same with its own T_i, B2 T n m, B1 T K m. Grid: P1 (SphereRegression) with n in {1,000; 4,000;
16,000} users, m in {4, 16, 64}, d = 10, eps = 4 nominal under profile X (kappa = 1e-3, so K_i <
n_i in the first phases and the test can halt), 4 replicas. Each cell runs with 1 and with 3 silo
groups (inline); the counts, halting rounds and models must agree between the two.

Writes results.csv and figure.png next to this file and prints one line per cell; ``--report``
redraws figure.png from results.csv without running anything.

    python experiments/user_level_fast/e2_counts/run.py [--report]
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from fedray.compose import compose_plan  # noqa: E402
from fedray.core.sampling import phase_of  # noqa: E402
from fedray.runtime.driver import InlineGroups, run  # noqa: E402

USERS, ITEMS = (1_000, 4_000, 16_000), (4, 16, 64)
BASE = ["experiment=user_level_sphere", "data.spec.dim=10", "repetitions=4", "privacy.epsilon=4", "progress=false",
        "evaluate_every=1000000"]
EXPLORATORY = ["algorithm.profile=exploratory", "algorithm.kappa=1e-3"]
ARMS = {
    "alg3": EXPLORATORY,
    "a2_sgd": [*EXPLORATORY, "algorithm.solver=sgd"],
    "b2_full_batch": ["algorithm=filtered_gd", "participation=all", "num_rounds=50", *EXPLORATORY],
    "b1_user_dp_sgd": ["algorithm=user_dp_sgd", "participation=uniform", "participation.silos_per_round=100",
                       "num_rounds=50", "privacy.calibration=accountant"],
}


def expected(plan, arm: str, ran: np.ndarray) -> np.ndarray:
    """(P,) the formula's count for the steps each replica ran."""
    m = plan.protocol.resolved.get("items") or plan.shape.n_train[0]
    if arm in ("alg3", "a2_sgd"):
        steps, batch = plan.protocol.resolved["phase_steps"], plan.protocol.resolved["phase_batch"]
        per_step = np.array([batch[phase_of(steps, t)] for t in range(sum(steps))]) * m
        return np.array([per_step[:r].sum() for r in ran])
    per_round = plan.shape.num_silos if arm == "b2_full_batch" else plan.protocol.resolved["users_per_round"]
    return ran * per_round * m


def steps_run(history: list[dict], total: int) -> np.ndarray:
    """(P,) rounds each replica ran: up to and including its halting round."""
    if "halted" not in history[0]:
        return np.full(len(history[0]["gradient_evaluations"]), total)
    halted = np.array([h["halted"] for h in history])
    return np.where(halted[-1] > 0, np.argmax(halted > 0, axis=0) + 1, total)


def main() -> None:
    started = time.perf_counter()
    rows = []
    for n in USERS:
        for m in ITEMS:
            for arm, overrides in ARMS.items():
                plan = compose_plan([*BASE, f"data.spec.num_silos={n}", f"data.spec.samples_per_silo={m}",
                                     f"privacy.delta={1 / (10 * n * m)}", *overrides])
                one, three = (run(plan, inline=True, groups=InlineGroups(plan, k)) for k in (1, 3))
                ran = steps_run(one.history, plan.num_rounds)
                measured = one.history[-1]["gradient_evaluations"]
                formula = expected(plan, arm, ran)
                same_layout = bool(np.array_equal(one.model, three.model) and np.array_equal(
                    measured, three.history[-1]["gradient_evaluations"]))
                no_halt = plan.protocol.resolved.get("gradients_no_halt", plan.num_rounds * (
                    n if arm == "b2_full_batch" else plan.protocol.resolved.get("users_per_round", 0)) * m)
                row = {"arm": arm, "n": n, "m": m, "rounds": plan.num_rounds, "halted": int((ran < plan.num_rounds).sum()),
                       "measured_min": int(measured.min()), "measured_max": int(measured.max()),
                       "formula_no_halt": int(no_halt), "equal": bool(np.array_equal(measured, formula)),
                       "same_with_3_groups": same_layout}
                rows.append(row)
                print(", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    with open(HERE / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    figure(rows, HERE / "figure.png")
    print(f"cells {len(rows)}, all equal: {all(r['equal'] for r in rows)}, layout-invariant: "
          f"{all(r['same_with_3_groups'] for r in rows)}; wall time {time.perf_counter() - started:.1f} s")


def figure(rows: list[dict], path: Path) -> None:
    """Each cell's released counts (the range over its replicas) against the no-halt formula."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for arm in dict.fromkeys(r["arm"] for r in rows):
        picked = [r for r in rows if r["arm"] == arm]
        x = np.array([float(r["formula_no_halt"]) for r in picked])
        low, high = (np.array([float(r[k]) for r in picked]) for k in ("measured_min", "measured_max"))
        ax.errorbar(x, high, yerr=[high - low, np.zeros_like(high)], fmt="o", capsize=2, label=arm, alpha=0.8)
    span = [min(float(r["measured_min"]) for r in rows), max(float(r["formula_no_halt"]) for r in rows)]
    ax.plot(span, span, color="grey", lw=0.8, ls=":", label="counter = formula")
    ax.set(xscale="log", yscale="log", xlabel="formula: gradient evaluations of a run without halting",
           ylabel="released counter (replicas' range)",
           title=f"{sum(r['equal'] in (True, 'True') for r in rows)} of {len(rows)} cells equal the formula per replica")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--report" in sys.argv:         # the figure again from results.csv, no runs
        figure(list(csv.DictReader(open(HERE / "results.csv"))), HERE / "figure.png")
    else:
        main()
