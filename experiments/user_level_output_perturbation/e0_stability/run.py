"""E0 (seed-003 spec §4, no privacy): the deletion stability of the strongly convex ERM that the
paper rests on (Thm 3.6 / Cor 3.7): removing one user moves the minimiser by O~(G / (mu n sqrt(m)))
when items are arranged at random, not G / (mu n).

Measured: D1 = max_i ||theta*(x) - theta*(x_{-i})|| and s = D1 mu (n - 1) sqrt(m) / G, over
n in {250, 500, 1,000, 2,000, 4,000} users, m in {1, 4, 16, 64, 256} items each, 20 data draws per
cell. Predictions: s <= 5 sqrt(ln(n / beta)) (beta = 1e-3: in every draw), and log-log slopes of
the mean D1 near -1 in n and -0.5 in m.

(a) Mean estimation (``fedray.data.BinomialUserMeans``: items in {-1/sqrt(d), 1/sqrt(d)}^d, biases
    U(0.3, 0.7)), l = (1/2)||theta - z||^2 on K = B(0, 1), G = 2, mu = 1, d in {1, 16}: theta* is
    the users' mean, so D1 = max_i ||abar - a_i|| / (n - 1) exactly. Negative controls, which the
    theorem does not cover: (i) an arranged dataset, user 0 holding m items all equal to
    (1, .., 1)/sqrt(d) (the others as before), D1 ~ G / (mu n) flat in m; (ii) the largest move
    when one user is replaced by the farthest corner of the item cube, ~ 2 G / (mu n), flat in m.
(b) Ridge logistic regression, l = log(1 + exp(-b <a, theta>)) + (mu/2)||theta||^2, ||a|| <= 1
    (a ~ N(0, I/d) scaled into the ball), b ~ Bernoulli(sigmoid(<a, theta_true>)) in {-1, 1},
    ||theta_true|| = 2, d = 10, G = 2, mu in {0.1, 0.01} (K = B(0, 1/mu) is never active).
    theta*(x) by Newton's method to ||grad|| <= 1e-13; each theta*(x_{-i}) first by one Newton
    step from theta*(x) (exact gradient and Hessian of x_{-i}, O(||step||^2) error), then the three
    largest moves solved again exactly by Newton from there (warm starts are fine here: E0 is no
    mechanism), and D1 is their largest exact move. The largest relative gap between the one-step
    and the exact moves is reported.

    python experiments/user_level_output_perturbation/e0_stability/run.py [--report]
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

from experiments.report.tables import bootstrap_log_slope, log_slope, write_csv  # noqa: E402
from fedray.data import BinomialUserMeans  # noqa: E402

USERS = (250, 500, 1_000, 2_000, 4_000)
ITEMS = (1, 4, 16, 64, 256)
DRAWS, BETA, LIPSCHITZ = 20, 1e-3, 2.0
MEAN_DIMS = (1, 16)
RIDGES, RIDGE_DIM, SIGNAL = (0.1, 0.01), 10, 2.0


def mean_cell(n: int, m: int, d: int, draw: int) -> dict:
    spec = BinomialUserMeans(num_silos=n, items_per_user=m, dim=d)
    points = spec.load(seed=draw, trial=0).x_train[:, 0, :]
    centre = points.mean(axis=0)
    moves = np.linalg.norm(points - centre, axis=1) / (n - 1)            # ||theta*(x) - theta*(x_{-i})||
    arranged = points.copy()
    arranged[0] = 1.0 / np.sqrt(d)                                       # user 0 holds m copies of (1, .., 1)/sqrt(d)
    arranged_moves = np.linalg.norm(arranged - arranged.mean(axis=0), axis=1) / (n - 1)
    corners = -np.where(points >= 0, 1.0, -1.0) / np.sqrt(d)            # each user's farthest corner
    replaced = np.linalg.norm(points - corners, axis=1).max() / n
    return {"problem": "mean", "d": d, "mu": 1.0, "n": n, "m": m, "draw": draw, "d1": float(moves.max()),
            "arranged_d1": float(arranged_moves.max()), "replacement_move": float(replaced), "one_step_gap": 0.0}


def logistic_users(n: int, m: int, draw: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([draw, n, m])
    theta = rng.standard_normal(RIDGE_DIM)
    theta *= SIGNAL / np.linalg.norm(theta)
    a = rng.standard_normal((n, m, RIDGE_DIM)) / np.sqrt(RIDGE_DIM)
    a /= np.maximum(1.0, np.linalg.norm(a, axis=2, keepdims=True))
    b = np.where(rng.random((n, m)) < expit(a @ theta), 1.0, -1.0)
    return a * b[..., None], b                                            # the loss reads only b a


def user_terms(theta: np.ndarray, signed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every user's average gradient (n, d) and Hessian (n, d, d) of log(1 + exp(-<b a, theta>))."""
    margin = signed @ theta
    weight = expit(-margin)                                               # -dl/dz
    gradients = -np.einsum("um,umd->ud", weight, signed) / signed.shape[1]
    curvature = weight * (1.0 - weight)
    hessians = np.einsum("um,umd,ume->ude", curvature, signed, signed) / signed.shape[1]
    return gradients, hessians


