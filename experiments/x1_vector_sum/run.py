"""X1: the error of the shuffle-private vector sum P_vec (seed-000 §2.2, §7 tests 3-4).

For every cell (n, d, eps), delta = 1e-6, Delta2 = 1, it sums n unit vectors with P_vec
(``aggregate_counts`` + ``analyze_counts``, the exact M3 form) R times and compares the measured
E||o - sum_i x_i||^2 with ``exact_mse(x)``, the closed ``mse_bound()``, and two Gaussian
references at the same (eps, delta) and replace-one sensitivity 2 Delta2: the central sum (one
N(0, s^2 I_d) on the true sum, MSE = d s^2) and local noise (every user adds N(0, s^2 I_d), MSE =
n d s^2), s = analytic_sigma(eps, delta, 2). The two references are closed forms, not simulated.

Two arms calibrate P_vec for the same (eps, delta): the paper's (``vector_sum_parameters``,
seed-000 §2.2; results.csv, slopes.csv) and the tight one (``tight_vector_sum_parameters``: p = 1/2
and the fewest trials b whose invocation is (eps, delta)-DP by its exact privacy loss, a sound
relaxation for d > 1; results_tight.csv). Both arms see the same inputs; the tight arm draws its
noise from the paper arm's noise key with one more coordinate (TIGHT_ARM), so the paper arm's
numbers are those of the paper-only script. Writes results.csv, slopes.csv, results_tight.csv and
figure.png next to this file and prints the tables.

    python experiments/x1_vector_sum/run.py
"""

from __future__ import annotations

import csv
import multiprocessing
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
from fedray.privacy.vector_sum_tight import axis_pair_bits, tight_vector_sum_parameters
from fedray.rng import Stream, generator

HERE = Path(__file__).resolve().parent
SEED = 1
NS = (10**2, 10**3, 10**4, 10**5, 10**6)
DS = (1, 10, 100)
EPSILONS = (1.0, 4.0, 15.0)
DELTA, L2_BOUND = 1e-6, 1.0
CHUNK = 2**22          # coordinates per aggregate_counts call: keeps the n = 1e6, d = 100 cell near 1 GB
BOOTSTRAP = 2000
TIGHT_ARM = 1          # extra noise-key coordinate of the tight arm: its draws are independent of the paper arm's


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


def tight_calibrations() -> dict:
    """The tight arm's parameters per (n, d, eps), with the seconds each took and the floor b
    (``axis_pair_bits``: the fewest trials the pair +-Delta2 e_1 alone needs at p = 1/2, so no sound
    calibration at p = 1/2 can use fewer). Computed before any input is drawn, so the PLDs of the
    d = 100 cells and the largest inputs never share memory."""
    out = {}
    for n in NS:
        for d in DS:
            for eps in EPSILONS:
                start = time.perf_counter()
                params = tight_vector_sum_parameters(eps, DELTA, d, n, L2_BOUND)
                seconds = time.perf_counter() - start
                floor = axis_pair_bits(eps, DELTA, n, params.scale)
                out[n, d, eps] = (params, seconds, floor)
                print(f"tight calibration n={n:g} d={d} eps={eps:g}: b = {params.noise_bits} (floor {floor}), "
                      f"delta {params.certified_delta:.3g}, {params.route}, {seconds:.1f} s", flush=True)
    return out


def tight_row(x: np.ndarray, eps: float, calibration: tuple, paper, reps: int) -> dict:
    """The tight arm's cell: measured and exact MSE, the Gaussian references, and the paper's b beside."""
    params, seconds, floor = calibration
    n, d = x.shape
    e = run_protocol(x, params, reps, generator(SEED, Stream.NOISE, n, d, int(eps), TIGHT_ARM))
    err = np.sum(e**2, axis=1)
    s_central = analytic_sigma(eps, DELTA, 2.0 * L2_BOUND)
    row = {"n": n, "d": d, "eps": eps, "reps": reps, "b_paper": paper.noise_bits, "p_paper": paper.bit_probability,
           "b_tight": params.noise_bits, "p_tight": params.bit_probability, "b_floor": floor,
           "route": params.route, "certified_delta": params.certified_delta, "calibration_s": seconds,
           "mse_measured": err.mean(), "mse_se": err.std(ddof=1) / np.sqrt(reps), "mse_exact": exact_mse(x, params),
           "mse_paper_exact": exact_mse(x, paper), "mse_central": d * s_central**2, "mse_local": n * d * s_central**2}
    # exact_mse with the floor's b (and p = 1/2): no sound P_vec calibration at p = 1/2 with this g goes lower.
    row["mse_floor_exact"] = row["mse_exact"] + d * (params.value_range / params.scale) ** 2 * n * (floor - params.noise_bits) / 4.0
    row["std_ratio"] = float(np.sqrt(paper.noise_bits * paper.bit_probability * (1 - paper.bit_probability)
                                     / (params.noise_bits * params.bit_probability * (1 - params.bit_probability))))
    row["ratio_local_to_shuffle"] = row["mse_local"] / row["mse_measured"]
    row["ratio_shuffle_to_central"] = row["mse_measured"] / row["mse_central"]
    row["z_measured_exact"] = (row["mse_measured"] - row["mse_exact"]) / row["mse_se"]
    row.update(agreement(e, row["mse_exact"]))
    return row


