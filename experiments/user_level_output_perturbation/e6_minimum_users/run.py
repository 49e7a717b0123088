"""E6 (seed-003 spec §4): how few users SCOutputPert needs. Alg. 1 is private for every n, so the
N0 = 8 kappa + 2 refusal is lifted (``algorithm.allow_few_users=true``) and n swept from 4 kappa + 2
(the fewest for which Delta's denominator n - 4 kappa - 1 is positive) to 4 N0.

User-level mean estimation on sufficient statistics (``data=user_means``, G = 2, mu = 1, m = 100,
beta = 1e-3), eps in {0.25, 0.5, 1}, delta in {1e-4, 1e-6, 1e-8}, d in {1, 10, 100, 1000}:
certificate mode for every d, exact mode for d = 1. Eight values of n per (eps, delta), spaced
geometrically in n - 4 kappa - 1; 5 data draws (seeds) per cell, 4 replicas each.

Reported per cell: the release rate (over draws and replicas), the mean error ||thetahat - abar||,
the normalised error err n sqrt(m) / sqrt(d), and the measured error over sigma E||N(0, I_d)||.
Predictions: the certificate's rate stays >= 1 - beta for every n > 4 kappa + 1 (its test
reduces to gamma <= gamma0, which does not depend on n's margin over 4 kappa); the normalised
error blows up like n / (n - 4 kappa - 1) near 4 kappa + 1 (a factor 2 at N0 = 8 kappa + 2); the
knee scales like log(1/delta)/eps and does not move with d.

    python experiments/user_level_output_perturbation/e6_minimum_users/run.py [--report]
"""

from __future__ import annotations

import csv
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent))

from experiments.report.tables import write_csv  # noqa: E402
from e1_mean_estimation.run import gaussian_norm_mean  # noqa: E402
from fedray.compose import compose_plan  # noqa: E402
from fedray.protocols.user_level.deletion import CertifiedPerturbation  # noqa: E402
from fedray.runtime.driver import run  # noqa: E402

EPSILONS, DELTAS, DIMS = (0.25, 0.5, 1.0), (1e-4, 1e-6, 1e-8), (1, 10, 100, 1000)
ITEMS, DRAWS, REPLICAS, POINTS, DIAMETER = 100, 5, 4, 8, 2.0


def user_counts(eps: float, delta: float) -> list[int]:
    """POINTS values of n from 4 kappa + 2 to 4 N0, geometric in n - 4 kappa - 1."""
    kappa = CertifiedPerturbation(eps, delta, 1e-3, 2.0, 1.0, 1000, ITEMS).kappa
    low, high = 1, 4 * (8 * kappa + 2) - 4 * kappa - 1
    margins = np.unique(np.round(np.geomspace(low, high, POINTS)).astype(int))
    return [int(4 * kappa + 1 + margin) for margin in margins]


def run_cell(mode: str, eps: float, delta: float, n: int, d: int, seed: int) -> dict:
    # the release rate measured is the stability check's pass rate: a failed check aborts (NOT DP)
    plan = compose_plan(["experiment=sc_output_pert_means", f"algorithm.mode={mode}", "algorithm.allow_few_users=true",
                         "algorithm.on_unstable=abort_not_private",
                         f"privacy.epsilon={eps}", f"privacy.delta={delta}", f"data.spec.num_silos={n}",
                         f"data.spec.items_per_user={ITEMS}", f"data.spec.dim={d}", f"repetitions={REPLICAS}",
                         f"seed={seed}", "progress=false"])
    result = run(plan, inline=True)
    erm = plan.dataset.load(plan.seed, plan.trial).x_train[:, 0, :].mean(axis=0)
    passed = np.asarray(result.history[-1]["released"], dtype=bool)
    error = np.where(passed, np.linalg.norm(result.model[:, :, 0] - erm, axis=1), DIAMETER)
    return {"passed": passed, "error": error, "kappa": plan.protocol.resolved["kappa"],
            "min_users": plan.protocol.resolved["min_users"], "sigma": float(result.history[-1]["noise_std"][0])}


