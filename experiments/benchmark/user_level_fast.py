"""Seed 002's Alg. 3 (accelerated phased ERM with outlier-gradient removal) through fedray against a
one-process numpy loop running the same phases.

fedray runs its normal path (Hydra overrides -> make_plan -> local Ray, runtime.num_actors=2 ->
fedray.runtime.driver.run): the users live in two actors, each step the sampled users' mean
gradients come back to the driver, which tests, filters, noises and takes the AC-SA step. The
numpy reference is written here from the spec's pseudocode (§2.2, §2.3): the same public schedule
(n_i, T_i, K_i, lambda_i, sigma_i, tau, the GL13 stage lengths, read from the plan), the same
records, its own user sampling, concentration test, filter, noise and AC-SA recursion (alpha_t =
2 / (t + 1), gamma_t = 4 Ls / (t (t + 1)), Ls = beta + lambda_i, mu = lambda_i), with draws of its
own: the two runs have the same law, not the same bits. Both carry R replicas (repetitions).

Printed: seconds (fedray's from the call, Ray's start included, and per step after the first
round), gradient evaluations per second, the ratio fedray / numpy, peak memory (fedray's actors by
VmHWM, the reference by tracemalloc), halts and the mean excess risk ||x - w*||^2 / (2 d) of both.
No timing is asserted.

    python experiments/benchmark/user_level_fast.py                     # n = 2e4, m = 64, d = 20, R = 4
    python experiments/benchmark/user_level_fast.py --replicas 20       # the same at R = 20 (the README's table)
    python experiments/benchmark/user_level_fast.py --users 2000 --replicas 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")     # one core for the reference, as each actor has
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedray.compose import compose_plan  # noqa: E402
from shuffle_sco import GIB, ProcessWatch, run_fedray  # noqa: E402


def numpy_alg3(x: np.ndarray, y: np.ndarray, resolved: dict, eps: float, beta: float, radius: float,
               replicas: int, seed: int) -> tuple[np.ndarray, np.ndarray, int, float]:
    """(P, d) outputs, (P,) halted, gradient evaluations of replica 0, seconds: Alg. 3 on users
    x (n, m, d), y (n, m) with the half squared loss, the schedule ``resolved`` (the plan's)."""
    n, m, d = x.shape
    rng = np.random.default_rng(seed)
    users, steps, batch = resolved["phase_users"], resolved["phase_steps"], resolved["phase_batch"]
    lam0, exponent, tau, sigma = resolved["regularization"], resolved["exponent"], resolved["threshold"], \
        resolved["noise_std"]
    outputs, halted, gradients = np.zeros((replicas, d)), np.zeros(replicas, dtype=bool), 0
    start = time.perf_counter()
    for r in range(replicas):
        prev, first, count = np.zeros(d), 0, 0
        for i, (n_i, t_i, k_i) in enumerate(zip(users, steps, batch)):
            lam, ls = lam0 * 2.0 ** (exponent * (i + 1)), beta + lam0 * 2.0 ** (exponent * (i + 1))
            level = 0.8 * k_i + rng.laplace(scale=8 / eps)
            w = w_ag = prev.copy()
            stage_t, stages, stage = 0, list(resolved["stages"][i]), 0
            for t in range(t_i):
                s_t = stage_t + 1
                alpha, gamma = 2.0 / (s_t + 1), 4 * ls / (s_t * (s_t + 1))
                w_md = ((1 - alpha) * (lam + gamma) * w_ag + alpha * ((1 - alpha) * lam + gamma) * w) \
                    / (gamma + (1 - alpha**2) * lam)
                chosen = first + rng.choice(n_i, size=k_i, replace=False)
                xs, ys = x[chosen], y[chosen]                                   # (K, m, d), (K, m)
                q = np.einsum("kmd,km->kd", xs, xs @ w_md - ys) / m              # user mean gradients
                count += k_i * m
                dist = np.linalg.norm(q - q.mean(axis=0), axis=1)
                if dist.max() * (1 + 1e-9) <= tau:                            # every pair within 2 tau
                    score, h = float(k_i), np.full(k_i, float(k_i))
                else:
                    close = np.linalg.norm(q[:, None] - q[None], axis=2) <= 2 * tau
                    h = close.sum(axis=1).astype(float)
                    score = h.mean()
                if score + rng.laplace(scale=16 / eps) < level:
                    halted[r] = True
                    break
                keep_p = np.clip((h - k_i / 2) / (k_i / 6), 0.0, 1.0)
                kept = rng.random(k_i) < keep_p
                g = q[kept].mean(axis=0) if kept.any() else np.zeros(d)
                grad = g + sigma[i] * rng.standard_normal(d) + lam * (w_md - prev)
                w_new = (alpha * lam * w_md + ((1 - alpha) * lam + gamma) * w - alpha * grad) / (lam + gamma)
                norm = np.linalg.norm(w_new)
                w = w_new if norm <= radius else w_new * (radius / norm)
                w_ag = alpha * w + (1 - alpha) * w_ag
                stage_t += 1
                if stage < len(stages) and stage_t == stages[stage]:             # GL13: restart at x_ag
                    w, stage_t, stage = w_ag.copy(), 0, stage + 1
            if halted[r]:
                break
            prev, first = w_ag, first + n_i
        outputs[r] = 0.0 if halted[r] else prev
        gradients = count if r == 0 else gradients
    return outputs, halted, gradients, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--dim", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--kappa", type=float, default=1e-3)
    parser.add_argument("--actors", type=int, default=2)
    args = parser.parse_args(argv)
    n, m, d, reps = args.users, args.items, args.dim, args.replicas
    delta = 1.0 / (10 * n * m)
    plan = compose_plan(["experiment=user_level_sphere", f"data.spec.num_silos={n}", f"data.spec.samples_per_silo={m}",
                         f"data.spec.dim={d}", f"repetitions={reps}", f"privacy.epsilon={args.epsilon}",
                         f"privacy.delta={delta}", "algorithm.profile=exploratory", f"algorithm.kappa={args.kappa}",
                         "progress=false", f"runtime.num_actors={args.actors}", f"evaluate_every={10**9}"])
    resolved = plan.protocol.resolved
    per_run = resolved["gradients_no_halt"]
    print(f"## Alg. 3 on P1: n = {n:,} users x m = {m}, d = {d}, {reps} replicas, eps = {args.epsilon} (nominal, "
          f"exploratory kappa = {args.kappa:g}); {resolved['phases']} phases, sum T_i = {plan.num_rounds} steps, "
          f"K_1 = {resolved['phase_batch'][0]}, {per_run:,} gradient evaluations per replica")
    with ProcessWatch() as watch:
        result, _, fedray_seconds = run_fedray(plan)
    actors = watch.actor_peaks("ray::SiloGroup")
    fed = plan.dataset.load(plan.seed, plan.trial)
    w_star = plan.dataset.optimum(plan.seed, plan.trial)
    tracemalloc.start()
    output, halted, count, numpy_seconds = numpy_alg3(fed.x_train, fed.y_train, resolved, args.epsilon, 1.0, 1.0, reps,
                                                      plan.seed)
    numpy_peak = tracemalloc.get_traced_memory()[1] / GIB
    tracemalloc.stop()
    excess = lambda out: ((out - w_star) ** 2).sum(axis=1) / (2 * d)       # noqa: E731
    fedray_excess, numpy_excess = excess(result.model[:, :, 0]), excess(output)
    fedray_halts = int(result.history[-1]["halted"].sum())
    total = per_run * reps
    print("| runner | seconds | gradient evaluations per second | ratio to numpy | peak memory (GiB) | halted | "
          "mean excess risk |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| fedray ({args.actors} actor{'s' * (args.actors > 1)}) | {fedray_seconds:.1f} | {total / fedray_seconds:.3g} | "
          f"{fedray_seconds / numpy_seconds:.2f} | {max(actors, default=float('nan')):.3f} per actor | "
          f"{fedray_halts} of {reps} | {fedray_excess.mean():.3g} |")
    print(f"| numpy loop (1 process) | {numpy_seconds:.1f} | {total / numpy_seconds:.3g} | 1.00 | "
          f"{numpy_peak:.3f} (tracemalloc) | {int(halted.sum())} of {reps} | {numpy_excess.mean():.3g} |")
    rounds = plan.num_rounds
    after_first = result.wall_time - result.time_to_first_round
    print(f"after the first round (Ray and the actors up): fedray {after_first:.1f} s for {rounds - 1} steps, "
          f"{1e3 * after_first / (rounds - 1):.1f} ms per step against numpy's {1e3 * numpy_seconds / rounds:.1f} "
          f"(ratio {after_first / (rounds - 1) / (numpy_seconds / rounds):.2f}); start-up and first round "
          f"{result.time_to_first_round:.1f} s")
    print(f"gradient evaluations of one replica: fedray {int(result.history[-1]['gradient_evaluations'][0]):,}, "
          f"numpy {count:,}, formula {per_run:,}; zero model's excess risk {excess(np.zeros((1, d)))[0]:.3g}")
    return {"fedray_seconds": fedray_seconds, "numpy_seconds": numpy_seconds, "fedray_excess": fedray_excess,
            "numpy_excess": numpy_excess}


if __name__ == "__main__":
    main()
