"""E7 (seed-002 spec §4.4): robustness of Alg. 3's outlier removal, and an audit against one
adversarial user.

P3 on P1 (SphereRegression, d = 10, n = 4,000 users of m = 64 items): a minority (the users with
id < ceil(rho n); phases are cut from a permutation of the ids, so every phase holds about rho of
them) learns w* + shift u (u orthogonal to w*), rho in {0, 0.05, 0.1, 0.2, 0.35}, shift in {1, 10,
30}; and one adversarial user of phase 1 whose labels are all 1e6. Alg. 3 under the exploratory profile
(kappa = 1e-3, eps = 20 nominal, so the noise does not hide what the filter does; c_tau = 0.25:
tau = 0.93, so the majority's gradients (spread
~ L / sqrt(m)) are close and a minority whose gradients differ by ~ shift / d is removed once that
passes 2 tau), 8 repetitions; the same cell without privacy (no test, no filter) shows what the
minority does to an unfiltered mean. Reported per cell: the halt rate (released), the removal rate
1 - mean kept fraction over the steps run (diagnostic: the filter's count reads the data), and the
majority's excess risk ||x - w*||^2 / (2 d).

Audit (spec T14): D and D' differ in one user of phase 1 (labels 1e6 in D'); Alg. 3 under the printed
constants (profile P) at n = 1,000, m = 16, d = 5, eps = 1, run DRAWS times on each
(``fedray.privacy.audit.audit_epsilon``: projection statistic fitted on half, Clopper-Pearson at
95% on the other half); the control is the same pair without privacy.

Writes results.csv, audit.csv and figure.png next to this file; ``--report`` redraws figure.png
from results.csv without running anything.

    python experiments/user_level_fast/e7_robustness/run.py [--report]
"""

from __future__ import annotations

import csv
import itertools
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from fedray.compose import compose_plan  # noqa: E402
from fedray.privacy.audit import audit_epsilon  # noqa: E402
from fedray.runtime.driver import run  # noqa: E402

FRACTIONS, SHIFTS = (0.0, 0.05, 0.1, 0.2, 0.35), (1.0, 10.0, 30.0)
BASE = ["experiment=user_level_sphere", "data.spec.num_silos=4000", "data.spec.samples_per_silo=64",
        "data.spec.dim=10", "repetitions=8", "privacy.epsilon=20", "privacy.delta=3.9e-7", "progress=false",
        "evaluate_every=1000000000", "algorithm.threshold_constant=0.25"]
EXPLORATORY = ["algorithm.profile=exploratory", "algorithm.kappa=1e-3"]
AUDIT = ["experiment=user_level_sphere", "data.spec.num_silos=1000", "data.spec.samples_per_silo=16",
         "data.spec.dim=5", "privacy.epsilon=1", "privacy.delta=1e-7", "progress=false", "evaluate_every=1000000000"]
DRAWS = 2000


def first_phase_user(overrides: list[str]) -> int:
    """The smallest id in phase 1 under ``overrides``' seed (phases are cut from a permutation of
    the ids keyed by the seed): the adversary must be read by the run to test anything."""
    plan = compose_plan(overrides)
    return int(np.flatnonzero(plan.sampler.members(plan.seed, plan.shape.num_silos) == 0)[0])


def cell(overrides: list[str]) -> dict:
    plan = compose_plan([*BASE, *overrides])
    result = run(plan, inline=True)
    risk = plan.dataset.excess_risk(result.model, plan.dataset.optimum(plan.seed, plan.trial), "squared")
    kept = np.array([h["kept_fraction"] for h in result.history])               # (rounds, P), NaN once halted
    return {"excess_mean": float(risk.mean()), "excess_max": float(risk.max()),
            "halt_rate": float(result.history[-1]["halted"].mean()) if "halted" in result.history[-1] else 0.0,
            "removal_rate": float(1 - np.nanmean(kept))}


