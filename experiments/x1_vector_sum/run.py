"""X1: the error of the shuffle-private vector sum P_vec (seed-000 §2.2, §7 tests 3-4).

For every cell (n, d, eps), delta = 1e-6, Delta2 = 1, it sums n unit vectors with P_vec
(``aggregate_counts`` + ``analyze_counts``, the exact M3 form) R times and compares the measured
E||o - sum_i x_i||^2 with ``exact_mse(x)``, the closed ``mse_bound()``, and two Gaussian
references at the same (eps, delta) and replace-one sensitivity 2 Delta2: the central sum (one
N(0, s^2 I_d) on the true sum, MSE = d s^2) and local noise (every user adds N(0, s^2 I_d), MSE =
n d s^2), s = analytic_sigma(eps, delta, 2). The two references are closed forms, not simulated.
Writes results.csv, slopes.csv and figure.png next to this file and prints the tables.

    python experiments/x1_vector_sum/run.py
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np
from scipy.stats import chi2

from fedray.privacy.gaussian import analytic_sigma
from fedray.privacy.vector_sum import (
    aggregate_counts,
    analyze_counts,
    vector_sum_parameters,
)
from fedray.rng import Stream, generator

HERE = Path(__file__).resolve().parent
SEED = 1
NS = (10**2, 10**3, 10**4, 10**5, 10**6)
DS = (1, 10, 100)
EPSILONS = (1.0, 4.0, 15.0)
DELTA, L2_BOUND = 1e-6, 1.0
CHUNK = 2**22          # coordinates per aggregate_counts call: keeps the n = 1e6, d = 100 cell near 1 GB
BOOTSTRAP = 2000


def repetitions(n: int) -> int:
    """Fewer repetitions where one costs n d draws; the d = 1 cells at large n are the noisiest."""
    return 200 if n <= 10**4 else 50 if n == 10**5 else 10


def unit_vectors(n: int, d: int) -> np.ndarray:
    """n vectors uniform on the unit sphere: the worst-case norm, generic rounding fractions.

    Keyed by (n, d) only, so the three eps cells of one (n, d) see the same inputs and differ only
    in the protocol's noise.
    """
    x = generator(SEED, Stream.DATA, n, d).standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def chunks(x: np.ndarray):
    """Blocks of users. P_vec's counts are sums over users, and a sum of independent
    Binomial(n_k b, p) is Binomial(n b, p), so summing aggregate_counts over blocks has exactly
    the law of one call on all n users; blocks bound the temporaries to a few CHUNK-sized arrays."""
    step = max(1, CHUNK // x.shape[1])
    return (x[i:i + step] for i in range(0, x.shape[0], step))


def run_protocol(x: np.ndarray, params, reps: int, rng: np.random.Generator) -> np.ndarray:
    """The errors o - sum_i x_i (reps, d) of ``reps`` independent runs of P_vec on the same inputs."""
    target = x.sum(axis=0)
    out = np.empty((reps, x.shape[1]))
    for r in range(reps):
        ones = sum(aggregate_counts(block, params, rng) for block in chunks(x))
        out[r] = analyze_counts(ones, params) - target
    return out


def agreement(err: np.ndarray, exact: float) -> dict:
    """Tests of unbiasedness and of the exact MSE that do not lean on the empirical SE.

    With d = 1 and R = 10 the squared error is chi^2_1-like and its empirical SE is itself very
    noisy, so |measured - exact| / se can be large by chance. The errors are Gaussian to high
    accuracy (a Binomial(n b, p) with n b >= 2e7, plus rounding errors of variance <= 1/4 per
    coordinate) with per-coordinate variance exact / d (coordinates differ only in the rounding
    term, < 1e-5 of it), so sum_r ||e_r||^2 / (exact / d) ~ chi^2_{d R} under the claim: a
    two-sided p-value.
    The bias test is the per-coordinate mean error in units of its standard error sqrt(exact / d / R).
    """
    reps, d = err.shape
    stat = np.sum(err**2) / (exact / d)
    return {"bias_max_z": float(np.max(np.abs(err.mean(axis=0))) / np.sqrt(exact / d / reps)),
            "chi2_p": float(2 * min(chi2.cdf(stat, d * reps), chi2.sf(stat, d * reps)))}


def exact_mse(x: np.ndarray, params) -> float:
    """exact_mse summed over user blocks: it is a sum over users (rounding r(1 - r) and n b p(1 - p))."""
    return sum(params.exact_mse(block) for block in chunks(x))


def run_cells() -> tuple[list[dict], dict]:
    """One row per (n, d, eps), plus every repetition's squared error (the bootstrap needs them)."""
    rows, errors = [], {}
    for n in NS:
        for d in DS:
            x = unit_vectors(n, d)
            for eps in EPSILONS:
                params = vector_sum_parameters(eps, DELTA, d, n, L2_BOUND)
                reps = repetitions(n)
                e = run_protocol(x, params, reps, generator(SEED, Stream.NOISE, n, d, int(eps)))
                err = errors[n, d, eps] = np.sum(e**2, axis=1)
                s_central = analytic_sigma(eps, DELTA, 2.0 * L2_BOUND)
                row = {"n": n, "d": d, "eps": eps, "reps": reps, "mse_measured": err.mean(),
                       "mse_se": err.std(ddof=1) / np.sqrt(reps), "mse_exact": exact_mse(x, params),
                       "mse_bound": params.mse_bound(), "mse_central": d * s_central**2,
                       "mse_local": n * d * s_central**2}
                row["ratio_local_to_shuffle"] = row["mse_local"] / row["mse_measured"]
                row["ratio_shuffle_to_central"] = row["mse_measured"] / row["mse_central"]
                row["z_measured_exact"] = (row["mse_measured"] - row["mse_exact"]) / row["mse_se"]
                row.update(agreement(e, row["mse_exact"]))
                rows.append(row)
            del x
    return rows, errors


