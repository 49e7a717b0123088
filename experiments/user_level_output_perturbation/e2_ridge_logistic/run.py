"""E2 (seed-003 spec §4): SCOutputPert (certificate mode) on ridge logistic regression, against
user-level output perturbation with the global sensitivity (B1).

Data: ``data=synthetic`` (x ~ N(0, I/d) scaled into the unit ball, y ~ Bernoulli(sigmoid(<w0, x>)),
d = 10), the item loss logistic + (mu/2) ||theta||^2 (G = 2 on K = B(0, 1/mu)), mu in {0.1, 0.01},
eps = 1, delta = 1e-5, beta = 1e-3; (n, m) with n in {500, 2,000, 8,000, 30,000}, m in {10, 100,
1,000} and n m <= 1e6 (8 cells); 10 replicas per run (independent noise on one data draw; each
arm and cell its own seed).
B1: ``output_perturbation`` with lambda = mu, the analytic Gaussian for 2 G_loss / (mu n) (G_loss
= 1, the logistic loss's own bound; the ridge term is data independent).

Reported: the normalised distance ||thetahat - theta*|| mu n sqrt(m) / G (predicted ~ c sqrt(d),
flat in n and m), the excess empirical risk of the ridge objective against [mu/2, beta_s/2]
sigma^2 d (beta_s = 1/4 + mu, the objective's smoothness), and per replica against the same
bracket on its own ||thetahat - theta*||^2 (strong convexity and smoothness make that one hold for
every replica), the certificate's release rate, and the
ratio of the errors to B1's (predicted to fall as m^-1/2). theta* by Newton on the pooled records.
B2 (``--b2``, ``b2_cell``): full-batch noisy GD on the ridge objective, tuned on its own draw.

    python experiments/user_level_output_perturbation/e2_ridge_logistic/run.py [--report | --b2]
"""

from __future__ import annotations

import csv
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy.special import expit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from experiments.report.tables import log_slope, write_csv  # noqa: E402
from fedray.compose import compose_plan  # noqa: E402
from fedray.runtime.driver import run  # noqa: E402

USERS, ITEMS, RIDGES = (500, 2_000, 8_000, 30_000), (10, 100, 1_000), (0.1, 0.01)
REPLICAS, DIM, LIPSCHITZ, LIMIT = 10, 10, 2.0, 1_000_000


def ridge_risk(theta: np.ndarray, x: np.ndarray, y: np.ndarray, mu: float) -> np.ndarray:
    z = theta @ x.T
    return np.mean(np.logaddexp(0.0, z) - y * z, axis=1) + 0.5 * mu * np.sum(theta**2, axis=1)


def ridge_erm(x: np.ndarray, y: np.ndarray, mu: float) -> np.ndarray:
    theta = np.zeros(x.shape[1])
    for _ in range(100):
        p = expit(x @ theta)
        gradient = x.T @ (p - y) / len(y) + mu * theta
        if np.linalg.norm(gradient) < 1e-13:
            return theta
        theta -= np.linalg.solve((x * (p * (1 - p))[:, None]).T @ x / len(y) + mu * np.eye(x.shape[1]), gradient)
    raise RuntimeError("Newton did not converge")


def run_arm(arm: str, n: int, m: int, mu: float, seed: int) -> dict:
    # B1 runs on its own seed (its own draw of the records and noise): the ratio carries sampling
    # error rather than repeating the sigma ratio through shared draws
    common = ["data=synthetic", "privacy=central_user", "participation=all", "num_rounds=1",
              f"seed={2 * seed + (arm == 'b1')}",
              f"data.spec.num_silos={n}", f"data.spec.samples_per_silo={m}", "data.spec.test_samples_per_silo=1",
              f"data.spec.dim={DIM}", "+data.spec.noise=1.0", f"repetitions={REPLICAS}", "progress=false"]
    if arm == "b1":
        overrides = [*common, "algorithm=output_perturbation", f"algorithm.regularization={mu}",
                     "algorithm.gradient_tolerance=1e-10", "privacy.calibration=accountant"]
    else:
        # certificate mode aborts on a failed check (its search is out of reach at these n): NOT DP
        overrides = [*common, "algorithm=sc_output_pert", f"algorithm.strong_convexity={mu}", "privacy.calibration=paper",
                     "algorithm.on_unstable=abort_not_private"]
    plan = compose_plan(overrides)
    result = run(plan, inline=True)
    return {"plan": plan, "result": result}


