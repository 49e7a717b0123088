"""E3 (seed-003 spec §4): Phased-ERM (Alg. 3) on logistic regression without regularization.

Data: ``data=synthetic`` (x ~ N(0, I/d) scaled into the unit ball, y ~ Bernoulli(sigmoid(<w0, x> /
noise)), noise 1: non-separable), d = 10, G = 1, K = B(0, 5) (R = 10), eps = 1, delta = 1e-5,
beta = 1 / (n m); (n, m) in {1e4, 3e4, 1e5} x {10} and {1e4} x {10, 30, 100} (the spec's 3e4 and 1e5
users at m = 100 are left out: at s = 1e-12 a phase solves to a residual near 1e-13, and the time
grows with n m, 54 s at n m = 1e5, about 10 min at 1e6); lambda balanced, and the paper's lambda at
the smallest size (its solves are slow: 151 s there); 5 replicas per run.

Arms:
- faithful (s = 1): the ledger, each phase's release rate, and excess risk <= B(lambda) + beta R G;
- diagnostic, NOT DP: every sigma_i scaled by s in {1e-6, 1e-9, 1e-12} (``algorithm.noise_scale``;
  smaller than the spec's {1e-3, 1e-6, 1e-9}, which assumed exact mode's c' ~ 1e9: the certificate's
  is ~ 2e11;
  the plan's statement says "none"), lambda balanced for the scaled noise and the solver's
  residual scaled with it (the certificate's slack is part of the noise budget). It checks the
  localization analysis: excess risk against B(lambda) evaluated at s sigma_i, and its scaling in
  n and m at fixed s.
- b2: user-level full-batch noisy GD (``algorithm=user_dp_sgd`` with every user every round: each
  user's mean gradient clipped to G = 1, sensitivity 2G/n, Gaussian noise for T releases by the
  RDP accountant, which for full participation is the zCDP composition the spec names, converted
  optimally), projected onto K, the average iterate; T in {50, 200} and the step in {0.5, 2, 8, 32}
  tuned on a separate draw (seed 1), then run on the evaluation draw (seed 0).
- b3: item-level DP-SGD with group privacy (``algorithm=item_dp_sgd``: B of the n m items a round
  without replacement, each item's gradient clipped to G = 1, the PLD accountant's noise for T
  releases at the item level (eps / m, delta / (m e^eps)), by group privacy (eps, delta) per user),
  projected onto K, the average iterate; T in {50, 200}, B in {1%, 10%} of the items and the step
  as for B2, tuned on seed 1.
The excess empirical risk L(thetahat) - L(theta*) is over every record, theta* by Newton's method
on the pooled records (an experimenter's diagnostic: the records are generated from the seed).

    python experiments/user_level_output_perturbation/e3_phased_erm/run.py [--report | --b2 | --b3] [--sizes 1e5x10,1e4x100]

``--b2`` / ``--b3`` runs only that baseline and replaces its rows in results.csv; ``--sizes`` runs
only those (n, m) cells and replaces their rows (the other cells' rows are kept).
"""

from __future__ import annotations

import csv
import itertools
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

SIZES = ((10_000, 10), (30_000, 10), (100_000, 10), (10_000, 30), (10_000, 100))
REGULARIZATIONS = ("paper", "balanced")
SCALES = (1.0, 1e-6, 1e-9, 1e-12)
REPLICAS, DIM, RADIUS, NOISE = 5, 10, 5.0, 1.0


