"""The numpy limit of a tuning protocol: every Hydra job's replicas vectorised in one process.

One job of E1 / E2 (``experiments/e1_mnist``, ``experiments/e2_insurance``) is one (algorithm,
M, trial) carrying P replicas (eps grid x clip grid x step grid x repetitions). This loop does the
work fedray does for it, and nothing else: load the trial's silos, then per round

1. at evaluation rounds (every ``evaluate_every`` and the last) the last iterate's training loss
   (mean over silos) and test error, per replica, as fedray's driver evaluates them;
2. participation: M of the N silos per repetition, shared by that repetition's replicas;
3. each of the P x M (replica, silo) pairs runs its silo step with its own minibatch and noise:
   MB-SGD: K records without replacement, mean of per-example gradients clipped to l2_clip, plus
   N(0, sigma^2 I); Local SGD: K steps of one record drawn with replacement, each clipped and
   noised, from the broadcast model;
4. the server averages the M messages per replica (MB-SGD steps by each replica's step size;
   Local SGD averages the local models) and keeps the last ``average_last`` iterates;

then the last iterate and the tail average are evaluated. One generator for everything (fedray
keys a generator per stream, replica, round and block of silos): the same distributions, not the
same numbers. Only the (replica, silo) pairs that take part are computed.

MB-SGD's gradients use all-records products (one GEMM for the margins of every record under every
replica, one per silo back): at P = 180 replicas of K = 444 records each, the minibatch gather
would copy P M K d values (800 MB at M = 25) every round.

    python experiments/benchmark/tuning_numpy.py JOBS.pkl OUT.json
"""

from __future__ import annotations

import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np

from numpy_loop import expit, logistic_loss


class Loss:
    """The two losses of the experiments, for a linear model with one output."""

    def __init__(self, kind: str, margin_clip: float = 15.0):
        if kind not in ("logistic", "squared"):
            raise ValueError(f"loss must be logistic or squared; got {kind!r}")
        self.kind, self.margin_clip = kind, margin_clip

    def value(self, z, y):
        if self.kind == "squared":
            return 0.5 * (z - y) ** 2
        return logistic_loss(z, y, self.margin_clip)

    def residual(self, z, y):
        if self.kind == "squared":
            return z - y
        return expit(np.clip(z, -self.margin_clip, self.margin_clip)) - y

    def error(self, z, y):
        if self.kind == "squared":
            return (z - y) ** 2
        return ((z > 0.0) != (y > 0.5)).astype(np.float64)


def clip_scale(residual, norms, l2_clip):
    """min(1, l2_clip / |r| ||x||) (1 for a zero gradient); ``l2_clip`` is one number, or one per
    replica (P,) for residuals (P, ...)."""
    if np.ndim(l2_clip) == 0 and np.isinf(l2_clip):
        return np.ones_like(residual)
    l2_clip = np.reshape(l2_clip, np.shape(l2_clip) + (1,) * (residual.ndim - np.ndim(l2_clip)))
    size = np.abs(residual) * norms
    return np.minimum(1.0, np.divide(l2_clip, size, out=np.full(size.shape, np.inf), where=size > 0))


def evaluate(loss, w, fed):
    """(P,) training loss (mean over silos of each silo's mean) and (P,) test error, for w (P, d)."""
    x, y, n, xt, yt, nt = fed
    num_silos, width, dim = x.shape
    z = (x.reshape(-1, dim) @ w.T).reshape(num_silos, width, -1)            # (N, n, P)
    mask = (np.arange(width)[None, :] < n[:, None])[..., None]
    train = ((loss.value(z, y[..., None]) * mask).sum(axis=1) / n[:, None]).mean(axis=0)
    zt = (xt.reshape(-1, dim) @ w.T).reshape(num_silos, xt.shape[1], -1)
    mask_t = (np.arange(xt.shape[1])[None, :] < nt[:, None])[..., None]
    test = (loss.error(zt, yt[..., None]) * mask_t).sum(axis=(0, 1)) / max(nt.sum(), 1)
    return train, test


def participants(rng, repetition, num_silos, m):
    """(P, M) silo ids: M distinct silos per repetition, shared by its replicas (sorted)."""
    reps = np.unique(repetition)
    chosen = np.stack([np.sort(rng.choice(num_silos, m, replace=False)) for _ in reps])
    return chosen[np.searchsorted(reps, repetition)]