def score(arm: str, plan, result, n: int, m: int, mu: float) -> dict:
    """The cell's row for one arm's run: distances to theta*, excess risk, the quadratic bracket."""
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train.reshape(-1, DIM), fed.y_train.reshape(-1)
    optimum = ridge_erm(x, y, mu)
    floor = ridge_risk(optimum[None], x, y, mu)[0]
    last = result.history[-1]
    released = np.asarray(last.get("released", np.ones(REPLICAS)), dtype=bool)
    models = result.model[:, :, 0]
    distance = np.where(released, np.linalg.norm(models - optimum, axis=1), np.nan)
    resolved = plan.protocol.resolved
    sigma = float(np.asarray(last["noise_std"])[0]) if "noise_std" in last else \
        resolved.get("noise_std_max", resolved.get("noise_std"))
    excess = ridge_risk(np.where(released[:, None], models, 0.0), x, y, mu) - floor
    error = float(np.nanmean(distance))
    squared = distance[released] ** 2
    within = (mu / 2 * squared <= excess[released] * (1 + 1e-9)) & \
        (excess[released] <= (0.25 + mu) / 2 * squared * (1 + 1e-9))
    return {"arm": arm, "n": n, "m": m, "mu": mu, "release_rate": float(released.mean()), "sigma": sigma,
            "distance_mean": error, "normalised_distance": error * mu * n * math.sqrt(m) / LIPSCHITZ,
            "excess_mean": float(np.mean(excess[released])) if released.any() else float("nan"),
            "excess_low": mu / 2 * sigma**2 * DIM, "excess_high": (0.25 + mu) / 2 * sigma**2 * DIM,
            "within_quadratic_bracket": float(within.mean()) if released.any() else float("nan")}


def run_cell(n: int, m: int, mu: float, seed: int) -> list[dict]:
    rows = []
    for arm in ("sc_output_pert", "b1"):
        ran = run_arm(arm, n, m, mu, seed)
        rows.append(score(arm, ran["plan"], ran["result"], n, m, mu))
    for row in rows:
        row["ratio_to_b1"] = row["distance_mean"] / rows[1]["distance_mean"]
    return rows


B2_ROUNDS, B2_STEPS = (50, 200), (0.5, 2.0, 8.0)


def run_b2(n: int, m: int, mu: float, seed: int, rounds: int, steps: tuple, repetitions: int):
    """B2: every user every round, each user's mean logistic gradient clipped to 1 (the ridge term
    is data independent), the RDP accountant's noise for T full-participation releases (the zCDP
    composition the spec names), projected onto K = B(0, 1/mu), the average iterate."""
    plan = compose_plan(["data=synthetic", "privacy=central_user", "algorithm=user_dp_sgd", "participation=uniform",
                         f"participation.silos_per_round={n}", f"num_rounds={rounds}", f"seed={seed}",
                         f"data.spec.num_silos={n}", f"data.spec.samples_per_silo={m}",
                         "data.spec.test_samples_per_silo=1", f"data.spec.dim={DIM}", "+data.spec.noise=1.0",
                         f"repetitions={repetitions}", "progress=false", f"evaluate_every={10**9}",
                         f"algorithm.step_size={list(steps)}", "algorithm.l2_clip=1.0", f"algorithm.radius={1 / mu}",
                         f"algorithm.regularization={mu}", "privacy.calibration=accountant"])
    return plan, run(plan, inline=True)


def b2_cell(n: int, m: int, mu: float, seed: int) -> dict:
    """B2 tuned over (T, step) on a separate draw (seed 1000 + the cell's), then run on the cell's
    SCOutputPert records (seed 2 x the cell's)."""
    tries = []
    for rounds in B2_ROUNDS:
        plan, result = run_b2(n, m, mu, 1000 + seed, rounds, B2_STEPS, 2)
        fed = plan.dataset.load(plan.seed, plan.trial)
        x, y = fed.x_train.reshape(-1, DIM), fed.y_train.reshape(-1)
        risk = ridge_risk(result.model[:, :, 0], x, y, mu)
        tries += [(float(risk[plan.step_sizes == step].mean()), rounds, step) for step in B2_STEPS]
    _, rounds, step = min(tries)
    plan, result = run_b2(n, m, mu, 2 * seed, rounds, (step,), REPLICAS)
    # sigma here is a step's noise: output perturbation's excess bracket does not apply
    return {**score("b2", plan, result, n, m, mu), "excess_low": float("nan"), "excess_high": float("nan"),
            "setting": f"T={rounds} step={step}"}


