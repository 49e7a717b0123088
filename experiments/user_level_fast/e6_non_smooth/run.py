"""E6 (seed-002 spec §4.4): a non-smooth loss, Alg. 3 through randomized smoothing (Thm D.3) against
full-batch filtered DP-GD on subgradients (B2), user-level DP-SGD (B1) and the non-private ERM (B0).

The problem is P1's data with the absolute loss |<a, x> - b| (1-Lipschitz on the unit sphere;
every per-record loss is non-smooth): ``SphereRegression.excess_risk(..., "absolute")`` is the
population excess risk in closed form (incomplete beta functions). It replaces the spec's P2 (the
l1 distance ||x - z||_1 / sqrt(d), which is not a linear model: fedray's smoothing draws one scalar
per record, exact for linear models only). d = 10, m = 64, n in {2,000; 8,000}, eps = 4, delta =
1 / (10 n m), 8 repetitions per cell.

Arms:
- alg3s: Alg. 3 with ``algorithm.smoothing=true`` (gradients at x + y, y uniform in B(0, r), r =
  sqrt(d) R / (eps n sqrt m), beta_r = (L / R) eps n sqrt m), exploratory profile kappa = 1e-3
  (NOMINAL eps), c_T = 0.01 (c_T = 0.1 halts every replica: 10x the steps with a third of the
  users per step), c_tau = 1; not tuned (a run at n = 8,000 costs minutes);
- b2: full-batch filtered DP-GD on subgradients (exploratory, nominal eps), T in {10, 40} and the
  step in {0.1, 0.5} tuned on a separate draw;
- b1: user-level DP-SGD with the RDP accountant (formal eps), tuned as in E3;
- b0: full-batch subgradient descent without privacy, 400 steps, average iterate, the step in
  {0.05, 0.2} tuned.

Also Lemma D.1 (in the order that holds for a convex f: f <= f_r <= f + L r): F_r(x) = E F(x + y),
y uniform in B(0, r), by Monte Carlo (20,000 antithetic pairs y, -y) at 20 random points of X for r in {0.01, 0.1,
0.5}, against F from the closed form; and the gradient count of alg3s against n.

Writes results.csv, tuning.csv, smoothing.csv and figure.png next to this file; ``--report``
redraws figure.png from results.csv without running anything.

    python experiments/user_level_fast/e6_non_smooth/run.py [--report]
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
from fedray.data import SphereRegression  # noqa: E402
from fedray.runtime.driver import run  # noqa: E402

USERS, ITEMS, DIM, EPSILON, REPETITIONS = (2_000, 8_000), 64, 10, 4.0, 8
ABSOLUTE = ["data.loss._target_=fedray.smoothing.Absolute", "algorithm.lipschitz=1.0"]
ARMS = ("alg3s", "b2", "b1", "b0")
RADII, POINTS, DRAWS = (0.01, 0.1, 0.5), 20, 20_000


def base(n: int, trial: int) -> list[str]:
    return ["experiment=user_level_sphere", f"data.spec.num_silos={n}", f"data.spec.samples_per_silo={ITEMS}",
            f"data.spec.dim={DIM}", f"repetitions={REPETITIONS}", f"privacy.epsilon={EPSILON}",
            f"privacy.delta={1 / (10 * n * ITEMS)}", f"trial={trial}", f"seed={trial}", "progress=false",
            "evaluate_every=1000000000"]


def arm_overrides(arm: str, setting: dict) -> list[str]:
    if arm == "alg3s":
        return [*e3.EXPLORATORY, "algorithm.smoothing=true", "algorithm.steps_constant=0.01", *ABSOLUTE]
    if arm == "b2":
        return ["algorithm=filtered_gd", "participation=all", f"num_rounds={setting['rounds']}", *e3.EXPLORATORY,
                f"algorithm.step_size={setting.get('step_size', [0.1, 0.5])}", *ABSOLUTE]
    if arm == "b1":
        return [*e3.arm_overrides("b1", setting), "algorithm.l2_clip=1.0", *ABSOLUTE[:1]]
    return ["algorithm=filtered_gd", "participation=all", "num_rounds=400", "privacy=none", "repetitions=1",
            f"algorithm.step_size={setting.get('step_size', [0.05, 0.2])}", *ABSOLUTE]


def excess(plan, model: np.ndarray) -> np.ndarray:
    return plan.dataset.excess_risk(model, plan.dataset.optimum(plan.seed, plan.trial), "absolute")


def tune(arm: str, n: int) -> tuple[dict, list[dict]]:
    """The best mean excess risk on the proxy draw (trial 1); steps are replicas of one run."""
    grid = {"b2": [{"rounds": t} for t in e3.B2_ROUNDS],
            "b1": [dict(zip(e3.B1_GRID, v)) for v in itertools.product(*e3.B1_GRID.values())], "b0": [{}]}[arm]
    steps = {"b2": (0.1, 0.5), "b1": e3.B1_STEPS, "b0": (0.05, 0.2)}[arm]
    tries = []
    for setting in grid:
        plan = compose_plan([*base(n, 1), *arm_overrides(arm, setting)])
        risk = excess(plan, run(plan, inline=True).model)
        for step in steps:
            tries.append({"arm": arm, "n": n, **setting, "step_size": step,
                          "proxy_excess": float(risk[plan.step_sizes == step].mean())})
    best = min(tries, key=lambda t: t["proxy_excess"])
    return {k: v for k, v in best.items() if k not in ("arm", "n", "proxy_excess")}, tries


def run_cell(arm: str, n: int) -> tuple[dict, list]:
    setting, tries = tune(arm, n) if arm != "alg3s" else ({}, [])
    plan = compose_plan([*base(n, 0), *arm_overrides(arm, setting)])
    started = time.perf_counter()
    result = run(plan, inline=True)
    risk = excess(plan, result.model)
    row = {"arm": arm, "n": n, "epsilon": EPSILON if arm != "b0" else float("inf"),
           **e3.summary(risk, result.history[-1]), "gradients_no_halt": plan.protocol.resolved.get("gradients_no_halt", ""),
           "seconds": round(time.perf_counter() - started, 1),
           "setting": " ".join(f"{k}={v}" for k, v in setting.items()), "nominal": arm in ("alg3s", "b2")}
    print(", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    return row, tries


def smoothing_check(seed: int = 0) -> list[dict]:
    """F(x) <= F_r(x) <= F(x) + L r at random points of X = B(0, 1), F_r by Monte Carlo."""
    data = SphereRegression(num_silos=1, samples_per_silo=1, dim=DIM)
    w_star = data.optimum(0, 0)
    rng = np.random.default_rng(seed)
    rows = []
    for radius in RADII:
        for _ in range(POINTS):
            point = rng.normal(size=DIM)
            point *= rng.random() ** (1 / DIM) / np.linalg.norm(point)
            ball = rng.normal(size=(DRAWS, DIM))
            ball *= (radius * rng.random(DRAWS) ** (1 / DIM) / np.linalg.norm(ball, axis=1))[:, None]
            # antithetic pairs: (F(x + y) + F(x - y)) / 2 >= F(x) for every y when F is convex
            values = 0.5 * (data.excess_risk(point + ball, w_star, "absolute")
                            + data.excess_risk(point - ball, w_star, "absolute"))
            f, f_r = float(data.excess_risk(point, w_star, "absolute")), float(values.mean())
            se = float(values.std(ddof=1) / np.sqrt(DRAWS))
            rows.append({"radius": radius, "f": f, "f_r": f_r, "f_r_se": se, "lower_gap": f_r - f,
                         "upper_gap": f + radius - f_r,
                         "holds": bool(f_r - f >= -3 * se and f + radius - f_r >= -3 * se)})
    return rows


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {"alg3s": "Alg. 3 + smoothing (exploratory: nominal eps)", "b2": "B2: filtered DP-GD, subgradients (nominal)",
              "b1": "B1: user-level DP-SGD (accountant)", "b0": "B0: no privacy"}
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, label in labels.items():
        picked = [r for r in rows if r["arm"] == arm]
        ax.errorbar([r["n"] for r in picked], [r["excess_mean"] for r in picked],
                    yerr=[r["ci95_half"] for r in picked], marker="o", capsize=3, label=label)
    ax.set(xscale="log", yscale="log", xlabel="users n", ylabel="excess population risk (absolute loss)",
           title=f"eps = {EPSILON:g}, m = {ITEMS}, d = {DIM}")
    ax.set_xticks(USERS, labels=[f"{n:,}" for n in USERS])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    started = time.perf_counter()
    checks = smoothing_check()
    e3.write_csv(HERE / "smoothing.csv", checks)
    print(f"Lemma D.1: {sum(r['holds'] for r in checks)} of {len(checks)} points hold", flush=True)
    rows, tuning = [], []
    for n, arm in itertools.product(USERS, ARMS):
        row, tries = run_cell(arm, n)
        rows.append(row)
        tuning += tries
    e3.write_csv(HERE / "results.csv", rows)
    e3.write_csv(HERE / "tuning.csv", tuning)
    figure(rows, HERE / "figure.png")
    print(f"wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    if "--report" in sys.argv:         # the figure again from results.csv, no runs
        figure([{**r, "n": int(r["n"]), "excess_mean": float(r["excess_mean"]), "ci95_half": float(r["ci95_half"])}
                for r in csv.DictReader(open(HERE / "results.csv"))], HERE / "figure.png")
    else:
        main()