def robustness_rows() -> list[dict]:
    rows = []
    grid = [(0.0, 0.0)] + [(rho, shift) for rho, shift in itertools.product(FRACTIONS[1:], SHIFTS)]
    for (rho, shift), private in itertools.product(grid, (True, False)):
        data = [f"+data.spec.shifted_fraction={rho}", f"+data.spec.shift={shift}"]
        row = {"case": "minority", "fraction": rho, "shift": shift, "private": private,
               **cell([*data, *(EXPLORATORY if private else ["privacy=none"])])}
        rows.append(row)
        print(", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    victim = first_phase_user(BASE)
    for private in (True, False):
        adversary = [f"data.spec.adversary={victim}", "data.spec.adversarial_label=1e6"]
        row = {"case": "one adversarial user", "fraction": 1 / 4000, "shift": float("nan"), "private": private,
               **cell([*adversary, *(EXPLORATORY if private else ["privacy=none"])])}
        rows.append(row)
        print(", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    return rows


def released(adversary: bool, draws: int, seed: int, overrides: list[str]) -> np.ndarray:
    run_of = [*AUDIT, f"repetitions={draws}", f"seed={seed}", *overrides]
    neighbour = [f"data.spec.adversary={first_phase_user(run_of)}", "data.spec.adversarial_label=1e6"] if adversary \
        else []
    plan = compose_plan([*run_of, *neighbour])
    return run(plan, inline=True).model[:, :, 0]


def audit_rows() -> list[dict]:
    rows = []
    for name, overrides in (("Alg. 3, printed constants (eps = 1)", []), ("control: no privacy", ["privacy=none"])):
        result = audit_epsilon(lambda flag, num, rng: released(bool(flag), num, int(rng.integers(2**31)), overrides),
                               DRAWS, np.random.default_rng(0), delta=1e-7)
        rows.append({"arm": name, "draws_per_side": DRAWS, "eps_lower_95": float(result.eps_lower),
                     "fpr": float(result.fpr), "fnr": float(result.fnr)})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    started = time.perf_counter()
    for name, table in (("results.csv", robustness_rows()), ("audit.csv", audit_rows())):
        with open(HERE / name, "w", newline="") as f:
            writer = csv.DictWriter(f, list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    figure(read_rows(HERE / "results.csv"), HERE / "figure.png")
    print(f"wall time {time.perf_counter() - started:.1f} s")


def read_rows(path: Path) -> list[dict]:
    numbers = ("fraction", "shift", "excess_mean", "excess_max", "halt_rate", "removal_rate")
    return [{**r, **{k: float(r[k]) for k in numbers}, "private": r["private"] == "True"}
            for r in csv.DictReader(open(path))]


def figure(rows: list[dict], path: Path) -> None:
    """Per shift: the halt and removal rates, and the majority's excess risk with and without privacy,
    against the minority's fraction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rates, risk) = plt.subplots(1, 2, figsize=(11, 4))
    clean = [r for r in rows if r["case"] == "minority" and r["fraction"] == 0.0]
    for shift, colour in zip(SHIFTS, ("tab:blue", "tab:orange", "tab:green")):
        for private in (True, False):
            picked = [r for r in clean if r["private"] == private] + [
                r for r in rows if r["case"] == "minority" and r["shift"] == shift and r["private"] == private]
            x = [r["fraction"] for r in picked]
            if private:
                rates.plot(x, [r["halt_rate"] for r in picked], "o-", color=colour, label=f"halt rate, shift {shift:g}")
                rates.plot(x, [r["removal_rate"] for r in picked], "s--", color=colour,
                           label=f"removal rate, shift {shift:g}")
            risk.plot(x, [r["excess_mean"] for r in picked], "o-" if private else "x:", color=colour,
                      label=f"shift {shift:g}, {'Alg. 3 (nominal eps = 20)' if private else 'no privacy, no filter'}")
    rates.set(xlabel="minority fraction rho", ylabel="rate", title="Alg. 3's test and filter (P3, n = 4,000)")
    risk.set(xlabel="minority fraction rho", ylabel="majority's excess risk", yscale="log",
             title="what the minority does to the output")
    rates.legend(fontsize=7)
    risk.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--report" in sys.argv:         # the figure again from results.csv, no runs
        figure(read_rows(HERE / "results.csv"), HERE / "figure.png")
    else:
        main()
