"""Seconds per silo step of ISRL-DP MB-SGD and ISRL-DP Local SGD, before and after the replica-
batched silo math, on the shapes of the paper's MNIST tuning protocol (seed-004 E1).

One actor holds all N = 25 silos, n = 1238 training records each, d = 50 features, K = 444,
logistic loss, per-example clip and Gaussian noise in the silo. A run carries P replicas, ordered
as the planner orders them (budget level slowest, repetition, step size fastest): P = 1, P = 30
(10 step sizes x 3 repetitions, one job of E1) and P = 180 (6 noise levels x 10 step sizes x 3
repetitions). Records are synthetic arrays of those shapes; only the shapes matter for time.

A silo step is what ``SiloGroup.round`` runs for its silos: building the round's ``SiloDraws``,
drawing minibatches and noise, and the algorithm's silo half. "old" is a frozen copy of that code
at commit 7f56f70 (below); "new" is the installed fedray. The script also checks that both give
bit-identical messages, and times the dense MB-SGD candidate (margins of all n records, then
one weighted sum per silo: ``clipped_weighted_gradients``) that was measured and not adopted.

BLAS runs on one thread by default (``--threads``), as in a silo-group actor with one CPU.
Each number is the median over ``--repeats`` calls after one warm-up call.

    python experiments/benchmark/silo_step.py
    python experiments/benchmark/silo_step.py --replicas 180 --repetitions 18 --no-dense

Results (2026-11-21, AMD EPYC 2 cores, numpy 2.4 with OpenBLAS 0.3.31, one BLAS thread, load
about 1 from other work; seconds per silo step, median of 7; new == old bit for bit in every row):

    algorithm          P   U     old     new  old/new   dense MB-SGD (replica == alone)
    ISRL-DP MB-SGD      1   1  0.0016  0.0007   2.2x    0.0011 (yes)
    ISRL-DP Local SGD   1   1  0.0260  0.0162   1.6x
    ISRL-DP MB-SGD     30   3  0.0440  0.0093   4.7x    0.0251 (no)
    ISRL-DP Local SGD  30   3  0.1204  0.0652   1.8x
    ISRL-DP MB-SGD    180   3  0.2578  0.0419   6.2x    0.1369 (no)
    ISRL-DP Local SGD 180   3  0.4392  0.2492   1.8x
    ISRL-DP MB-SGD    180  18  0.2644  0.0557   4.7x    (--repetitions 18)
    ISRL-DP Local SGD 180  18  0.7171  0.3701   1.9x

What was decided by these numbers:
- MB-SGD: the old cost was the (P, S, K, d) gather (800 MB at P = 180). Replicas of one
  repetition share their minibatch, so the new path gathers it once per repetition and keeps the
  per-(replica, silo) matrix-vector products. The dense form does n/K = 2.8 times the flops, in
  two GEMMs per silo whose output columns round differently as P changes ("replica == alone": no),
  so it is slower at every P and breaks replica-exactness: no cost rule, gathered path everywhere.
- Local SGD: normals and records are drawn and gathered once per repetition (U S K d values, not
  P S K d) and generators stop at the last silo row needed (25 of 64 here: the same numbers); per
  step, ``np.take(..., out=, mode="clip")`` (5 times faster than with the default mode, which
  buffers ``out``) copies the step's rows out to the replicas. What is left is about ten passes
  over (P, S, d) per step. Not taken: feeding precomputed per-element noise std instead of
  calling the privacy step's ``apply``, plus a broadcast (U, G) replica layout instead of the
  per-step copy, measured 20 % faster at P = 180 but bypasses ``GaussianNoise`` and needs equal
  replica groups.
"""

from __future__ import annotations

import argparse
import os
import sys


def _set_threads(argv: list[str]) -> None:
    """BLAS threads must be fixed before numpy loads."""
    threads = "1"
    if "--threads" in argv:
        threads = argv[argv.index("--threads") + 1]
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)


_set_threads(sys.argv)

import time

import numpy as np

from fedray.protocols.isrl_dp import LocalSGD, MinibatchSGD
from fedray.data import SiloArrays
from fedray.losses import Logistic, clip_factors, clipped_weighted_gradients, loss_residual
from fedray.privacy.mechanisms import GaussianNoise
from fedray.rng import BLOCK, SiloDraws, Stream, generator

NUM_SILOS, RECORDS, DIM, BATCH = 25, 1238, 50, 444
L2_CLIP, SEED, ROUND = 1.0, 11, 3


# ---- the silo step at commit 7f56f70, frozen for comparison -----------------------------------

