"""E3 (seed-002 spec §4.4): excess population risk against the items per user m, on P1.

P1 (SphereRegression: x uniform on the sphere, ||w*|| = 1/2, labels with Uniform[-1/2, 1/2] noise,
the half squared loss on X = B(0, 1), L = 2, beta = 1, R = 2), d = 10, n = 8,000 users, m in
{4, 16, 64, 256, 1024}, eps in {1, 4}, delta = min(1e-6, 1 / (10 n m)); the excess risk ||x - w*||^2 /
(2 d) in closed form; 8 repetitions per cell as replicas.

Arms:
- alg3: Alg. 3 under the exploratory profile, kappa = 1e-3 (its eps is NOMINAL: the constants 500
  and 1000 are scaled; the paper's own constants are pure noise at this size, see the run's notes),
  c_tau tuned per cell on a separate draw (data trial 1, seed 1) over {0.25, 0.5, 1};
- alg3_np: Alg. 3 without privacy (the eps -> inf limit of its schedule: its phases read about
  half of the users, lambda_i pulls each phase to the last);
- b0: no privacy, full-batch projected GD on all n m records for 100 steps at step 1 / beta, its
  last iterate (the ERM: the statistical floor; deterministic, one replica);
- b1: user-level DP-SGD with the RDP accountant (a formal (eps, delta) guarantee), K users per
  round, T rounds and the step tuned per cell on the same separate draw over K in {200, 800},
  T in {100, 400}, step in {0.25, 1}: the best mean excess risk there;
- b2: full-batch filtered DP-GD under the same exploratory profile (nominal eps) and Alg. 3's tuned
  c_tau, T tuned the same way over {10, 40}, step 1 = 1 / beta;
- alg1: Alg. 1 under the exploratory profile (nominal eps), kappa tuned over {0.01, 0.04, 0.16}
  (a kappa whose last phase would have no user per group is skipped) and Thm B.1's eta scaled by
  {0.01, 0.1, 1} (replicas of one run) on the same separate draw;
- b4: user-level output perturbation (a formal eps: the analytic Gaussian for the sensitivity
  2 G / (lambda n) + 2 tau / lambda of the ridge ERM, G = 2 the Huber loss's derivative bound,
  which equals the squared loss on X), lambda tuned over {0.01, 0.03, 0.1} on the same draw.
Reported per cell: mean excess risk, its 95% interval (t), the halt rate, the mean gradient count.
Log-log slopes in m of the mean excess risk per (arm, eps).

Writes results.csv, tuning.csv, slopes.csv and figure.png next to this file; ``--report`` redraws
slopes.csv and figure.png from results.csv without running anything; ``--arms a,b`` runs only
those arms and replaces their rows in the CSVs (the others are kept).

    python experiments/user_level_fast/e3_risk_vs_m/run.py [--report | --arms alg1]
"""

from __future__ import annotations

import csv
import itertools
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from experiments.report.tables import write_csv  # noqa: E402
from fedray.compose import compose_plan  # noqa: E402
from fedray.errors import ConfigError  # noqa: E402
from fedray.runtime.driver import run  # noqa: E402

USERS, DIM, REPETITIONS = 8_000, 10, 8
ITEMS, EPSILONS = (4, 16, 64, 256, 1024), (1.0, 4.0)
KAPPA = 1e-3
ALG3_THRESHOLDS = (0.25, 0.5, 1.0)                     # c_tau
B1_GRID = {"users_per_round": (200, 800), "rounds": (100, 400)}
B1_STEPS = (0.25, 1.0)                                 # replicas of one run
B2_ROUNDS = (10, 40)
ALG1_KAPPAS = (0.01, 0.04, 0.16)
ALG1_STEPS = (0.01, 0.1, 1.0)                          # multipliers of Thm B.1's eta, replicas of one run
B4_REGULARIZATIONS = (0.01, 0.03, 0.1)
ARMS = ("alg3", "alg3_np", "b0", "b1", "b2", "alg1", "b4")
TUNED = ("alg3", "b1", "b2", "alg1", "b4")


def base(m: int, eps: float, trial: int, users: int = USERS) -> list[str]:
    delta = min(1e-6, 1 / (10 * users * m))
    return ["experiment=user_level_sphere", f"data.spec.num_silos={users}", f"data.spec.samples_per_silo={m}",
            f"data.spec.dim={DIM}", f"repetitions={REPETITIONS}", f"privacy.epsilon={eps}", f"privacy.delta={delta}",
            f"trial={trial}", f"seed={trial}", "progress=false", "evaluate_every=1000000000"]


EXPLORATORY = ["algorithm.profile=exploratory", f"algorithm.kappa={KAPPA}"]