def main_b2() -> None:
    rows = [r for r in read_results(HERE / "results.csv") if r["arm"] != "b2"]
    seed = 0
    for mu, n, m in itertools.product(RIDGES, USERS, ITEMS):
        if n * m > LIMIT:
            continue
        row = b2_cell(n, m, mu, seed)
        b1 = next(r for r in rows if (r["arm"], r["mu"], r["n"], r["m"]) == ("b1", mu, n, m))
        row["ratio_to_b1"] = row["distance_mean"] / b1["distance_mean"]
        rows.append(row)
        seed += 1
        print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    write_csv(HERE / "results.csv", rows)
    report(read_results(HERE / "results.csv"))


def main() -> None:
    started = time.perf_counter()
    rows, seed = [], 0
    for mu, n, m in itertools.product(RIDGES, USERS, ITEMS):
        if n * m > LIMIT:
            continue
        rows += run_cell(n, m, mu, seed)
        seed += 1
        for row in rows[-2:]:
            print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    write_csv(HERE / "results.csv", rows)
    report(read_results(HERE / "results.csv"))
    print(f"wall time {time.perf_counter() - started:.1f} s")


def read_results(path: Path) -> list[dict]:
    return [{**r, **{k: float(v) for k, v in r.items() if k not in ("arm", "setting") and v != ""},
             "n": int(r["n"]), "m": int(r["m"])} for r in csv.DictReader(open(path))]


def report(rows: list[dict]) -> None:
    slopes = []
    for mu, n in itertools.product(RIDGES, USERS):
        ours = sorted((r for r in rows if (r["arm"], r["mu"], r["n"]) == ("sc_output_pert", mu, n)), key=lambda r: r["m"])
        if len(ours) >= 2:
            slopes.append({"mu": mu, "n": n, "ratio_to_b1_slope_in_m": log_slope([r["m"] for r in ours],
                                                                                 [r["ratio_to_b1"] for r in ours])})
    write_csv(HERE / "slopes.csv", slopes)
    for r in rows:
        if r["arm"] == "sc_output_pert":
            inside = r["excess_low"] <= r["excess_mean"] <= r["excess_high"]
            print(f"mu {r['mu']:g} n {r['n']} m {r['m']}: released {r['release_rate']:.1f}, normalised distance "
                  f"{r['normalised_distance']:.3g}, excess {r['excess_mean']:.3g} in [{r['excess_low']:.3g}, "
                  f"{r['excess_high']:.3g}]: {inside}; per replica in its own bracket "
                  f"{r['within_quadratic_bracket']:.2f}; ratio to B1 {r['ratio_to_b1']:.3g}")
    for r in rows:
        if r["arm"] == "b2":
            ours = next(o for o in rows if (o["arm"], o["mu"], o["n"], o["m"]) == ("sc_output_pert", r["mu"], r["n"], r["m"]))
            print(f"mu {r['mu']:g} n {r['n']} m {r['m']}: B2 ({r['setting']}) distance {r['distance_mean']:.3g}, "
                  f"excess {r['excess_mean']:.3g}, ratio to B1 {r['ratio_to_b1']:.3g}; SCOutputPert / B2 "
                  f"{ours['distance_mean'] / r['distance_mean']:.3g}")
    for s in slopes:
        print(f"mu {s['mu']:g} n {s['n']}: slope in m of the ratio to B1 {s['ratio_to_b1_slope_in_m']:.3f}")
    figure(rows, HERE / "figure.png")


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for mu, n in itertools.product(RIDGES, USERS):
        ours = sorted((r for r in rows if (r["arm"], r["mu"], r["n"]) == ("sc_output_pert", mu, n)), key=lambda r: r["m"])
        if ours:
            axes[0].plot([r["m"] for r in ours], [r["ratio_to_b1"] for r in ours], "o-", ms=3, label=f"mu={mu:g}, n={n}")
            axes[1].plot([r["m"] for r in ours], [r["normalised_distance"] for r in ours], "o-", ms=3,
                         label=f"mu={mu:g}, n={n}")
    axes[0].set(xscale="log", yscale="log", xlabel="items per user m", ylabel="error / B1's error",
                title="SCOutputPert (certificate) against B1")
    axes[1].set(xscale="log", yscale="log", xlabel="items per user m", ylabel="||thetahat - theta*|| mu n sqrt(m) / G")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--report" in sys.argv:
        report(read_results(HERE / "results.csv"))
    elif "--b2" in sys.argv:
        main_b2()
    else:
        main()