class OldSiloDraws(SiloDraws):
    """SiloDraws at 7f56f70: every block draws all BLOCK rows, every draw is copied to P replicas."""

    def _rows(self, stream, round_coord, shape, fill, by_repetition=False):
        per_rep = []
        for rep in self.unique_reps:
            out = np.empty((self.silo_ids.size,) + tuple(shape))
            for member in self._layout.members:
                values = np.empty((BLOCK,) + tuple(shape))
                fill(generator(self.run_seed, stream, *rep, round_coord, member.block), values)
                out[member.positions] = values[member.rows]
            per_rep.append(out)
        return np.stack(per_rep)[self.replica_to_rep]

    def _keys(self, sizes, round_coord):
        width = int(self.width if self.width is not None else np.max(sizes))
        keys = self._rows(Stream.MINIBATCH, round_coord, (width,), lambda g, out: g.random(out=out))
        keys[:, np.arange(width)[None, :] >= np.asarray(sizes)[:, None]] = np.inf
        return keys

    def without_replacement(self, sizes, k):
        keys = self._keys(sizes, self.round_index)
        return np.argpartition(keys, k - 1, axis=-1)[..., :k] if k < keys.shape[-1] else np.argsort(keys, axis=-1)

    def with_replacement(self, sizes, k):
        u = self._rows(Stream.MINIBATCH, self.round_index, (k,), lambda g, out: g.random(out=out))
        return np.minimum((u * np.asarray(sizes)[None, :, None]).astype(np.int64), np.asarray(sizes)[None, :, None] - 1)


def old_clipped_minibatch_means(loss, params, x, y, x_norms, idx, l2_clip):
    silo_axis = np.arange(x.shape[0])[None, :, None]
    xb, yb, nb = x[silo_axis, idx], y[silo_axis, idx], x_norms[silo_axis, idx]   # (P, S, K, d), (P, S, K)
    z = np.matmul(xb, params[:, None])                                          # (P, S, K, C)
    r = loss_residual(loss, z, yb, nb)
    coef = r * (clip_factors(nb, r, l2_clip) / idx.shape[-1])[..., None]
    return np.matmul(xb.transpose(0, 1, 3, 2), coef)                            # (P, S, d, C)


def old_minibatch_silo_step(alg, params, silos, draws):
    idx = draws.without_replacement(silos.sizes, alg.batch_size)
    grads = old_clipped_minibatch_means(alg.loss, params, silos.x, silos.y, silos.x_norms, idx, alg.l2_clip)
    private, _ = alg.noise.select(silos.silo_ids).apply(grads, draws.standard_normal(grads.shape[2:]))
    return private


def old_local_silo_step(alg, params, silos, draws):
    num_replicas, num_silos = params.shape[0], silos.x.shape[0]
    idx = draws.with_replacement(silos.sizes, alg.batch_size)            # (P, S, K)
    normals = draws.standard_normal((alg.batch_size,) + params.shape[1:])  # (P, S, K, d, C)
    noise = alg.noise.select(silos.silo_ids)
    local = np.broadcast_to(params[:, None], (num_replicas, num_silos) + params.shape[1:]).copy()
    silo_axis = np.arange(num_silos)[None, :]
    eta = alg.step_size[:, None, None, None]
    for t in range(alg.batch_size):
        x_t = silos.x[silo_axis, idx[:, :, t]]
        y_t = silos.y[silo_axis, idx[:, :, t]]
        z = np.einsum("psd,psdc->psc", x_t, local)
        norms = silos.x_norms[silo_axis, idx[:, :, t]]
        r = loss_residual(alg.loss, z, y_t, norms)
        r = r * clip_factors(norms, r, alg.l2_clip)[..., None]
        grad = x_t[..., None] * r[:, :, None, :]
        noisy, _ = noise.apply(grad, normals[:, :, t])
        local -= eta * noisy
    return local


# ---- the dense MB-SGD candidate ----------------------------------------------------------------

def dense_minibatch_silo_step(alg, params, silos, draws):
    """All n margins per (replica, silo) with one product per silo, weights 1/K on the sample."""
    idx = draws.without_replacement(silos.sizes, alg.batch_size)
    weights = np.zeros(idx.shape[:2] + (silos.x.shape[1],))
    np.put_along_axis(weights, idx, 1.0 / alg.batch_size, axis=2)
    grads = clipped_weighted_gradients(alg.loss, params, silos.x, silos.y, weights, alg.l2_clip, silos.x_norms)
    private, _ = alg.noise.select(silos.silo_ids).apply(grads, draws.standard_normal(grads.shape[2:]))
    return private


# ---- workload ----------------------------------------------------------------------------------

def silos(seed: int = 0) -> SiloArrays:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(NUM_SILOS, RECORDS, DIM))
    x *= rng.uniform(0.2, 2.0, size=(NUM_SILOS, RECORDS, 1)) / np.linalg.norm(x, axis=2, keepdims=True)
    y = (rng.random((NUM_SILOS, RECORDS)) < 0.5).astype(np.float64)
    return SiloArrays(np.arange(NUM_SILOS), x, y, np.full(NUM_SILOS, RECORDS), np.linalg.norm(x, axis=2))