def slope(xs, samples, rng: np.random.Generator) -> tuple[float, float, float]:
    """Least-squares slope of log10(mean squared error) on log10(xs), with a 95% percentile
    bootstrap CI that resamples the repetitions of every cell independently (cells are independent)."""
    lx = np.log10(np.asarray(xs, dtype=float))
    point = np.polyfit(lx, np.log10([s.mean() for s in samples]), 1)[0]
    boot = np.stack([s[rng.integers(0, len(s), (BOOTSTRAP, len(s)))].mean(axis=1) for s in samples], axis=1)
    slopes = np.polyfit(lx, np.log10(boot).T, 1)[0]
    low, high = np.percentile(slopes, [2.5, 97.5])
    return float(point), float(low), float(high)


def fit_slopes(rows: list[dict], errors: dict) -> list[dict]:
    """Slopes in n (per d, eps), in d (per n, eps) and in eps (per n, d), measured and exact.

    The exact slope is the same fit on exact_mse: what the formula predicts for these grids
    (in d it exceeds 1 through ln(2/delta_hat) ln(1/gamma), delta_hat = delta/(d + 1))."""
    rng = np.random.default_rng(SEED)                          # bootstrap resampling only
    exact = {(r["n"], r["d"], r["eps"]): r["mse_exact"] for r in rows}
    out = []
    for axis, grid, fixed in (("n", NS, [(d, e) for d in DS for e in EPSILONS]),
                              ("d", DS, [(n, e) for n in NS for e in EPSILONS]),
                              ("eps", EPSILONS, [(n, d) for n in NS for d in DS])):
        for a, b in fixed:
            keys = {"n": [(v, a, b) for v in grid], "d": [(a, v, b) for v in grid],
                    "eps": [(a, b, v) for v in grid]}[axis]
            point, low, high = slope(grid, [errors[k] for k in keys], rng)
            fixed_names = [k for k in ("n", "d", "eps") if k != axis]
            exact_slope = np.polyfit(np.log10(grid), np.log10([exact[k] for k in keys]), 1)[0]
            out.append({"vs": axis, fixed_names[0]: a, fixed_names[1]: b, "slope": point,
                        "ci_low": low, "ci_high": high, "slope_exact": float(exact_slope)})
    return out


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def figure(rows: list[dict], path: Path) -> None:
    """MSE vs n per eps: P_vec should be flat in n, local Gaussian grows ~ n, central stays flat far below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(EPSILONS), figsize=(15, 4.8), sharey=True)
    colors = dict(zip(DS, ("tab:blue", "tab:orange", "tab:green")))
    for ax, eps in zip(axes, EPSILONS):
        for d in DS:
            cell = [r for r in rows if r["d"] == d and r["eps"] == eps]
            col = {key: [r[key] for r in cell] for key in cell[0]}
            n, c = col["n"], colors[d]
            ax.errorbar(n, col["mse_measured"], yerr=col["mse_se"], fmt="o", color=c, ms=5, capsize=3)
            ax.plot(n, col["mse_exact"], "--", color=c, lw=1.2)
            ax.plot(n, col["mse_bound"], ":", color=c, lw=1.5)
            ax.plot(n, col["mse_central"], "-", color=c, lw=0.6)
            ax.plot(n, col["mse_local"], "-.", color=c, lw=0.6)
        ax.set(xscale="log", yscale="log", xlabel="n (users)", title=f"eps = {eps:g}, delta = {DELTA:g}")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("E ||o - sum x_i||^2")
    # One legend entry per colour (d) and per line style (series), not per line.
    handles = [plt.Line2D([], [], color=colors[d], lw=3, label=f"d = {d}") for d in DS] + [
        plt.Line2D([], [], color="k", ls=ls, marker=m, lw=lw, label=label) for ls, m, lw, label in (
            ("none", "o", 1, "P_vec measured (+- SE)"), ("--", "", 1.2, "P_vec exact_mse"),
            (":", "", 1.5, "P_vec mse_bound (on top of exact)"), ("-", "", 0.6, "central Gaussian"),
            ("-.", "", 0.6, "local Gaussian"))]
    fig.legend(handles=handles, loc="center right", fontsize=8)
    fig.suptitle("X1: error of the shuffle vector sum P_vec vs n, Delta2 = 1 (Gaussian references: "
                 "closed forms, analytic sigma, sensitivity 2)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.83, 0.95))
    fig.savefig(path, dpi=120)


def summary(rows: list[dict], slopes: list[dict]) -> None:
    """The numbers the README's claims table quotes."""
    params = [vector_sum_parameters(r["eps"], DELTA, r["d"], r["n"], L2_BOUND) for r in rows]
    ref = vector_sum_parameters(1.0, DELTA, 10, 1000, L2_BOUND)
    print(f"\nparameters: p in [{min(q.bit_probability for q in params):.7f}, "
          f"{max(q.bit_probability for q in params):.7f}], smallest n b = "
          f"{min(q.num_users * q.noise_bits for q in params):.3g}; n=1e3, d=10, eps=1: g = {ref.scale}, "
          f"b = {ref.noise_bits} (seed-000 §2.2 reference: 64, 65479717)")
    z = [abs(r["z_measured_exact"]) for r in rows]
    worst = rows[int(np.argmax(z))]
    print(f"(a) largest |measured - exact| / se = {max(z):.2f} at n={worst['n']:g}, d={worst['d']}, "
          f"eps={worst['eps']:g} (reps {worst['reps']}, chi2 p = {worst['chi2_p']:.3g}); "
          f"cells > 2 se: {sum(v > 2 for v in z)}/{len(z)}, > 3 se: {sum(v > 3 for v in z)}/{len(z)}")
    p = min(r["chi2_p"] for r in rows)
    print(f"(a) exact chi^2 test of MSE = exact: smallest p = {p:.3g}, x {len(rows)} cells (Bonferroni) = "
          f"{p * len(rows):.3g}; cells with p < 0.05: {sum(r['chi2_p'] < 0.05 for r in rows)}/{len(rows)}")
    coords = sum(r["d"] for r in rows)
    print(f"(a) unbiasedness: largest per-coordinate |mean error| / se over {coords} coordinates = "
          f"{max(r['bias_max_z'] for r in rows):.2f}")
    for axis in ("n", "d", "eps"):
        s = [r for r in slopes if r["vs"] == axis]
        print(f"(b) slope vs {axis}: measured {min(r['slope'] for r in s):+.3f} .. {max(r['slope'] for r in s):+.3f}, "
              f"exact {min(r['slope_exact'] for r in s):+.3f} .. {max(r['slope_exact'] for r in s):+.3f}; "
              f"CI excludes the exact slope in {sum(not r['ci_low'] <= r['slope_exact'] <= r['ci_high'] for r in s)}"
              f"/{len(s)} fits")
    ratio = [r["mse_bound"] / r["mse_measured"] for r in rows]
    low = rows[int(np.argmin(ratio))]
    above = [r for r in rows if r["mse_measured"] > r["mse_bound"]]
    print(f"(c) measured > bound in {len(above)}/{len(rows)} cells, by at most "
          f"{max(((r['mse_measured'] - r['mse_bound']) / r['mse_se'] for r in above), default=0):.2f} se; "
          f"largest (bound - exact) / exact = {max(r['mse_bound'] / r['mse_exact'] - 1 for r in rows):.2e}")
    print(f"(c) bound / measured: min {min(ratio):.4f} (n={low['n']:g}, d={low['d']}, eps={low['eps']:g}), "
          f"max {max(ratio):.4f}")
    const = [r["mse_exact"] * r["eps"] ** 2 / (r["d"] * np.log(r["d"] / DELTA) ** 2) for r in rows]
    print(f"(b) hidden constant exact_mse * eps^2 / (d ln^2(d/delta)): {min(const):.3g} .. {max(const):.3g}")
    for n in NS:
        lr = [r["ratio_local_to_shuffle"] for r in rows if r["n"] == n]
        lx = [r["mse_local"] / r["mse_exact"] for r in rows if r["n"] == n]
        print(f"(d) local / shuffle at n={n:g}: measured {min(lr):.3g} .. {max(lr):.3g}, "
              f"with exact_mse {min(lx):.3g} .. {max(lx):.3g}")
    for eps in EPSILONS:
        sc = [r["ratio_shuffle_to_central"] for r in rows if r["eps"] == eps]
        sx = [r["mse_exact"] / r["mse_central"] for r in rows if r["eps"] == eps]
        # local / shuffle = n * central / shuffle: local noise wins below n = shuffle / central.
        print(f"(d) shuffle / central at eps={eps:g}: measured {min(sc):.3g} .. {max(sc):.3g}, "
              f"with exact_mse {min(sx):.3g} .. {max(sx):.3g} (= the n below which local Gaussian wins)")


