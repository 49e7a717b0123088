"""E4: the bias of gradients at vertex-sampled points, plain K-draw Maurey points against Alg. 2's
multilevel (MLMC) estimator (seed-001 spec §5 E4; no privacy).

Objective: the max-loss game of E3 (``fedray.data.LogisticTasks``: m = 8 tasks, d = 64, a pool
of 2,000 records as the population D), at a fixed (x, y), with the logistic link (second-order
smooth; x interior) and the squared hinge (first-order smooth only) at a kink: x = (e_0 + e_1) / 2,
where every record with a_j0 = -a_j1 (about half of them) has margin exactly 0. Operator
Phi_D = (grad_x F, -grad_y F) on D.

Plain estimator: Phi_D at (xhat_K, yhat_K), K iid vertex draws per player. Its expectation is
exact here: a record's margin at a K-draw point is <a_j, xhat_K> = (2 Binomial(K, p_j) - K) / K
with p_j = x({c : a_jc = +1}), and yhat enters linearly, so E[Phi_D(xhat_K, yhat_K)] is a
binomial sum over the pool (no Monte Carlo). MLMC: Alg. 2 at level M (TG(1/2, M) levels, three
points per draw), by Monte Carlo over ``--reps`` draws: its bias (with a 95% CI per coordinate,
the l_inf norm of the mean error) and second moment E||g||_inf^2, matched to the plain estimator
on expected draws per player (2 E[2^N] = 2 (M + 1) / C_M) and on the bias it should equal
(K = 2^{M+1}).

Writes results.csv and figure.png next to this file.

    python experiments/mirror_descent/e4_bias/run.py
    python experiments/mirror_descent/e4_bias/run.py --reps 2000      # a smoke run
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from fedray.data import LogisticTasks  # noqa: E402
from fedray.data.logistic_tasks import link_derivative, link_value  # noqa: E402
from fedray.protocols.mirror_descent.bias_reduction import (  # noqa: E402
    combine, draw_levels, expected_cost, level_points,
)

KS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MS = (2, 3, 4, 5, 6, 7, 8)


class Operator:
    """Phi_D of the max-loss game on a pool, at dense or sparse points (x (R, d), y (R, m))."""

    def __init__(self, spec: LogisticTasks, seed: int = 0):
        self.link = spec.link
        self.a, self.b = spec.population(seed).records(np.arange(spec.pool))

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        margins = self.b[:, None, :] * (self.a @ x.T)[:, :, None]                         # (pool, R, m)
        slope = (y[None] * self.b[:, None, :] * link_derivative(self.link, margins)).sum(axis=2)
        grad_x = slope.T @ self.a / self.a.shape[0]
        grad_y = link_value(self.link, margins).mean(axis=0)
        return np.concatenate([grad_x, -grad_y], axis=1)

    def plain_expectation(self, x: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
        """E[Phi_D(xhat_K, yhat_K)] exactly (module docstring)."""
        p = ((self.a > 0) * x[None]).sum(axis=1)                                           # (pool,)
        counts = np.arange(k + 1)
        weights = stats.binom.pmf(counts[None, :], k, p[:, None])                           # (pool, K + 1)
        margins = (2 * counts - k) / k                                                      # <a_j, xhat> values
        u = self.b[:, :, None] * margins[None, None, :]                                     # (pool, m, K + 1)
        expected_slope = (link_derivative(self.link, u) * weights[:, None, :]).sum(axis=2)  # (pool, m)
        expected_value = (link_value(self.link, u) * weights[:, None, :]).sum(axis=2)
        grad_x = ((expected_slope * self.b) @ y) @ self.a / self.a.shape[0]
        return np.concatenate([grad_x, -expected_value.mean(axis=0)])


def mlmc_samples(op: Operator, x: np.ndarray, y: np.ndarray, levels: int, reps: int, rng) -> np.ndarray:
    """(reps, d + m) Alg. 2 estimates at (x, y), batched by level."""
    d, m = x.size, y.size
    drawn = draw_levels(rng.random(reps), levels)
    out = np.empty((reps, d + m))
    for level in np.unique(drawn):
        rows = np.flatnonzero(drawn == level)
        count = 2 ** (int(level) + 1)
        vx = rng.choice(d, size=(rows.size, count), p=x)
        vy = rng.choice(m, size=(rows.size, count), p=y)
        px = np.stack([level_points(v, int(level), d) for v in vx])                        # (r, 3, d)
        py = np.stack([level_points(v, int(level), m) for v in vy])
        at = op(px.reshape(-1, d), py.reshape(-1, m)).reshape(rows.size, 3, d + m)
        out[rows] = np.stack([combine(point, int(level), levels) for point in at])
    return out


def bias_with_ci(samples: np.ndarray, target: np.ndarray) -> tuple[float, float]:
    """||mean - target||_inf and the 95% half-width of the coordinate that attains it."""
    error = samples.mean(axis=0) - target
    j = int(np.argmax(np.abs(error)))
    return float(np.abs(error[j])), float(1.96 * samples[:, j].std(ddof=1) / np.sqrt(len(samples)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261124)
    rows = []
    started = time.perf_counter()
    for link in ("logistic", "squared_hinge"):
        spec = LogisticTasks(num_samples=1, dim=64, tasks=8, pool=2000, sparsity=4, link=link)
        op = Operator(spec)
        # logistic: an interior point; squared hinge: x = (e_0 + e_1) / 2, where every record with
        # a_j0 = -a_j1 (about half) has margin exactly 0, the hinge's kink
        x = rng.dirichlet(np.ones(64)) if link == "logistic" else np.r_[0.5, 0.5, np.zeros(62)]
        y = rng.dirichlet(np.ones(8))
        exact = op(x[None], y[None])[0]
        for k in KS:
            bias = float(np.abs(op.plain_expectation(x, y, k) - exact).max())
            rows.append({"link": link, "estimator": "plain", "K_or_M": k, "draws_per_player": k, "bias": bias,
                         "bias_ci95": 0.0, "second_moment": float("nan"), "reps": 0})
        for levels in MS:
            samples = mlmc_samples(op, x, y, levels, args.reps, rng)
            bias, ci = bias_with_ci(samples, exact)
            target = float(np.abs(op.plain_expectation(x, y, 2 ** (levels + 1)) - exact).max())
            rows.append({"link": link, "estimator": "mlmc", "K_or_M": levels,
                         "draws_per_player": 2 * expected_cost(levels) + 1, "bias": bias, "bias_ci95": ci,
                         "second_moment": float((np.abs(samples).max(axis=1) ** 2).mean()), "reps": args.reps,
                         "plain_bias_at_2^(M+1)": target})
            print(rows[-1], flush=True)
    with open(args.out / "results.csv", "w", newline="") as f:
        columns = list(rows[-1])
        writer = csv.DictWriter(f, columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    figure(rows, args.out / "figure.png")
    for link in ("logistic", "squared_hinge"):
        plain = [(r["K_or_M"], r["bias"]) for r in rows if r["link"] == link and r["estimator"] == "plain"]
        k, b = map(np.array, zip(*plain))
        print(f"{link}: plain bias slope in K (K >= 4) {np.polyfit(np.log(k[2:]), np.log(b[2:]), 1)[0]:.3f}")
    print(f"wall time {time.perf_counter() - started:.0f} s")


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, link in zip(axes, ("logistic", "squared_hinge")):
        plain = [(r["draws_per_player"], r["bias"]) for r in rows if r["link"] == link and r["estimator"] == "plain"]
        mlmc = [(r["draws_per_player"], r["bias"], r["bias_ci95"]) for r in rows
                if r["link"] == link and r["estimator"] == "mlmc"]
        ax.plot(*zip(*plain), "o-", label="plain K draws (exact)")
        x, y, ci = map(np.array, zip(*mlmc))
        ax.errorbar(x, y, yerr=ci, fmt="s-", capsize=2, label="MLMC, M = 2..8 (Monte Carlo)")
        ax.set(xscale="log", yscale="log", xlabel="expected vertex draws per player",
               ylabel="bias ||E g - Phi_D||_inf", title=link)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
