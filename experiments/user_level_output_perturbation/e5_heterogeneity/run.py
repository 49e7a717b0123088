"""E5 (seed-003 spec §4): heterogeneity stress. The utility analysis needs the items arranged at
random among the users (Thm 3.6); federated users are not. Privacy does not depend on it: a
failed certificate releases nothing.

User-level mean estimation on sufficient statistics (``data=user_means``, G = 2, mu = 1, eps = 1,
delta = 1e-5, beta = 1e-3), n = 1,000 users, m in {10, 10^3, 10^5, 10^7}, d in {1, 10}; user i's
biases p_ik ~ Beta(c p_k, c (1 - p_k)) with concentration c in {inf (i.i.d.), 1000, 10, 1, 0.1}.
Certificate mode for both d, exact mode for d = 1; 10 data draws (seeds) per cell, 1 replica each.

Reported per cell: the release rate, gamma sqrt(m) / G (the normalised per-user gradient spread
the certificate tests against gamma0 sqrt(m) / G = 5 sqrt(ln(n / beta)) = 18.6), the exact mode's
Delta_{4 kappa} over Delta_exact, and the mean error (a run that releases nothing scores the worst
case, diam K = 2). Prediction: gamma sqrt(m) / G grows like sqrt(m) times the heterogeneity, the
release rate collapses, fallbacks rise.

    python experiments/user_level_output_perturbation/e5_heterogeneity/run.py [--report]
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

from experiments.report.tables import write_csv  # noqa: E402
from fedray.compose import compose_plan  # noqa: E402
from fedray.runtime.driver import run  # noqa: E402

USERS, ITEMS, DIMS = 1_000, (10, 10**3, 10**5, 10**7), (1, 10)
CONCENTRATIONS = (None, 1000.0, 10.0, 1.0, 0.1)
DRAWS, LIPSCHITZ, DIAMETER = 10, 2.0, 2.0


def run_cell(mode: str, concentration: float | None, m: int, d: int, seed: int) -> dict:
    # the release rate measured is the stability check's pass rate: a failed check aborts (NOT DP)
    overrides = ["experiment=sc_output_pert_means", f"algorithm.mode={mode}", "algorithm.on_unstable=abort_not_private",
                 f"data.spec.num_silos={USERS}",
                 f"data.spec.items_per_user={m}", f"data.spec.dim={d}", f"seed={seed}", "progress=false"]
    if concentration is not None:
        overrides.append(f"data.spec.concentration={concentration}")
    plan = compose_plan(overrides)
    result = run(plan, inline=True)
    last = result.history[-1]
    mechanism = plan.protocol.build(None).mechanisms[0]
    erm = plan.dataset.load(plan.seed, plan.trial).x_train[:, 0, :].mean(axis=0)
    passed = bool(last["released"][0])
    return {"passed": passed, "spread": float(last["gradient_spread"][0]) * math.sqrt(m) / LIPSCHITZ,
            "check": float(last["certificate"][0]) / mechanism.sensitivity,
            "error": float(np.linalg.norm(result.model[0, :, 0] - erm)) if passed else DIAMETER}


def main() -> None:
    started = time.perf_counter()
    rows, seed = [], 0
    for concentration, m, d in itertools.product(CONCENTRATIONS, ITEMS, DIMS):
        for mode in ("certificate", "exact") if d == 1 else ("certificate",):
            draws = []
            for _ in range(DRAWS):
                draws.append(run_cell(mode, concentration, m, d, seed))
                seed += 1
            rows.append({"mode": mode, "concentration": "inf" if concentration is None else concentration, "m": m,
                         "d": d, "release_rate": float(np.mean([c["passed"] for c in draws])),
                         "spread_mean": float(np.mean([c["spread"] for c in draws])),
                         "check_over_bound_mean": float(np.mean([c["check"] for c in draws])),
                         "error_mean": float(np.mean([c["error"] for c in draws]))})
            print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rows[-1].items()),
                  flush=True)
    write_csv(HERE / "results.csv", rows)
    report(read_results(HERE / "results.csv"))
    print(f"wall time {time.perf_counter() - started:.1f} s")


def read_results(path: Path) -> list[dict]:
    return [{**r, **{k: float(r[k]) for k in ("concentration", "release_rate", "spread_mean", "check_over_bound_mean",
                                              "error_mean")}, "m": int(r["m"]), "d": int(r["d"])}
            for r in csv.DictReader(open(path))]


def report(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for concentration in sorted({r["concentration"] for r in rows}, reverse=True):
        cells = [r for r in rows if (r["mode"], r["d"], r["concentration"]) == ("certificate", 10, concentration)]
        label = "i.i.d." if math.isinf(concentration) else f"c = {concentration:g}"
        axes[0].plot([c["m"] for c in cells], [c["spread_mean"] for c in cells], marker="o", ms=3, label=label)
        axes[1].plot([c["m"] for c in cells], [c["release_rate"] for c in cells], marker="o", ms=3, label=label)
    axes[0].axhline(5 * math.sqrt(math.log(USERS / 1e-3)), color="grey", ls="--", lw=0.8, label="gamma0 sqrt(m) / G")
    axes[0].set(xscale="log", yscale="log", xlabel="items per user m", ylabel="gamma sqrt(m) / G",
                title=f"certificate mode, n = {USERS:,}, d = 10")
    axes[1].set(xscale="log", xlabel="items per user m", ylabel="release rate", title="certificate mode, d = 10")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(HERE / "figure.png", dpi=110)
    plt.close(fig)
    for r in rows:
        print(f"{r['mode']} c {r['concentration']:g} m {r['m']:.0e} d {r['d']}: release {r['release_rate']:.1f}, "
              f"spread {r['spread_mean']:.3g}, check / bound {r['check_over_bound_mean']:.3g}")


if __name__ == "__main__":
    if "--report" in sys.argv:
        report(read_results(HERE / "results.csv"))
    else:
        main()