def newton(signed: np.ndarray, mu: float, theta: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """argmin of the mean over the kept users of their average loss + (mu/2)||theta||^2."""
    users = signed if keep is None else signed[keep]
    for _ in range(100):
        gradients, hessians = user_terms(theta, users)
        gradient = gradients.mean(axis=0) + mu * theta
        if np.linalg.norm(gradient) <= 1e-13:
            return theta
        theta = theta - np.linalg.solve(hessians.mean(axis=0) + mu * np.eye(theta.size), gradient)
    raise RuntimeError(f"Newton stopped at gradient norm {np.linalg.norm(gradient):.3g}")


def logistic_cell(n: int, m: int, mu: float, draw: int) -> dict:
    signed, _ = logistic_users(n, m, draw)
    full = newton(signed, mu, np.zeros(RIDGE_DIM))
    gradients, hessians = user_terms(full, signed)
    spread = gradients - gradients.mean(axis=0)                           # u_i; grad L_{-i}(theta*) = -u_i / (n - 1)
    reduced = (hessians.sum(axis=0)[None] - hessians) / (n - 1) + mu * np.eye(RIDGE_DIM)[None]
    steps = np.linalg.solve(reduced, spread[..., None])[..., 0] / (n - 1)
    approximate = np.linalg.norm(steps, axis=1)
    keep = np.ones(n, dtype=bool)
    exact, gaps = [], []
    for user in np.argsort(approximate)[-3:]:
        keep[user] = False
        move = float(np.linalg.norm(newton(signed, mu, full + steps[user], keep) - full))
        keep[user] = True
        exact.append(move)
        gaps.append(abs(approximate[user] - move) / move)
    return {"problem": "ridge_logistic", "d": RIDGE_DIM, "mu": mu, "n": n, "m": m, "draw": draw, "d1": max(exact),
            "arranged_d1": "", "replacement_move": "", "one_step_gap": max(gaps)}


def cells():
    for d, n, m, draw in itertools.product(MEAN_DIMS, USERS, ITEMS, range(DRAWS)):
        yield mean_cell, (n, m, d, draw)
    for mu, n, m, draw in itertools.product(RIDGES, USERS, ITEMS, range(DRAWS)):
        yield logistic_cell, (n, m, mu, draw)


def main() -> None:
    started = time.perf_counter()
    rows = []
    for count, (cell, args) in enumerate(cells(), 1):
        row = cell(*args)
        row["s"] = row["d1"] * row["mu"] * (row["n"] - 1) * math.sqrt(row["m"]) / LIPSCHITZ
        rows.append(row)
        if count % 200 == 0:
            print(f"{count} draws, {time.perf_counter() - started:.0f} s", flush=True)
    write_csv(HERE / "draws.csv", rows)
    report(read_draws(HERE / "draws.csv"))
    print(f"wall time {time.perf_counter() - started:.1f} s")


def read_draws(path: Path) -> list[dict]:
    rows = []
    for r in csv.DictReader(open(path)):
        rows.append({**r, **{k: float(r[k]) if r[k] != "" else math.nan
                             for k in ("d1", "s", "mu", "arranged_d1", "replacement_move", "one_step_gap")},
                     "n": int(r["n"]), "m": int(r["m"]), "d": int(r["d"])})
    return rows


def report(rows: list[dict]) -> None:
    rng = np.random.default_rng(0)
    cases = sorted({(r["problem"], r["d"], r["mu"]) for r in rows})
    summary, slopes = [], []
    for problem, d, mu in cases:
        mine = [r for r in rows if (r["problem"], r["d"], r["mu"]) == (problem, d, mu)]
        for n, m in itertools.product(USERS, ITEMS):
            cell = [r for r in mine if (r["n"], r["m"]) == (n, m)]
            bound = 5 * math.sqrt(math.log(n / BETA))
            summary.append({"problem": problem, "d": d, "mu": mu, "n": n, "m": m, "draws": len(cell),
                            "d1_mean": float(np.mean([r["d1"] for r in cell])),
                            "s_max": max(r["s"] for r in cell), "s_bound": bound,
                            "within_bound": float(np.mean([r["s"] <= bound for r in cell])),
                            "arranged_d1_mean": float(np.mean([r["arranged_d1"] for r in cell])),
                            "replacement_move_mean": float(np.mean([r["replacement_move"] for r in cell])),
                            "one_step_gap_max": max(r["one_step_gap"] for r in cell)})
        # the slope in m over every m, and over m >= 16 (at small m a user's mean is capped by the
        # items' range, so the largest deviation has not reached its sqrt(2 ln n) Gaussian tail)
        for variable, fixed_values, keys in (("m", USERS, ITEMS), ("m>=16", USERS, ITEMS[2:]), ("n", ITEMS, USERS)):
            keys = list(keys)
            for fixed in fixed_values if len(keys) > 1 else ():
                pick = {k: [r for r in mine if (r["n"], r["m"]) == ((k, fixed) if variable == "n" else (fixed, k))]
                        for k in keys}
                for column in ("d1", "arranged_d1", "replacement_move"):
                    draws = {k: np.array([r[column] for r in pick[k]]) for k in keys}
                    if np.isnan(draws[keys[0]]).any():
                        continue
                    slope = log_slope(np.array(keys, float), np.array([draws[k].mean() for k in keys]))
                    low, high = bootstrap_log_slope(keys, [draws[k] for k in keys], rng)
                    slopes.append({"problem": problem, "d": d, "mu": mu, "measure": column, "variable": variable,
                                   "fixed": f"{'m' if variable == 'n' else 'n'}={fixed}", "slope": slope,
                                   "ci95_low": low, "ci95_high": high})
    write_csv(HERE / "summary.csv", summary)
    write_csv(HERE / "slopes.csv", slopes)
    figure(summary, HERE / "figure.png")
    for s in slopes:
        if s["measure"] == "d1":
            print(f"{s['problem']} d={s['d']} mu={s['mu']:g} D1 vs {s['variable']} at {s['fixed']}: "
                  f"{s['slope']:.3f} [{s['ci95_low']:.3f}, {s['ci95_high']:.3f}]")
    print(f"s within 5 sqrt(ln(n/beta)): {min(c['within_bound'] for c in summary):.3f} of draws in the worst cell; "
          f"largest s / bound {max(c['s_max'] / c['s_bound'] for c in summary):.3f}")


def figure(summary: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({(c["problem"], c["d"], c["mu"]) for c in summary})
    fig, axes = plt.subplots(2, len(cases), figsize=(4 * len(cases), 7.5), squeeze=False)
    for column, case in enumerate(cases):
        mine = [c for c in summary if (c["problem"], c["d"], c["mu"]) == case]
        title = f"{case[0]}, d={case[1]}" + (f", mu={case[2]:g}" if case[0] != "mean" else "")
        top, bottom = axes[0, column], axes[1, column]
        for n in USERS:                   # D1 against m, one line per n
            cells = [c for c in mine if c["n"] == n]
            top.plot([c["m"] for c in cells], [c["d1_mean"] for c in cells], marker="o", ms=3, label=f"n={n}")
            if case[0] == "mean" and n == USERS[0]:
                top.plot([c["m"] for c in cells], [c["arranged_d1_mean"] for c in cells], "k--", lw=0.8,
                         label="arranged (control i)")
                top.plot([c["m"] for c in cells], [c["replacement_move_mean"] for c in cells], "k:", lw=0.8,
                         label="replacement (control ii)")
        top.set(xscale="log", yscale="log", xlabel="items per user m", ylabel="D1 (mean of draws)", title=title)
        top.legend(fontsize=6)
        for m in ITEMS:                   # the normalised s against n: flat if D1 ~ G / (mu n sqrt m)
            cells = [c for c in mine if c["m"] == m]
            bottom.plot([c["n"] for c in cells], [c["s_max"] for c in cells], marker="o", ms=3, label=f"m={m}")
        bottom.plot(USERS, [5 * math.sqrt(math.log(n / BETA)) for n in USERS], "k--", lw=0.8,
                    label="5 sqrt(ln(n/beta))")
        bottom.set(xscale="log", yscale="log", xlabel="users n", ylabel="max over draws of s")
        bottom.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if "--report" in sys.argv:
        report(read_draws(HERE / "draws.csv"))
    else:
        main()