def main() -> None:
    start = time.perf_counter()
    rows, errors = run_cells()
    slopes = fit_slopes(rows, errors)
    write_csv(HERE / "results.csv", rows, list(rows[0]))
    write_csv(HERE / "slopes.csv", slopes, ["vs", "n", "d", "eps", "slope", "ci_low", "ci_high", "slope_exact"])
    figure(rows, HERE / "figure.png")

    print("|      n |   d | eps | reps |  measured |   se/meas |     exact |     bound |   central |     local "
          "| local/shuf | shuf/central | chi2 p |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']:6.0e} | {r['d']:3d} | {r['eps']:3g} | {r['reps']:4d} | {r['mse_measured']:9.3e} "
              f"| {r['mse_se'] / r['mse_measured']:9.3f} | {r['mse_exact']:9.3e} | {r['mse_bound']:9.3e} "
              f"| {r['mse_central']:9.3e} | {r['mse_local']:9.3e} | {r['ratio_local_to_shuffle']:10.3g} "
              f"| {r['ratio_shuffle_to_central']:12.3g} | {r['chi2_p']:6.3f} |")
    print("\n| slope vs | fixed | measured [95% bootstrap CI] | exact formula |")
    print("|---|---|---|---|")
    for s in slopes:
        fixed = ", ".join(f"{k}={s[k]:g}" for k in ("n", "d", "eps") if k in s)
        print(f"| {s['vs']} | {fixed} | {s['slope']:+.3f} [{s['ci_low']:+.3f}, {s['ci_high']:+.3f}] "
              f"| {s['slope_exact']:+.3f} |")
    summary(rows, slopes)
    print(f"\nwall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
