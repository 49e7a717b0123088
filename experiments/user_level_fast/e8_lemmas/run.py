"""E8 (seed-002 spec §4.4, tests T7 and T8): the two lemmas the utility proofs lean on, measured.

Lemma 3.5 / C.6 (T8): at a fixed point, with no user removed, the server's filtered mean g of K
users' mean gradients (m items each) satisfies E ||g - grad F||^2 <~ L^2 ln(n d m) / (K m). Measured
with fedray's own pieces: P1 users (``SphereRegression``: d = 10, ||w*|| = 1/2, L = 2), their mean
gradients at x = 0 (``user_mean_gradients``), and the server step (``OutlierRemovalStep`` with no
noise, eps = 1e6 so the test never halts, tau = L ln(n d m) / sqrt(m)); grad F(0) = -w* / d in
closed form. K in {16, 64, 256}, m in {4, 16, 64, 256}, 200 draws each (one draw = K fresh users).
Reported: E ||g - grad F||^2 K m / L^2, the kept fraction, and the log-log slopes in K and in m.

Lemma 2.3 / B.4 (T7): two projected-SGD runs (X = B(0, 1), step eta <= 1 / beta, average iterate)
on independent P1 samples stay within eta L sqrt(T ln(d T / zeta)): the 99% quantile over 200
pairs of ||xbar - ybar|| / (eta L sqrt(T ln(d T))) for T in {1e2, 1e3, 1e4}, eta in {0.01, 0.1, 1}
(written here in numpy: Alg. 1's group SGD is not built yet).

Writes variance.csv, stability.csv next to this file and prints the slopes and the worst ratio.

    python experiments/user_level_fast/e8_lemmas/run.py [--report]     # about 1 min; --report: the figure from the CSVs
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

from fedray.data.federation import SiloArrays  # noqa: E402
from fedray.data.sphere_regression import SphereRegression  # noqa: E402
from fedray.losses import Squared  # noqa: E402
from fedray.privacy.mechanisms import ServerGaussianNoise  # noqa: E402
from fedray.protocols.user_level.accelerated_erm import user_mean_gradients  # noqa: E402
from fedray.protocols.user_level.outlier_removal import OutlierRemovalStep  # noqa: E402

DIM, LIPSCHITZ, DRAWS = 10, 2.0, 200
USERS, ITEMS = (16, 64, 256), (4, 16, 64, 256)
STEPS, STEP_SIZES, PAIRS = (100, 1_000, 10_000), (0.01, 0.1, 1.0), 200


def variance_rows() -> list[dict]:
    rows = []
    for k, m in itertools.product(USERS, ITEMS):
        data = SphereRegression(num_silos=k * DRAWS, samples_per_silo=m, test_samples_per_silo=0, dim=DIM)
        fed = data.load(seed=7, trial=k * 1000 + m)
        w_star = data.optimum(seed=7, trial=k * 1000 + m)
        users = SiloArrays.of(fed, np.arange(k * DRAWS))
        grads = user_mean_gradients(Squared(), np.zeros((1, DIM, 1)), users, np.ones((1, k * DRAWS), bool))
        vectors = grads[0, :, :, 0].reshape(DRAWS, k, DIM)                         # a draw per row
        tau = LIPSCHITZ * np.log(k * DRAWS * DIM * m) / np.sqrt(m)
        step = OutlierRemovalStep(epsilon=1e6, threshold=tau, noise=ServerGaussianNoise(np.zeros(DRAWS), 0.0))
        generators = [np.random.default_rng([k, m, r]) for r in range(DRAWS)]
        result = step(vectors, step.pass_level(k, generators), generators)
        error = ((result.gradient - (-w_star / DIM)) ** 2).sum(axis=1)           # grad F(0) = (0 - w*) / d
        rows.append({"users_K": k, "items_m": m, "mean_sq_error": float(error.mean()),
                     "scaled": float(error.mean() * k * m / LIPSCHITZ**2), "kept_fraction": float((result.kept / k).mean()),
                     "halted": int(result.halted.sum())})
    return rows


def stability_rows() -> list[dict]:
    rows, rng = [], np.random.default_rng(11)
    e = rng.standard_normal(DIM)
    w_star = 0.5 * e / np.linalg.norm(e)
    for steps, eta in itertools.product(STEPS, STEP_SIZES):
        x = np.zeros((2, PAIRS, DIM))                     # the two runs of every pair
        total = np.zeros_like(x)
        for _ in range(steps):
            a = rng.standard_normal((2, PAIRS, DIM))
            a /= np.linalg.norm(a, axis=2, keepdims=True)
            b = (a @ w_star) + rng.uniform(-0.5, 0.5, size=(2, PAIRS))
            x -= eta * ((a * x).sum(axis=2) - b)[..., None] * a
            norms = np.linalg.norm(x, axis=2, keepdims=True)
            x = np.where(norms > 1, x / norms, x)
            total += x
        gap = np.linalg.norm(total[0] / steps - total[1] / steps, axis=1)
        ratio = gap / (eta * LIPSCHITZ * np.sqrt(steps * np.log(DIM * steps)))
        rows.append({"steps_T": steps, "step_size": eta, "ratio_q99": float(np.quantile(ratio, 0.99)),
                     "ratio_median": float(np.median(ratio))})
    return rows


def slope(rows: list[dict], axis: str, fixed: str, value: int) -> float:
    picked = [r for r in rows if r[fixed] == value]
    return float(np.polyfit(np.log([r[axis] for r in picked]), np.log([r["mean_sq_error"] for r in picked]), 1)[0])


def main() -> None:
    started = time.perf_counter()
    variance, stability = variance_rows(), stability_rows()
    for name, table in (("variance.csv", variance), ("stability.csv", stability)):
        with open(HERE / name, "w", newline="") as f:
            writer = csv.DictWriter(f, list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    for k in USERS:
        print(f"Lemma 3.5: K = {k}: slope in m {slope(variance, 'items_m', 'users_K', k):.3f}")
    for m in ITEMS:
        print(f"Lemma 3.5: m = {m}: slope in K {slope(variance, 'users_K', 'items_m', m):.3f}")
    scaled = [r["scaled"] for r in variance]
    print(f"Lemma 3.5: E||g - grad F||^2 K m / L^2 in [{min(scaled):.3f}, {max(scaled):.3f}] (ln(n d m) ~ "
          f"{np.log(16 * DRAWS * DIM * 4):.1f} .. {np.log(256 * DRAWS * DIM * 256):.1f}); smallest kept fraction "
          f"{min(r['kept_fraction'] for r in variance):.3f}, halts {sum(r['halted'] for r in variance)}")
    print(f"Lemma 2.3: 99% quantile of the ratio in [{min(r['ratio_q99'] for r in stability):.4f}, "
          f"{max(r['ratio_q99'] for r in stability):.4f}]")
    figure(variance, stability, HERE / "figure.png")
    print(f"wall time {time.perf_counter() - started:.1f} s")


def figure(variance: list[dict], stability: list[dict], path: Path) -> None:
    """Lemma 3.5: the error against K m (reference slope -1); Lemma 2.3: the ratio against T."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for m in sorted({r["items_m"] for r in variance}):
        picked = sorted((r for r in variance if r["items_m"] == m), key=lambda r: r["users_K"])
        left.plot([r["users_K"] * m for r in picked], [r["mean_sq_error"] for r in picked], "o-", label=f"m = {m:g}")
    km = np.array(sorted({r["users_K"] * r["items_m"] for r in variance}))
    scale = np.median([r["scaled"] for r in variance]) * LIPSCHITZ**2
    left.plot(km, scale / km, "k:", lw=0.8, label="L^2 c / (K m), c = the median")
    left.set(xscale="log", yscale="log", xlabel="users K x items m", ylabel="E ||g - grad F||^2",
             title="Lemma 3.5: the filtered mean's error ~ 1 / (K m)")
    left.legend(fontsize=7)
    for eta in sorted({r["step_size"] for r in stability}):
        picked = sorted((r for r in stability if r["step_size"] == eta), key=lambda r: r["steps_T"])
        right.plot([r["steps_T"] for r in picked], [r["ratio_q99"] for r in picked], "o-", label=f"eta = {eta:g}")
    right.axhline(1.0, color="grey", ls=":", lw=0.8, label="the bound's scale (ratio 1)")
    right.set(xscale="log", yscale="log", xlabel="SGD steps T",
              ylabel="99% quantile of ||x - y|| / (eta L sqrt(T ln(d T)))",
              title="Lemma 2.3: two SGD runs' distance")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def read(path: Path) -> list[dict]:
    return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(open(path))]


if __name__ == "__main__":
    if "--report" in sys.argv:         # the figure again from the CSVs, no runs
        figure(read(HERE / "variance.csv"), read(HERE / "stability.csv"), HERE / "figure.png")
    else:
        main()