def replicas(num_replicas: int, repetitions: int, seed: int = 1):
    """(repetitions (P,), step sizes (P,), noise std (P, N), params (P, d, 1)) in the planner's
    replica order: noise level slowest, then repetition, then step size (up to 10) fastest."""
    rng = np.random.default_rng(seed)
    steps = min(10, max(1, num_replicas // repetitions))
    levels = -(-num_replicas // (steps * repetitions))
    reps = np.tile(np.repeat(np.arange(repetitions), steps), levels)[:num_replicas]
    step_size = np.tile(np.exp(np.linspace(-8, -1, steps)), repetitions * levels)[:num_replicas]
    level_std = np.repeat(rng.uniform(0.01, 0.2, size=levels), steps * repetitions)[:num_replicas]
    noise_std = level_std[:, None] * np.ones((1, NUM_SILOS))
    return reps, step_size, noise_std, rng.normal(size=(num_replicas, DIM, 1)) * 0.3


def timed(step, repeats: int) -> tuple[float, float, np.ndarray]:
    """(median wall seconds, median CPU seconds of this process, the output) over ``repeats`` calls."""
    out = step()
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        step()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return float(np.median(wall)), float(np.median(cpu)), out


def measure(name, alg, old_step, data, reps, params, repeats: int, dense: bool) -> dict:
    """One table row: old and new silo step (and the dense candidate for MB-SGD) on the same draws."""
    def draws(cls=SiloDraws, replica_reps=reps):
        return cls(SEED, replica_reps, ROUND, data.silo_ids, width=RECORDS)

    old_s, old_cpu, old_out = timed(lambda: old_step(alg, params, data, draws(OldSiloDraws)), repeats)
    new_s, new_cpu, new_out = timed(lambda: alg.silo_step(params, data, draws()), repeats)
    row = {"algorithm": name, "replicas": len(reps), "repetitions": int(np.unique(reps).size),
           "old_s": old_s, "new_s": new_s, "old_cpu_s": old_cpu, "new_cpu_s": new_cpu,
           "identical": bool(np.array_equal(old_out, new_out))}
    if dense and isinstance(alg, MinibatchSGD):
        row["dense_s"], row["dense_cpu_s"], dense_out = timed(
            lambda: dense_minibatch_silo_step(alg, params, data, draws()), repeats)
        alone = MinibatchSGD(alg.loss, alg.step_size[:1], BATCH, L2_CLIP, GaussianNoise(alg.noise.noise_std[:1]))
        single = dense_minibatch_silo_step(alone, params[:1], data, draws(replica_reps=reps[:1]))
        row["dense_replica_equal"] = bool(np.array_equal(single[0], dense_out[0]))
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 30, 180])
    parser.add_argument("--repetitions", type=int, default=3, help="distinct repetitions among the replicas")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (set before numpy loads)")
    parser.add_argument("--no-dense", action="store_true", help="skip the dense MB-SGD candidate")
    args = parser.parse_args(argv)

    data, loss, rows = silos(), Logistic(), []
    print(f"N = {NUM_SILOS} silos, n = {RECORDS}, d = {DIM}, K = {BATCH}, logistic; BLAS threads "
          f"{os.environ.get('OPENBLAS_NUM_THREADS')}; medians of {args.repeats} calls; seconds per silo step, "
          f"wall (CPU of this process)")
    print(f"{'algorithm':<19}{'P':>4}{'U':>3}{'old':>17}{'new':>17}{'old/new':>14}  new == old"
          f"{'dense':>17}  dense: replica == alone")
    for num_replicas in args.replicas:
        reps, step_size, noise_std, params = replicas(num_replicas, min(args.repetitions, num_replicas))
        noise = GaussianNoise(noise_std)
        for name, alg, old_step in [
            ("ISRL-DP MB-SGD", MinibatchSGD(loss, step_size, BATCH, L2_CLIP, noise), old_minibatch_silo_step),
            ("ISRL-DP Local SGD", LocalSGD(loss, step_size, BATCH, L2_CLIP, noise), old_local_silo_step),
        ]:
            row = measure(name, alg, old_step, data, reps, params, args.repeats, dense=not args.no_dense)
            rows.append(row)
            dense = f"{row['dense_s']:>8.4f} ({row['dense_cpu_s']:.4f})  {row['dense_replica_equal']}" \
                if "dense_s" in row else ""
            print(f"{name:<19}{num_replicas:>4}{row['repetitions']:>3}{row['old_s']:>8.4f} ({row['old_cpu_s']:.4f})"
                  f"{row['new_s']:>8.4f} ({row['new_cpu_s']:.4f}){row['old_s'] / row['new_s']:>6.1f}x "
                  f"({row['old_cpu_s'] / row['new_cpu_s']:.1f}x)  {row['identical']!s:<10}{dense}")
    return rows


if __name__ == "__main__":
    main()