def arm_overrides(arm: str, tuned: dict) -> list[str]:
    if arm == "alg3":
        return [*EXPLORATORY, f"algorithm.threshold_constant={tuned['threshold_constant']}"]
    if arm == "alg3_np":
        return ["privacy=none"]
    if arm == "b0":
        return ["algorithm=filtered_gd", "participation=all", "num_rounds=100", "privacy=none", "repetitions=1",
                "algorithm.output=last"]
    if arm == "alg1":
        steps = tuned.get("step_size", list(ALG1_STEPS))
        return ["algorithm=phased_sgd", *EXPLORATORY[:1], f"algorithm.kappa={tuned['kappa']}",
                f"algorithm.step_size={steps}"]
    if arm == "b4":
        return ["algorithm=output_perturbation", "participation=all", "num_rounds=1", "privacy.calibration=accountant",
                "data.loss._target_=fedray.losses.Huber", f"algorithm.regularization={tuned['regularization']}"]
    if arm == "b1":
        steps = tuned.get("step_size", list(B1_STEPS))
        return ["algorithm=user_dp_sgd", "participation=uniform", f"participation.silos_per_round={tuned['users_per_round']}",
                f"num_rounds={tuned['rounds']}", f"algorithm.step_size={steps}", "privacy.calibration=accountant"]
    return ["algorithm=filtered_gd", "participation=all", f"num_rounds={tuned['rounds']}", *EXPLORATORY,
            f"algorithm.threshold_constant={tuned['threshold_constant']}"]


def excess(plan, model: np.ndarray) -> np.ndarray:
    return plan.dataset.excess_risk(model, plan.dataset.optimum(plan.seed, plan.trial), "squared")


def tune(arm: str, m: int, eps: float, threshold: float | None = None, users: int = USERS) -> tuple[dict, list[dict]]:
    """The setting with the best mean excess risk on the proxy draw (trial 1), and every try."""
    if arm == "alg3":
        grid = [{"threshold_constant": c} for c in ALG3_THRESHOLDS]
    elif arm == "b1":
        grid = [dict(zip(B1_GRID, values)) for values in itertools.product(*B1_GRID.values())]
    elif arm == "alg1":
        grid = [{"kappa": kappa} for kappa in ALG1_KAPPAS]
    elif arm == "b4":
        grid = [{"regularization": lam} for lam in B4_REGULARIZATIONS]
    else:
        grid = [{"rounds": rounds, "threshold_constant": threshold} for rounds in B2_ROUNDS]
    tries = []
    for setting in grid:
        try:
            plan = compose_plan([*base(m, eps, 1, users), *arm_overrides(arm, setting)])
        except ConfigError as err:          # Alg. 1 with too many groups for the last phase
            tries.append({"arm": arm, "m": m, "epsilon": eps, **setting, "proxy_excess": float("inf"),
                          "refused": str(err)})
            continue
        risk = excess(plan, run(plan, inline=True).model)
        if arm in ("b1", "alg1"):           # the steps are replicas: one try each
            for step in (B1_STEPS if arm == "b1" else ALG1_STEPS):
                tries.append({"arm": arm, "m": m, "epsilon": eps, **setting, "step_size": step,
                              "proxy_excess": float(risk[plan.step_sizes == step].mean())})
        else:
            tries.append({"arm": arm, "m": m, "epsilon": eps, **setting, "proxy_excess": float(risk.mean())})
    best = min(tries, key=lambda t: t["proxy_excess"])
    if not np.isfinite(best["proxy_excess"]):
        raise ConfigError(f"{arm} at m = {m}, n = {users}, eps = {eps:g}", best, "a feasible setting in the grid")
    return {k: v for k, v in best.items() if k not in ("arm", "m", "epsilon", "proxy_excess", "refused")}, tries


def summary(risk: np.ndarray, last: dict) -> dict:
    """A cell's mean excess risk over its replicas, the 95% t-interval's half width, and the halt
    rate and mean gradient count its last round released."""
    half = stats.t.ppf(0.975, len(risk) - 1) * risk.std(ddof=1) / np.sqrt(len(risk)) if len(risk) > 1 else 0.0
    return {"excess_mean": float(risk.mean()), "ci95_half": float(half),
            "halt_rate": float(np.mean(last.get("halted", np.zeros(1)))),
            "gradients_mean": float(np.mean(last.get("gradient_evaluations", np.nan)))}