def main() -> None:
    started = time.perf_counter()
    rows, seed = [], 0
    for eps, delta in itertools.product(EPSILONS, DELTAS):
        for n, d in itertools.product(user_counts(eps, delta), DIMS):
            for mode in ("certificate", "exact") if d == 1 else ("certificate",):
                draws = []
                for _ in range(DRAWS):
                    draws.append(run_cell(mode, eps, delta, n, d, seed))
                    seed += 1
                passed = np.concatenate([c["passed"] for c in draws])
                error = np.concatenate([c["error"] for c in draws])
                kappa = draws[0]["kappa"]
                rows.append({"mode": mode, "epsilon": eps, "delta": delta, "d": d, "n": n, "kappa": kappa,
                             "margin": n - 4 * kappa - 1, "min_users": draws[0]["min_users"],
                             "release_rate": float(passed.mean()), "error_mean": float(error.mean()),
                             "normalised_error": float(error.mean() * n * math.sqrt(ITEMS) / math.sqrt(d)),
                             "error_over_predicted": float(error.mean() / (draws[0]["sigma"] * gaussian_norm_mean(d)))})
                print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rows[-1].items()),
                      flush=True)
    write_csv(HERE / "results.csv", rows)
    report(read_results(HERE / "results.csv"))
    print(f"wall time {time.perf_counter() - started:.1f} s")


def read_results(path: Path) -> list[dict]:
    return [{**r, **{k: float(r[k]) for k in ("epsilon", "delta", "release_rate", "error_mean", "normalised_error",
                                              "error_over_predicted")},
             **{k: int(r[k]) for k in ("d", "n", "kappa", "margin", "min_users")}} for r in csv.DictReader(open(path))]


def report(rows: list[dict]) -> None:
    """knees.csv, per (mode, eps, delta, d): the release rate's minimum over n; the normalised
    error at the fewest users over its value at 4 N0, measured and as n / (n - 4 kappa - 1) and
    sigma's other n-dependence predict it; the range of measured / predicted error over n; the knee
    N0 = 8 kappa + 2, where n / (n - 4 kappa - 1) = 2. And figure.png."""
    knees = []
    for (mode, eps, delta, d) in sorted({(r["mode"], r["epsilon"], r["delta"], r["d"]) for r in rows}):
        cells = sorted((r for r in rows if (r["mode"], r["epsilon"], r["delta"], r["d"]) == (mode, eps, delta, d)),
                       key=lambda r: r["n"])
        first, last = cells[0], cells[-1]
        predicted = [c["normalised_error"] / c["error_over_predicted"] for c in (first, last)]
        ratios = [c["error_over_predicted"] for c in cells]
        knees.append({"mode": mode, "epsilon": eps, "delta": delta, "d": d, "kappa": first["kappa"],
                      "knee_n0": first["min_users"], "release_rate_min": min(c["release_rate"] for c in cells),
                      "blow_up_measured": first["normalised_error"] / last["normalised_error"],
                      "blow_up_predicted": predicted[0] / predicted[1],
                      "error_over_predicted_min": min(ratios), "error_over_predicted_max": max(ratios)})
    write_csv(HERE / "knees.csv", knees)
    for k in knees:
        print(f"{k['mode']} eps {k['epsilon']:g} delta {k['delta']:g} d {k['d']}: release rate >= "
              f"{k['release_rate_min']:.2f}; normalised error at 4 kappa + 2 over 4 N0: {k['blow_up_measured']:.3g} "
              f"(predicted {k['blow_up_predicted']:.3g}); measured / predicted error "
              f"{k['error_over_predicted_min']:.2f}..{k['error_over_predicted_max']:.2f}; knee N0 = {k['knee_n0']}")
    figure(rows, HERE / "figure.png")


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for eps, delta in itertools.product(EPSILONS, DELTAS):
        cells = sorted((r for r in rows if (r["mode"], r["epsilon"], r["delta"], r["d"]) == ("certificate", eps, delta, 10)),
                       key=lambda r: r["n"])
        if cells:
            axes[0].plot([c["n"] / (4 * c["kappa"]) for c in cells],
                         [c["normalised_error"] / cells[-1]["normalised_error"] for c in cells],
                         marker="o", ms=3, label=f"eps={eps:g}, delta={delta:g}")
    axes[0].axvline(2.0, color="grey", ls="--", lw=0.8)
    axes[0].set(xscale="log", yscale="log", xlabel="n / (4 kappa) (dashed: N0)",
                ylabel="err n sqrt(m) / sqrt(d), over its value at 4 N0", title="certificate mode, d = 10")
    axes[0].legend(fontsize=6)
    for d in DIMS:
        cells = sorted((r for r in rows if (r["mode"], r["epsilon"], r["delta"], r["d"]) == ("certificate", 1.0, 1e-6, d)),
                       key=lambda r: r["n"])
        axes[1].plot([c["n"] for c in cells], [c["normalised_error"] for c in cells], marker="o", ms=3, label=f"d={d}")
    axes[1].set(xscale="log", yscale="log", xlabel="users n", title="certificate mode, eps = 1, delta = 1e-6")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--report" in sys.argv:
        report(read_results(HERE / "results.csv"))
    else:
        main()
