"""X3: MNIST even vs odd as one-record users: test error against eps for seed 000's protocols and
the local-DP, central-DP and non-private baselines (issue 11).

Data (``fedray.data.MnistUsers``, the shared t10k copy): per trial 0, 1,000 public images fit the
PCA basis (20 dims) and the feature scale, 1,000 are held-out test images, 8,000 are users with one
image each; ||x|| <= 1, so the logistic loss is L = 1 Lipschitz and beta = 1/4 smooth. Theta = the
ball of radius 5. Every arm is one fedray job per eps with ``experiment=x3_mnist_users``
(delta = 1e-6; B, T and the step from the paper's formulas with the arm's own sum error,
``parameters=exact``; repetitions as replicas, each its own noise) on one local Ray. The test error
of each replica's released model (the average iterate; P_AGD: theta^ag) is counted on the 1,000
test images. Writes results.csv and figure.png next to this file and prints them.

    python experiments/x3_mnist_users/run.py
    python experiments/x3_mnist_users/run.py --arms "P_SGD tight" ...   # re-run these arms, keep the rest

Every shuffle arm has a twin named "<arm> tight" (issue 44): the same protocol, B, T and step rule
with P_vec calibrated by its exact privacy loss (``privacy.calibration=tight``,
``fedray.privacy.vector_sum_tight``; for P_GD its T rounds together by the binomial's moments,
``fedray.privacy.vector_sum_rounds``) instead of seed-000 §2.2's b and p, at the same (eps, delta).
``--arms`` runs only the named arms' cells and merges their rows into the existing results.csv in
``--out`` (every other arm's rows stay as they were); each cell's per-replica test errors go to
errors.npz, merged the same way. ``--figure-only`` redraws figure.png from results.csv.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from fedray.compose import compose_plan, job_session  # noqa: E402

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
REPETITIONS = 10
P_GD_EPSILONS, P_GD_REPETITIONS = (1.0, 4.0), 2     # T = min(n, eps^2 n^2 / (d ln^2(nd/delta))) rounds of all users
SGD, GD = ["algorithm=p_sgd"], ["algorithm=p_gd", "participation=all"]

# arm -> (overrides, released output, kind)
ARMS = {
    "P_SGD": (SGD, "avg", "shuffle"),
    "P_AGD": (["algorithm=p_agd", "algorithm.smoothness=0.25"], "last", "shuffle"),
    "P_GD": (GD, "avg", "shuffle"),
    "local SGD": (SGD + ["privacy=local_gaussian"], "avg", "local"),
    "central SGD": (SGD + ["privacy=central_gaussian"], "avg", "central"),
    "central GD": (GD + ["privacy=central_gaussian"], "avg", "central"),
    "non-private SGD": (SGD + ["privacy=none", "privacy.l2_clip=1.0"], "avg", "none"),
}
TIGHT = " tight"      # the suffix of P_vec's exactly calibrated twin of a shuffle arm (issue 44)
# Every shuffle arm has its tight twin; P_GD's calibrates its T rounds together by the binomial's
# moments (fedray.privacy.vector_sum_rounds): per round, eps_0 = 0.0014 to 0.0043 was below what the
# unit-shift PLD of vector_sum_tight certifies in a run's time (see X2's README).
NO_TIGHT_TWIN: tuple[str, ...] = ()
ARMS |= {arm + TIGHT: (overrides + ["privacy.calibration=tight"], output, kind)
         for arm, (overrides, output, kind) in list(ARMS.items()) if kind == "shuffle" and arm not in NO_TIGHT_TWIN}


def run_cell(arm: str, eps: float, repetitions: int, pool) -> tuple[dict, np.ndarray]:
    from fedray.losses import margins
    from fedray.runtime.driver import run

    overrides, output, kind = ARMS[arm]
    plan = compose_plan(["experiment=x3_mnist_users", f"privacy.epsilon={eps}", f"repetitions={repetitions}",
                         "progress=false", *overrides])
    started = time.perf_counter()
    result = run(plan, pool=pool)
    seconds = time.perf_counter() - started
    fed = plan.dataset.load(plan.seed, plan.trial)
    tested = fed.n_test > 0
    x, y = fed.x_test[tested, 0], fed.y_test[tested, 0]
    errors = ((margins(result.outputs[output], x[:, None, :])[..., 0, 0] > 0) != (y > 0.5)).mean(axis=-1)   # (P,)
    return {"arm": arm, "kind": kind, "eps": eps, "reps": errors.size, "test_error_mean": float(errors.mean()),
            "test_error_se": float(errors.std(ddof=1) / np.sqrt(errors.size)) if errors.size > 1 else float("nan"),
            "users": plan.shape.num_silos, "test_images": int(tested.sum()),
            "batch": int(plan.protocol.algorithm.batch_size), "steps": plan.num_rounds,
            "step_size": float(plan.protocol.algorithm.step_size[0]), "seconds": round(seconds, 2)}, errors


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    styles = {"shuffle": "-", "local": "--", "central": ":", "none": "-."}
    palette = {arm: f"C{i}" for i, arm in enumerate(a for a in ARMS if not a.endswith(TIGHT))}
    fig, ax = plt.subplots(figsize=(7.6, 5.4))
    for arm, (_, _, kind) in ARMS.items():
        cells = sorted((r for r in rows if r["arm"] == arm), key=lambda r: r["eps"])
        if not cells:
            continue
        tight = arm.endswith(TIGHT)
        se = np.nan_to_num([c["test_error_se"] for c in cells])
        ax.errorbar([c["eps"] for c in cells], [c["test_error_mean"] for c in cells], yerr=1.96 * se,
                    linestyle=(0, (1, 1)) if tight else styles[kind], marker="s" if tight else "o",
                    markersize=4 if tight else 3, markerfacecolor="white" if tight else None, capsize=2,
                    color=palette[arm.removesuffix(TIGHT)], label=arm)
    ax.axhline(0.5, color="grey", linewidth=0.8, label="chance")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(EPSILONS, [f"{e:g}" for e in EPSILONS])
    ax.set_xlabel("eps (delta = 1e-6)")
    ax.set_ylabel("test error (mean, 95% CI over repetitions)")
    ax.set_title("MNIST even vs odd, 8,000 one-image users")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _kept(out: Path, todo: set) -> tuple[list[dict], dict]:
    """The existing rows of results.csv (as written) and replicas of errors.npz of every cell
    "arm|eps" not in ``todo``; nothing if ``out`` has no results yet."""
    if not (out / "results.csv").exists():
        return [], {}
    with open(out / "results.csv") as f:
        rows = [r for r in csv.DictReader(f) if f"{r['arm']}|{float(r['eps']):g}" not in todo]
    errors = {}
    if (out / "errors.npz").exists():
        with np.load(out / "errors.npz") as stored:
            errors = {k: stored[k] for k in stored.files if k not in todo}
    return rows, errors


def _typed(row: dict) -> dict:
    return {k: (v if k in ("arm", "kind") or not isinstance(v, str) else float(v)) for k, v in row.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where results.csv and figure.png go")
    parser.add_argument("--figure-only", action="store_true", help="redraw figure.png from results.csv (no runs)")
    parser.add_argument("--arms", nargs="+", choices=tuple(ARMS), default=None, metavar="ARM",
                        help="run only these arms' cells and replace their rows in the existing results "
                             f"(one of: {', '.join(ARMS)})")
    parser.add_argument("--epsilons", nargs="+", type=float, default=EPSILONS, metavar="EPS",
                        help="run only these eps (a subset of the grid, with --arms)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.figure_only:
        with open(args.out / "results.csv") as f:
            figure([_typed(r) for r in csv.DictReader(f)], args.out / "figure.png")
        return
    arms = set(args.arms or ARMS)
    todo = [(arm, eps) for eps in EPSILONS if eps in args.epsilons for arm in ARMS
            if arm in arms and (arm.removesuffix(TIGHT) != "P_GD" or eps in P_GD_EPSILONS)]
    rows, errors = _kept(args.out, {f"{arm}|{eps:g}" for arm, eps in todo}) if args.arms else ([], {})
    started = time.perf_counter()
    with job_session() as pool:
        for arm, eps in todo:
            reps = P_GD_REPETITIONS if arm.removesuffix(TIGHT) == "P_GD" else REPETITIONS
            row, errors[f"{arm}|{eps:g}"] = run_cell(arm, eps, reps, pool)
            rows.append(row)
            print(f"{arm:16s} eps={eps:<4g} test error {row['test_error_mean']:.4f} +- {row['test_error_se']:.4f}"
                  f"  B={row['batch']} T={row['steps']} eta={row['step_size']:.3g}  {row['seconds']:.1f} s", flush=True)
    order = list(ARMS)
    rows.sort(key=lambda r: (float(r["eps"]), order.index(r["arm"])))
    with open(args.out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    np.savez_compressed(args.out / "errors.npz", **errors)
    figure([_typed(r) for r in rows], args.out / "figure.png")
    print(f"X3 done in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