def run_cells() -> tuple[list[dict], dict, list[dict]]:
    """One row per (n, d, eps) for each arm, plus every paper-arm repetition's squared error (the
    bootstrap needs them). The tight calibrations run in a child process: the d = 100 PLDs take about
    0.5 GB that the interpreter would otherwise keep while the largest inputs are in memory."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        tight = pool.apply(tight_calibrations)
    rows, errors, tight_rows = [], {}, []
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
                tight_rows.append(tight_row(x, eps, tight[n, d, eps], params, reps))
            del x
    return rows, errors, tight_rows


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


def figure(rows: list[dict], tight_rows: list[dict], path: Path) -> None:
    """MSE vs n per eps, the paper's calibration (top) and the tight one (bottom), with the same
    Gaussian references in both rows: P_vec is flat in n, local Gaussian grows ~ n, central stays flat."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(EPSILONS), figsize=(15, 9), sharey=True, sharex=True)
    colors = dict(zip(DS, ("tab:blue", "tab:orange", "tab:green")))
    for arm, (arm_rows, label) in enumerate(((rows, "paper calibration"), (tight_rows, "tight calibration"))):
        for ax, eps in zip(axes[arm], EPSILONS):
            for d in DS:
                cell = [r for r in arm_rows if r["d"] == d and r["eps"] == eps]
                col = {key: [r[key] for r in cell] for key in cell[0]}
                n, c = col["n"], colors[d]
                ax.errorbar(n, col["mse_measured"], yerr=col["mse_se"], fmt="o" if arm == 0 else "s", color=c,
                            ms=5, capsize=3)
                ax.plot(n, col["mse_exact"], "--", color=c, lw=1.2)
                if arm == 0:
                    ax.plot(n, col["mse_bound"], ":", color=c, lw=1.5)
                else:
                    ax.plot(n, col["mse_paper_exact"], ":", color=c, lw=0.8, alpha=0.6)
                ax.plot(n, col["mse_central"], "-", color=c, lw=0.6)
                ax.plot(n, col["mse_local"], "-.", color=c, lw=0.6)
            ax.set(xscale="log", yscale="log", title=f"{label}: eps = {eps:g}, delta = {DELTA:g}")
            ax.grid(True, which="major", alpha=0.3)
        axes[arm][0].set_ylabel("E ||o - sum x_i||^2")
    for ax in axes[1]:
        ax.set_xlabel("n (users)")
    # One legend entry per colour (d) and per line style (series), not per line.
    handles = [plt.Line2D([], [], color=colors[d], lw=3, label=f"d = {d}") for d in DS] + [
        plt.Line2D([], [], color="k", ls=ls, marker=m, lw=lw, label=label) for ls, m, lw, label in (
            ("none", "o", 1, "P_vec measured, paper (+- SE)"), ("none", "s", 1, "P_vec measured, tight (+- SE)"),
            ("--", "", 1.2, "P_vec exact_mse (its arm)"),
            (":", "", 1.5, "top: mse_bound (on top of exact)"),
            (":", "", 0.8, "bottom: paper exact_mse, for scale"),
            ("-", "", 0.6, "central Gaussian"), ("-.", "", 0.6, "local Gaussian"))]
    fig.legend(handles=handles, loc="center right", fontsize=8)
    fig.suptitle("X1: error of the shuffle vector sum P_vec vs n, Delta2 = 1, paper vs tight calibration "
                 "(Gaussian references: closed forms, analytic sigma, sensitivity 2)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.83, 0.96))
    fig.savefig(path, dpi=120)


def claims(rows: list[dict], tight_rows: list[dict]) -> None:
    """The per-cell claims table of the README: for each arm, does P_vec beat local Gaussian
    (local / shuffle > 1), and shuffle / central, both with the measured MSE, the exact formula's in
    brackets; where the two arms' verdicts on local differ, the change is named."""
    def verdict(r: dict) -> str:
        measured, exact = r["mse_local"] > r["mse_measured"], r["mse_local"] > r["mse_exact"]
        word = "yes" if measured else "no"
        return word if measured == exact else f"{word} (exact: {'yes' if exact else 'no'})"

    print("\n| n | d | eps | paper: beats local? local/shuf [exact] | paper: shuf/central [exact] "
          "| tight: beats local? local/shuf [exact] | tight: shuf/central [exact] | tight b floor: shuf/central "
          "| verdict on local |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r, t in zip(rows, tight_rows):
        assert (r["n"], r["d"], r["eps"]) == (t["n"], t["d"], t["eps"])
        changed = "changes: no -> yes" if verdict(t).startswith("yes") and not verdict(r).startswith("yes") \
            else "same" if verdict(t)[:3] == verdict(r)[:3] else "changes: yes -> no"
        print(f"| {r['n']:.0e} | {r['d']} | {r['eps']:g} "
              f"| {verdict(r)}: {r['ratio_local_to_shuffle']:.3g} [{r['mse_local'] / r['mse_exact']:.3g}] "
              f"| {r['ratio_shuffle_to_central']:.3g} [{r['mse_exact'] / r['mse_central']:.3g}] "
              f"| {verdict(t)}: {t['ratio_local_to_shuffle']:.3g} [{t['mse_local'] / t['mse_exact']:.3g}] "
              f"| {t['ratio_shuffle_to_central']:.3g} [{t['mse_exact'] / t['mse_central']:.3g}] "
              f"| {t['mse_floor_exact'] / t['mse_central']:.3g} | {changed} |")


def tight_summary(tight_rows: list[dict]) -> None:
    """The tight arm's numbers the README quotes: agreement with exact_mse, ratios per d and eps."""
    z = [abs(r["z_measured_exact"]) for r in tight_rows]
    worst = tight_rows[int(np.argmax(z))]
    p = min(r["chi2_p"] for r in tight_rows)
    print(f"\n(tight a) largest |measured - exact| / se = {max(z):.2f} at n={worst['n']:g}, d={worst['d']}, "
          f"eps={worst['eps']:g} (chi2 p = {worst['chi2_p']:.3g}); > 2 se: {sum(v > 2 for v in z)}/{len(z)}, "
          f"> 3 se: {sum(v > 3 for v in z)}/{len(z)}; smallest chi2 p = {p:.3g} (x {len(z)} = {p * len(z):.3g}); "
          f"largest bias z = {max(r['bias_max_z'] for r in tight_rows):.2f}")
    print(f"(tight) calibration time: total {sum(r['calibration_s'] for r in tight_rows):.0f} s, largest "
          f"{max(r['calibration_s'] for r in tight_rows):.1f} s; std ratio paper / tight "
          f"{min(r['std_ratio'] for r in tight_rows):.0f} .. {max(r['std_ratio'] for r in tight_rows):.0f}; "
          f"largest certified delta {max(r['certified_delta'] for r in tight_rows):.3g}")
    for d in DS:
        for eps in EPSILONS:
            cell = [r for r in tight_rows if r["d"] == d and r["eps"] == eps]
            sc = [r["mse_exact"] / r["mse_central"] for r in cell]
            fl = [r["mse_floor_exact"] / r["mse_central"] for r in cell]
            lose = [r["n"] for r in cell if r["mse_local"] <= r["mse_measured"]]
            print(f"(tight) d={d} eps={eps:g}: b {min(r['b_tight'] for r in cell)} .. {max(r['b_tight'] for r in cell)} "
                  f"(floor {min(r['b_floor'] for r in cell)} .. {max(r['b_floor'] for r in cell)}), shuf/central "
                  f"exact {min(sc):.3g} .. {max(sc):.3g}, at the floor b {min(fl):.3g} .. {max(fl):.3g}; "
                  f"local wins (measured) at n = {[f'{v:g}' for v in lose]}")


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
    rows, errors, tight_rows = run_cells()
    slopes = fit_slopes(rows, errors)
    write_csv(HERE / "results.csv", rows, list(rows[0]))
    write_csv(HERE / "slopes.csv", slopes, ["vs", "n", "d", "eps", "slope", "ci_low", "ci_high", "slope_exact"])
    write_csv(HERE / "results_tight.csv", tight_rows, list(tight_rows[0]))
    figure(rows, tight_rows, HERE / "figure.png")

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
    print("\n| tight arm: n |   d | eps | reps |  b paper | b tight | b floor | std ratio | measured | se/meas "
          "|    exact | central |    local | local/shuf | shuf/central | chi2 p |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in tight_rows:
        print(f"| {r['n']:6.0e} | {r['d']:3d} | {r['eps']:3g} | {r['reps']:4d} | {r['b_paper']} | {r['b_tight']} "
              f"| {r['b_floor']} | {r['std_ratio']:.0f} | {r['mse_measured']:9.3e} | {r['mse_se'] / r['mse_measured']:.3f} "
              f"| {r['mse_exact']:9.3e} | {r['mse_central']:9.3e} | {r['mse_local']:9.3e} "
              f"| {r['ratio_local_to_shuffle']:10.3g} | {r['ratio_shuffle_to_central']:12.3g} | {r['chi2_p']:6.3f} |")
    tight_summary(tight_rows)
    claims(rows, tight_rows)
    print(f"\nwall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