def minibatch_sgd_messages(rng, loss, w, fed, norms, silos, k, l2_clip, noise_std):
    """(P, M, d) noisy clipped minibatch means of every participating (replica, silo) pair."""
    x, y, n = fed[:3]
    num_replicas, m = silos.shape
    width, dim = x.shape[1], x.shape[2]
    keys = rng.random((num_replicas, m, width))
    keys[np.arange(width)[None, None, :] >= n[silos][..., None]] = np.inf
    idx = np.argpartition(keys, k - 1, axis=-1)[..., :k]                    # (P, M, K)
    z = (x.reshape(-1, dim) @ w.T).reshape(x.shape[0], width, num_replicas)  # every record, every replica
    pair = (np.arange(num_replicas)[:, None, None], silos[..., None], idx)
    zb = np.moveaxis(z, 2, 0)[pair]                                           # (P, M, K)
    r = loss.residual(zb, y[silos[..., None], idx])
    r *= clip_scale(r, norms[silos[..., None], idx], l2_clip) / k
    coef = np.zeros((x.shape[0], num_replicas, width))                      # scattered back per silo
    coef[silos[..., None], pair[0], idx] = r
    grads = np.matmul(coef, x)                                                # (N, P, d)
    out = np.moveaxis(grads, 0, 1)[np.arange(num_replicas)[:, None], silos]   # (P, M, d)
    return out + noise_std[..., None] * rng.standard_normal(out.shape)


def local_sgd_models(rng, loss, w, fed, norms, silos, k, l2_clip, noise_std, steps):
    """(P, M, d) local models after K noisy one-record steps of every participating pair."""
    x, y, n = fed[:3]
    num_replicas, m = silos.shape
    width, dim = x.shape[1], x.shape[2]
    flat_x, flat_y, flat_norms = x.reshape(-1, dim), y.reshape(-1), norms.reshape(-1)
    rows = (rng.random((k, num_replicas, m)) * n[silos]).astype(np.int64) + silos * width   # (K, P, M)
    local = np.repeat(w[:, None, :], m, axis=1)
    eta = steps[:, None, None]
    sigma = noise_std[..., None]
    normal = np.empty(local.shape)
    for t in range(k):
        xt = flat_x[rows[t]]                                                  # (P, M, d)
        r = loss.residual(np.einsum("pmd,pmd->pm", xt, local), flat_y[rows[t]])
        r *= clip_scale(r, flat_norms[rows[t]], l2_clip)
        rng.standard_normal(out=normal)
        normal *= sigma
        normal += r[..., None] * xt
        normal *= eta
        local -= normal
    return local


def run_job(job: dict, rng: np.random.Generator) -> dict:
    """One Hydra job's replicas; returns the final models' metrics and the time it took."""
    started = time.perf_counter()
    data = job["dataset"].load(job["seed"], job["trial"])
    fed = (data.x_train, data.y_train[..., 0] if data.y_train.ndim == 3 else data.y_train, data.n_train,
           data.x_test, data.y_test[..., 0] if data.y_test.ndim == 3 else data.y_test, data.n_test)
    loss = Loss(job["loss"], job["margin_clip"])
    x, n = fed[0], fed[2]
    norms = np.sqrt(np.einsum("snd,snd->sn", x, x))
    l2_clip = job["l2_clip"]
    if l2_clip is None:                       # the paper's L: the largest training feature norm
        l2_clip = float(norms[np.arange(x.shape[1])[None, :] < n[:, None]].max())
    steps, repetition = np.asarray(job["step_sizes"]), np.asarray(job["repetitions"])
    num_replicas, num_silos, dim = steps.size, x.shape[0], x.shape[2]
    noise_std = np.zeros((num_replicas, num_silos))
    if job["private"]:                        # multiplier x replace-one sensitivity 2 l2_clip / records
        clip = np.reshape(l2_clip, np.shape(l2_clip) + (1,))              # one per replica, or one for all
        noise_std += np.asarray(job["noise_multiplier"], dtype=float) * 2.0 * clip / job["sample_size"]
    w = np.zeros((num_replicas, dim))
    tail = [w]
    for r in range(job["num_rounds"]):
        if r % job["evaluate_every"] == 0 or r == job["num_rounds"] - 1:
            evaluate(loss, w, fed)
        silos = participants(rng, repetition, num_silos, job["silos_per_round"])
        sigma = noise_std[np.arange(num_replicas)[:, None], silos]              # (P, M)
        if job["algorithm"] == "minibatch":
            messages = minibatch_sgd_messages(rng, loss, w, fed, norms, silos, job["batch_size"], l2_clip, sigma)
            w = w - steps[:, None] * messages.mean(axis=1)
        else:
            w = local_sgd_models(rng, loss, w, fed, norms, silos, job["batch_size"], l2_clip, sigma, steps).mean(axis=1)
        tail = (tail + [w])[-job["average_last"]:]
    last, avg = evaluate(loss, w, fed), evaluate(loss, np.mean(tail, axis=0), fed)
    return {"seconds": time.perf_counter() - started, "replicas": num_replicas,
            "final_train_loss": last[0].tolist(), "final_test_error": last[1].tolist(),
            "final_train_loss_avg": avg[0].tolist(), "final_test_error_avg": avg[1].tolist()}


def main(jobs_path: str, out_path: str) -> None:
    jobs = pickle.loads(Path(jobs_path).read_bytes())
    rng = np.random.default_rng(20261126)
    results, started = [], time.perf_counter()
    for job in jobs:
        results.append({"name": job["name"], **run_job(job, rng)})
        print(f"{job['name']}: {results[-1]['seconds']:.1f} s", flush=True)
    Path(out_path).write_text(json.dumps({"total": time.perf_counter() - started, "jobs": results}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