def empirical_risk(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mean logistic loss of each model (P, d) over records x (N, d), labels y in {0, 1}."""
    z = theta @ x.T
    return np.mean(np.logaddexp(0.0, z) - y * z, axis=1)


def erm(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin of the mean logistic loss (inside K here: checked by the caller)."""
    theta = np.zeros(x.shape[1])
    for _ in range(100):
        p = expit(x @ theta)
        gradient = x.T @ (p - y) / len(y)
        if np.linalg.norm(gradient) < 1e-12:
            return theta
        theta -= np.linalg.solve((x * (p * (1 - p))[:, None]).T @ x / len(y), gradient)
    raise RuntimeError("Newton did not converge")


def run_cell(n: int, m: int, regularization: str, scale: float) -> dict:
    plan = compose_plan(["experiment=phased_erm_synthetic", f"data.spec.num_silos={n}", f"data.spec.samples_per_silo={m}",
                         f"data.spec.dim={DIM}", f"data.spec.noise={NOISE}", f"algorithm.regularization={regularization}",
                         f"algorithm.radius={RADIUS}", f"algorithm.noise_scale={scale}", f"repetitions={REPLICAS}",
                         "progress=false"])
    started = time.perf_counter()
    result = run(plan, inline=True)
    seconds = time.perf_counter() - started
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train.reshape(-1, DIM), fed.y_train.reshape(-1)
    optimum = erm(x, y)
    assert np.linalg.norm(optimum) < RADIUS, "theta* outside K: the unconstrained ERM is not the constrained one"
    excess = empirical_risk(result.model[:, :, 0], x, y) - empirical_risk(optimum[None], x, y)[0]
    resolved, last = plan.protocol.resolved, result.history[-1]
    lipschitz, diameter = resolved["lipschitz"], 2 * RADIUS
    return {"n": n, "m": m, "regularization": regularization, "noise_scale": scale, "dp": scale == 1.0,
            "phases": resolved["phases"], "lambda": resolved["regularization"],
            "bound": resolved["oracle_bound"] + resolved["beta"] * diameter * lipschitz,
            "excess_mean": float(excess.mean()), "excess_max": float(excess.max()),
            "phases_without_release": float(np.mean(last["phases_without_release"])),
            "phases_settled": float(np.mean(last["phases_settled"])),
            "epsilon_spent": float(result.epsilon_spent.max()) if result.epsilon_spent is not None else float("nan"),
            "zero_model_excess": float(empirical_risk(np.zeros((1, DIM)), x, y)[0] - empirical_risk(optimum[None], x, y)[0]),
            "seconds": seconds}


B2_ROUNDS, B2_STEPS = (50, 200), (0.5, 2.0, 8.0, 32.0)
B3_BATCHES = (0.01, 0.1)            # B as a share of the n m items


def run_baseline(n: int, m: int, algorithm: list, rounds: int, steps: tuple, seed: int, repetitions: int):
    plan = compose_plan(["experiment=phased_erm_synthetic", f"data.spec.num_silos={n}", f"data.spec.samples_per_silo={m}",
                         f"data.spec.dim={DIM}", f"data.spec.noise={NOISE}", *algorithm, f"num_rounds={rounds}",
                         f"algorithm.step_size={list(steps)}", "algorithm.l2_clip=1.0", f"algorithm.radius={RADIUS}",
                         "privacy.calibration=accountant", f"seed={seed}", f"repetitions={repetitions}", "progress=false",
                         f"evaluate_every={10**9}"])
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train.reshape(-1, DIM), fed.y_train.reshape(-1)
    optimum = erm(x, y)
    started = time.perf_counter()
    result = run(plan, inline=True)
    seconds = time.perf_counter() - started
    excess = empirical_risk(result.model[:, :, 0], x, y) - empirical_risk(optimum[None], x, y)[0]
    zero = empirical_risk(np.zeros((1, DIM)), x, y)[0] - empirical_risk(optimum[None], x, y)[0]
    return plan, result, excess, zero, seconds


def b2_algorithm(n: int, m: int, batch: float | None = None) -> list:
    return ["algorithm=user_dp_sgd", "participation=uniform", f"participation.silos_per_round={n}"]


def b3_algorithm(n: int, m: int, batch: float) -> list:
    return ["algorithm=item_dp_sgd", "participation=all", f"algorithm.batch_size={round(batch * n * m)}"]


def baseline_cell(n: int, m: int, name: str) -> dict:
    """A baseline tuned over (T, step[, B]) on seed 1, then run on seed 0 with REPLICAS repetitions."""
    algorithm, batches = (b2_algorithm, (None,)) if name == "b2" else (b3_algorithm, B3_BATCHES)
    tries = []
    for rounds, batch in itertools.product(B2_ROUNDS, batches):
        plan, _, excess, _, _ = run_baseline(n, m, algorithm(n, m, batch), rounds, B2_STEPS, 1, 2)
        for step in B2_STEPS:
            tries.append((float(excess[plan.step_sizes == step].mean()), rounds, step, batch))
    _, rounds, step, batch = min(tries)
    plan, result, excess, zero, seconds = run_baseline(n, m, algorithm(n, m, batch), rounds, (step,), 0, REPLICAS)
    setting = f"{name} T={rounds} step={step}" + (f" B={round(batch * n * m)}" if batch else "")
    return {"n": n, "m": m, "regularization": setting, "noise_scale": 1.0, "dp": True,
            "phases": rounds, "lambda": float("nan"), "bound": float("nan"), "excess_mean": float(excess.mean()),
            "excess_max": float(excess.max()), "phases_without_release": 0.0, "phases_settled": 0.0,
            "epsilon_spent": float(result.epsilon_spent.max()), "zero_model_excess": float(zero), "seconds": seconds}


def kept(arms, sizes: tuple) -> list[dict]:
    """results.csv's rows but those of ``arms`` (a row's regularization starts with one) at ``sizes``."""
    if not (HERE / "results.csv").exists():
        return []
    return [r for r in csv.DictReader(open(HERE / "results.csv"))
            if not (r["regularization"].startswith(arms) and (int(r["n"]), int(r["m"])) in sizes)]


def main_baseline(name: str, sizes: tuple) -> None:
    rows = kept(name, sizes)
    for n, m in sizes:
        rows.append(baseline_cell(n, m, name))
        print(rows[-1], flush=True)
    write_csv(HERE / "results.csv", rows)
    report(read_results(HERE / "results.csv"))


def main(sizes: tuple) -> None:
    started = time.perf_counter()
    rows = kept(REGULARIZATIONS, sizes)
    for (n, m), regularization, scale in itertools.product(sizes, REGULARIZATIONS, SCALES):
        if regularization == "paper" and (scale != 1.0 or (n, m) != SIZES[0]):
            continue                       # the diagnostic checks the balanced bound
        rows.append(run_cell(n, m, regularization, scale))
        print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rows[-1].items()), flush=True)
    write_csv(HERE / "results.csv", rows)
    report(read_results(HERE / "results.csv"))
    print(f"wall time {time.perf_counter() - started:.1f} s")