def run_cell(arm: str, m: int, eps: float, threshold: float | None, users: int = USERS) -> tuple[dict, list, float]:
    """One (arm, m, eps) cell: tuned on the proxy draw where the arm has settings, then run on the
    evaluation draw; the row, the tuning tries, and the c_tau B2 should use (Alg. 3's)."""
    setting, tries = tune(arm, m, eps, threshold, users) if arm in TUNED else ({}, [])
    threshold = setting.get("threshold_constant", threshold)          # B2 uses Alg. 3's tuned c_tau
    plan = compose_plan([*base(m, eps, 0, users), *arm_overrides(arm, setting)])
    result = run(plan, inline=True)
    risk = excess(plan, result.model)
    row = {"arm": arm, "m": m, "epsilon": eps if arm not in ("b0", "alg3_np") else float("inf"),
           **summary(risk, result.history[-1]), "setting": " ".join(f"{k}={v}" for k, v in setting.items()), "nominal": arm in ("alg3", "b2", "alg1")}
    print(", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    return row, tries, threshold


def main(arms: tuple = ARMS) -> None:
    started = time.perf_counter()
    rows, tuning = [], []
    for eps, m in itertools.product(EPSILONS, ITEMS):
        threshold = None
        for arm in ARMS:
            if arm in ("b0", "alg3_np") and eps != EPSILONS[0]:
                continue                    # no privacy: one run per m
            if arm not in arms and arm != "alg3":
                continue
            if arm not in arms:             # B2 takes Alg. 3's c_tau: read it back, do not rerun
                threshold = kept_threshold(HERE / "results.csv", "m", m, eps)
                continue
            row, tries, threshold = run_cell(arm, m, eps, threshold)
            rows.append(row)
            tuning += tries
    write_csv(HERE / "results.csv", merged(HERE / "results.csv", rows, arms))
    write_csv(HERE / "tuning.csv", merged(HERE / "tuning.csv", tuning, arms))
    report(read_results(HERE / "results.csv"))
    print(f"wall time {time.perf_counter() - started:.1f} s")


def kept_threshold(path: Path, key: str, value: float, eps: float) -> float:
    """Alg. 3's tuned c_tau of the cell where ``key`` is ``value``, from an earlier results.csv."""
    row = next(r for r in csv.DictReader(open(path))
               if r["arm"] == "alg3" and float(r[key]) == value and float(r["epsilon"]) == eps)
    return float(row["setting"].split("=")[1])


def arms_from_argv() -> tuple:
    return tuple(sys.argv[sys.argv.index("--arms") + 1].split(",")) if "--arms" in sys.argv else ARMS


def merged(path: Path, rows: list[dict], arms: tuple) -> list[dict]:
    """``rows`` in place of the file's rows of ``arms`` (all of them when every arm ran)."""
    if set(arms) == set(ARMS) or not path.exists():
        return rows
    return [r for r in csv.DictReader(open(path)) if r["arm"] not in arms] + rows


def read_results(path: Path) -> list[dict]:
    numbers = ("m", "epsilon", "excess_mean", "ci95_half", "halt_rate", "gradients_mean")
    rows = list(csv.DictReader(open(path)))
    return [{**r, **{k: float(r[k]) for k in numbers}, "m": int(r["m"])} for r in rows]


def report(rows: list[dict]) -> None:
    """slopes.csv and figure.png from the cells' rows."""
    slopes = []
    for arm, eps in itertools.product(ARMS, EPSILONS):
        private = arm not in ("b0", "alg3_np")
        if not private and eps != EPSILONS[0]:
            continue
        picked = [r for r in rows if r["arm"] == arm and (not private or r["epsilon"] == eps)]
        if len(picked) < 2:
            continue
        ms = np.log([r["m"] for r in picked])
        slope = float(np.polyfit(ms, np.log([r["excess_mean"] for r in picked]), 1)[0])
        slopes.append({"arm": arm, "epsilon": eps if private else float("inf"), "slope_in_m": slope})
        print(f"{arm} eps {eps}: slope in m {slope:.3f}")
    write_csv(HERE / "slopes.csv", slopes)
    figure(rows, HERE / "figure.png")


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(EPSILONS), figsize=(10, 4), sharey=True)
    labels = {"alg3": f"Alg. 3 (exploratory, kappa={KAPPA:g}: nominal eps)", "alg3_np": "Alg. 3 without privacy",
              "b0": "B0: no privacy (ERM on all records)",
              "b1": "B1: user-level DP-SGD (accountant)", "b2": "B2: filtered DP-GD (nominal eps)",
              "alg1": "Alg. 1 (exploratory: nominal eps)", "b4": "B4: user-level output perturbation (analytic)"}
    for ax, eps in zip(axes, EPSILONS):
        for arm, label in labels.items():
            picked = [r for r in rows if r["arm"] == arm and (arm in ("b0", "alg3_np") or r["epsilon"] == eps)]
            ax.errorbar([r["m"] for r in picked], [r["excess_mean"] for r in picked],
                        yerr=[r["ci95_half"] for r in picked], marker="o", capsize=3, label=label)
        ax.axhline(0.25 / (2 * DIM), color="grey", ls=":", lw=0.8, label="the zero model")
        ax.set(xscale="log", yscale="log", xlabel="items per user m", title=f"eps = {eps:g}, n = {USERS:,}, d = {DIM}")
    axes[0].set_ylabel("excess population risk")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--report" in sys.argv:         # slopes and figure again from results.csv, no runs
        report(read_results(HERE / "results.csv"))
    else:
        main(arms_from_argv())
