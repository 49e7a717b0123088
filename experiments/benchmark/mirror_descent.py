"""Seed 001's Alg. 1 (private stochastic mirror descent with vertex sampling) on the padded
bilinear game through fedray against a one-process numpy loop doing the same steps.

fedray runs its normal path (Hydra overrides -> make_plan -> local Ray, runtime.num_actors=2 ->
fedray.runtime.driver.run): the samples live in two actors, a block of steps runs in the actor
holding its samples (the curator's draws included) and the driver adopts the block's end state.
The numpy reference is written here from the paper's pseudocode (spec §3.1), independently of
fedray's code: the same samples (each sample's +-1 signs are the first 2d bits of Philox keyed by
(seed, DATA, trial) at counter = sample id: the data's definition), its own softmax, its own
inverse-CDF draws (np.searchsorted on the cumulative sum) from the same per-replica uniforms, its
own gradients. Both carry R replicas (repetitions) at once.

Printed: seconds per run and per step, the ratio fedray / numpy, peak memory (the reference by
tracemalloc; fedray's actors by VmHWM), and the mean gap of both (the same law; the draws agree
bit for bit unless rounding in the two samplers' sums splits a draw). No timing is asserted.

    python experiments/benchmark/mirror_descent.py                          # n = 10^6, d = 2^15, R = 20
    python experiments/benchmark/mirror_descent.py --samples 100000 --dim 32768 --replicas 20
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

DATA_STREAM, VERTEX_STREAM = 1, 9        # fedray.rng.Stream codes: the data's and the curator's draws


def philox(seed: int, stream: int, *coords: int) -> np.random.Philox:
    key = np.random.SeedSequence([seed, stream, *coords]).generate_state(2, dtype=np.uint64)
    return np.random.Philox(key=key)


def words_at(bits: np.random.Philox, counter: int, count: int) -> np.ndarray:
    state = bits.state
    state["state"]["counter"] = np.array([0, 0, 0, counter], dtype=np.uint64)
    state["buffer_pos"], state["has_uint32"] = 4, 0
    bits.state = state
    return bits.random_raw(count)


def padded_times(y: np.ndarray, a: float) -> np.ndarray:
    """Abar y of the padded game (base 0.25 cyclic 3 x 3, +a / -a padding blocks)."""
    base = 0.25 * np.array([[0.0, 1.0, -1.0], [-1.0, 0.0, 1.0], [1.0, -1.0, 0.0]])
    out = np.empty_like(y)
    out[:, 3:] = a * y[:, :3].sum(axis=1, keepdims=True)
    out[:, :3] = y[:, :3] @ base.T - a * y[:, 3:].sum(axis=1, keepdims=True)
    return out


def padded_transpose_times(x: np.ndarray, a: float) -> np.ndarray:
    base = 0.25 * np.array([[0.0, 1.0, -1.0], [-1.0, 0.0, 1.0], [1.0, -1.0, 0.0]])
    out = np.empty_like(x)
    out[:, 3:] = -a * x[:, :3].sum(axis=1, keepdims=True)
    out[:, :3] = x[:, :3] @ base + a * x[:, 3:].sum(axis=1, keepdims=True)
    return out


def numpy_alg1(seed: int, trial: int, streams: np.ndarray, d: int, steps: int, batch: int, tau: np.ndarray,
               a: float = 0.5, s: float = 0.5) -> tuple[np.ndarray, float]:
    """(P, 2d) the released output (average of the T output draws) of Alg. 1 with K = 1, and seconds."""
    p = len(tau)
    data = philox(seed, DATA_STREAM, trial)
    vertex = [philox(seed, VERTEX_STREAM, *row) for row in streams]
    sx, sy = np.zeros((p, d)), np.zeros((p, d))
    out_x, out_y = np.zeros((p, d)), np.zeros((p, d))
    rows = np.arange(p)
    start = time.perf_counter()
    words = -(-2 * d // 64)
    for t in range(steps):
        x = np.exp(sx - sx.max(axis=1, keepdims=True))
        y = np.exp(sy - sy.max(axis=1, keepdims=True))
        cx, cy = np.cumsum(x, axis=1), np.cumsum(y, axis=1)
        u = np.stack([(words_at(g, t, 4) >> np.uint64(11)) * 2.0**-53 for g in vertex])   # (P, 4)
        i = np.array([np.searchsorted(cx[r], u[r, :2] * cx[r, -1], side="right") for r in rows])
        j = np.array([np.searchsorted(cy[r], u[r, 2:] * cy[r, -1], side="right") for r in rows])
        out_x[rows, i[:, 1]] += 1
        out_y[rows, j[:, 1]] += 1
        signs = np.stack([words_at(data, n, words) for n in range(t * batch, (t + 1) * batch)])
        signs = 1.0 - 2.0 * np.unpackbits(signs.view(np.uint8), axis=1, count=2 * d)
        u_z, v_z = signs[:, :d], signs[:, d:]
        xhat, yhat = np.zeros((p, d)), np.zeros((p, d))
        xhat[rows, i[:, 0]] = 1.0
        yhat[rows, j[:, 0]] = 1.0
        grad_x = batch * padded_times(yhat, a) + s * v_z[:, j[:, 0]].T @ u_z       # sum_z A_z yhat
        grad_y = batch * padded_transpose_times(xhat, a) + s * u_z[:, i[:, 0]].T @ v_z
        sx -= tau[:, None] / batch * grad_x
        sy += tau[:, None] / batch * grad_y
    return np.concatenate([out_x, out_y], axis=1) / steps, time.perf_counter() - start


def gap(output: np.ndarray, d: int, a: float = 0.5) -> np.ndarray:
    return padded_transpose_times(output[:, :d], a).max(axis=1) - padded_times(output[:, d:], a).min(axis=1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=2**15)
    parser.add_argument("--replicas", type=int, default=20)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args(argv)
    n, d, reps = args.samples, args.dim, args.replicas
    plan = compose_plan(["experiment=smd_bilinear", f"data.spec.num_samples={n}", f"data.spec.dim={d}",
                         f"repetitions={reps}", f"privacy.epsilon={args.epsilon}", "progress=false",
                         "runtime.num_actors=2", f"evaluate_every={10**9}"])
    steps, batch, tau = plan.num_rounds, plan.sampler.batch_size, plan.step_sizes
    print(f"## Alg. 1 on the padded bilinear game: n = {n:,}, d = {d:,}, {reps} replicas, eps = {args.epsilon}, "
          f"regime (7): T = {steps:,} steps of B = {batch}, K = 1, tau = {tau[0]:.4g}")
    with ProcessWatch() as watch:
        result, _, fedray_seconds = run_fedray(plan)
    actors = watch.actor_peaks("ray::SiloGroup")
    tracemalloc.start()
    output, numpy_seconds = numpy_alg1(plan.seed, plan.trial, plan.replicas.streams, d, steps, batch, tau)
    numpy_peak = tracemalloc.get_traced_memory()[1] / GIB
    tracemalloc.stop()
    same = float(np.mean(np.all(output == result.outputs["output"], axis=1)))
    fedray_gap, numpy_gap = result.final["gap"], gap(output, d)
    print("| runner | seconds | ms per step | ratio to numpy | peak memory (GiB) | mean gap (± 2 se) |")
    print("|---|---:|---:|---:|---:|---:|")
    se = lambda g: 2 * g.std(ddof=1) / np.sqrt(len(g))          # noqa: E731
    print(f"| fedray (2 actors) | {fedray_seconds:.1f} | {1e3 * fedray_seconds / steps:.2f} | "
          f"{fedray_seconds / numpy_seconds:.2f} | {max(actors, default=float('nan')):.3f} per actor | "
          f"{fedray_gap.mean():.4f} ± {se(fedray_gap):.4f} |")
    print(f"| numpy loop (1 process) | {numpy_seconds:.1f} | {1e3 * numpy_seconds / steps:.2f} | 1.00 | "
          f"{numpy_peak:.3f} (tracemalloc) | {numpy_gap.mean():.4f} ± {se(numpy_gap):.4f} |")
    print(f"replicas whose released output is bit-identical in both: {same:.0%}; "
          f"memory per replica and player: d floats = {8 * d / 2**20:.2f} MiB")
    return {"fedray_seconds": fedray_seconds, "numpy_seconds": numpy_seconds, "identical": same,
            "fedray_gap": fedray_gap, "numpy_gap": numpy_gap}


if __name__ == "__main__":
    main()