def sizes_from_argv() -> tuple:
    if "--sizes" not in sys.argv:
        return SIZES
    cells = tuple(tuple(int(float(v)) for v in cell.split("x")) for cell in sys.argv[sys.argv.index("--sizes") + 1].split(","))
    unknown = [c for c in cells if c not in SIZES]
    if unknown:
        raise SystemExit(f"--sizes: {unknown} not among the grid's {SIZES}")
    return cells


def read_results(path: Path) -> list[dict]:
    numbers = ("noise_scale", "lambda", "bound", "excess_mean", "excess_max", "phases_without_release",
               "phases_settled", "epsilon_spent", "zero_model_excess", "seconds")
    return [{**r, **{k: float(r[k]) for k in numbers}, "n": int(r["n"]), "m": int(r["m"]), "phases": int(r["phases"])}
            for r in csv.DictReader(open(path))]


def report(rows: list[dict]) -> None:
    slopes = []
    for scale, (variable, fixed, value) in itertools.product(SCALES, (("n", "m", 10), ("m", "n", 10_000))):
        picked = sorted((r for r in rows if r["noise_scale"] == scale and r["regularization"] == "balanced"
                         and r[fixed] == value), key=lambda r: r[variable])
        if len(picked) >= 2:
            slopes.append({"noise_scale": scale, "variable": f"{variable} ({fixed} = {value})", "points": len(picked),
                           "excess_slope": log_slope([r[variable] for r in picked], [r["excess_mean"] for r in picked]),
                           "bound_slope": log_slope([r[variable] for r in picked], [r["bound"] for r in picked])})
    write_csv(HERE / "slopes.csv", slopes)
    for r in rows:
        print(f"n {r['n']} m {r['m']} {r['regularization']} s {r['noise_scale']:g}{'' if r['dp'] in ('True', True) else ' (not DP)'}: "
              f"excess {r['excess_mean']:.3g} (max {r['excess_max']:.3g})"
              + (f" <= bound {r['bound']:.3g}: {r['excess_max'] <= r['bound']}" if r['bound'] == r['bound'] else "")
              + f"; zero model {r['zero_model_excess']:.3g}")
    for s in slopes:
        print(f"s {s['noise_scale']:g}: slope in {s['variable']} of the excess {s['excess_slope']:.2f}, of the bound "
              f"{s['bound_slope']:.2f} ({s['points']} points)")
    figure(rows, HERE / "figure.png")


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for ax, (variable, fixed, value) in zip(axes, (("n", "m", 10), ("m", "n", 10_000))):
        def cell_rows(keep):
            return sorted((r for r in rows if r[fixed] == value and keep(r)), key=lambda r: r[variable])

        for scale, color in zip(SCALES, ("C0", "C1", "C2", "C3")):
            picked = cell_rows(lambda r: r["noise_scale"] == scale and r["regularization"] == "balanced")
            label = "faithful (DP)" if scale == 1.0 else f"s = {scale:g} (not DP)"
            ax.plot([r[variable] for r in picked], [r["excess_mean"] for r in picked], "o-", color=color, label=label)
            ax.plot([r[variable] for r in picked], [r["bound"] for r in picked], "--", color=color, lw=0.8)
        for name, marker, shade in (("b2", "s", "grey"), ("b3", "^", "tab:brown")):
            picked = cell_rows(lambda r: r["regularization"].startswith(name))
            ax.plot([r[variable] for r in picked], [r["excess_mean"] for r in picked], marker + "-", color=shade,
                    label=f"{name.upper()} (DP)")
        zero = cell_rows(lambda r: r["noise_scale"] == 1.0 and r["regularization"] == "balanced")
        ax.plot([r[variable] for r in zero], [r["zero_model_excess"] for r in zero], "k:", label="the zero model")
        ax.set(xscale="log", yscale="log", xlabel=f"{'users n' if variable == 'n' else 'items per user m'} "
               f"({fixed} = {value:,})", ylabel="excess empirical risk (dashed: B(lambda))",
               title="Phased-ERM, lambda balanced, d = 10, eps = 1")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--report" in sys.argv:
        report(read_results(HERE / "results.csv"))
    elif "--b2" in sys.argv or "--b3" in sys.argv:
        main_baseline("b2" if "--b2" in sys.argv else "b3", sizes_from_argv())
    else:
        main(sizes_from_argv())
