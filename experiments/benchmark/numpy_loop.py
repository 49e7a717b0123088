"""The single-process reference: the benchmark job as one numpy loop vectorised over silos.

Per round, exactly what a fedray round computes for noisy minibatch SGD (seed-004 Alg. 2):

1. evaluate the broadcast model on every silo (mean training loss over silos, test error), as
   fedray's driver does each round for its progress bar and MLflow;
2. sample M of the N silos uniformly (all of them when M = N);
3. each participating silo draws K of its n records WITHOUT replacement, takes the logistic
   per-example gradients (margin clipped to [-15, 15]), clips each to l2 norm ``l2_clip``,
   averages them and adds N(0, noise_std^2 I);
4. the server averages the M messages and steps: w <- w - step_size * mean.

It has its own generator (``default_rng(seed)``), so it agrees with fedray within noise, not bit
for bit. The math functions below import numpy only: ``flower_job.py`` reuses them inside
Flower's client app, in a virtual environment without fedray. Only ``main`` imports fedray, to
load the same records fedray's silos load.

    python experiments/benchmark/numpy_loop.py SPEC.json OUT.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np


def expit(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def logistic_loss(z: np.ndarray, y: np.ndarray, margin_clip: float) -> np.ndarray:
    """Binary cross-entropy at margins z (fedray.losses.Logistic.value, same constants)."""
    p = expit(np.clip(z, -margin_clip, margin_clip))
    return -(y * np.log(1e-12 + p) + (1.0 - y) * np.log(1e-12 + 1.0 - p))


def clipped_minibatch_gradients(w, x, y, norms, idx, l2_clip, margin_clip):
    """Mean over k of clip(grad) for records idx (S, K) of silos x (S, n, d): returns (S, d)."""
    rows = np.arange(x.shape[0])[:, None]
    xb, yb, nb = x[rows, idx], y[rows, idx], norms[rows, idx]          # (S, K, d), (S, K), (S, K)
    residual = expit(np.clip(xb @ w, -margin_clip, margin_clip)) - yb  # (S, K)
    with np.errstate(divide="ignore"):
        factor = np.minimum(1.0, l2_clip / (np.abs(residual) * nb))
    return np.einsum("sk,skd->sd", residual * factor, xb) / idx.shape[1]


def sample_without_replacement(rng, sizes: np.ndarray, n_max: int, k: int) -> np.ndarray:
    """(S, k) indices, k distinct records of silo s among its sizes[s] (random keys, smallest k)."""
    keys = rng.random((sizes.shape[0], n_max))
    keys[np.arange(n_max)[None, :] >= sizes[:, None]] = np.inf
    if k == n_max:
        return np.argsort(keys, axis=1)
    return np.argpartition(keys, k - 1, axis=1)[:, :k]


def evaluate(w, x, y, n, xt, yt, nt, margin_clip):
    """(mean over silos of the mean training loss, test error over all test records)."""
    num_silos, n_max, dim = x.shape
    z = (x.reshape(-1, dim) @ w).reshape(num_silos, n_max)
    mask = np.arange(n_max)[None, :] < n[:, None]
    train = (logistic_loss(z, y, margin_clip) * mask).sum(axis=1) / n
    if xt.shape[1] == 0 or nt.sum() == 0:
        return float(train.mean()), float("nan")
    zt = (xt.reshape(-1, dim) @ w).reshape(num_silos, xt.shape[1])
    mask_t = np.arange(xt.shape[1])[None, :] < nt[:, None]
    errors = (((zt > 0.0) != (yt > 0.5)) * mask_t).sum()
    return float(train.mean()), float(errors / nt.sum())


def run_loop(spec: dict, fed: dict, rng: np.random.Generator, on_round=None, evaluate_rounds: bool = True) -> dict:
    """Run the job on arrays ``fed`` (x, y, n, xt, yt, nt); returns losses and phase timings.

    ``evaluate_rounds=False`` evaluates only the final model (for repeated runs over seeds).
    """
    x, y, n, xt, yt, nt = (fed[k] for k in ("x", "y", "n", "xt", "yt", "nt"))
    num_silos, n_max, dim = x.shape
    norms = np.sqrt(np.einsum("snd,snd->sn", x, x))
    mask = np.arange(n_max)[None, :] < n[:, None]
    l2_clip = spec["l2_clip"] if spec["l2_clip"] is not None else float(norms[mask].max())
    noise_std = spec["noise_std"]
    if noise_std is None:  # the paper calibration: multiplier * replace-one sensitivity 2 l2_clip / K
        noise_std = spec["noise_multiplier"] * 2.0 * l2_clip / spec["batch_size"]
    m, k, mc = spec["silos_per_round"], spec["batch_size"], spec["margin_clip"]
    w = np.zeros(dim)
    losses, eval_time, step_time = [], [], []
    for r in range(spec["num_rounds"]):
        t0 = time.perf_counter()
        if evaluate_rounds:
            losses.append(evaluate(w, x, y, n, xt, yt, nt, mc)[0])
        t1 = time.perf_counter()
        silos = np.arange(num_silos) if m == num_silos else np.sort(rng.choice(num_silos, m, replace=False))
        xs, ys, ns, norm_s = (x, y, n, norms) if m == num_silos else (x[silos], y[silos], n[silos], norms[silos])
        idx = sample_without_replacement(rng, ns, n_max, k)
        grads = clipped_minibatch_gradients(w, xs, ys, norm_s, idx, l2_clip, mc)
        grads += noise_std * rng.standard_normal(grads.shape)
        w = w - spec["step_size"] * grads.mean(axis=0)
        t2 = time.perf_counter()
        eval_time.append(t1 - t0)
        step_time.append(t2 - t1)
        if on_round is not None:
            on_round(r)
    final_loss, final_error = evaluate(w, x, y, n, xt, yt, nt, mc)
    return {
        "train_loss": losses,
        "final_train_loss": final_loss,
        "final_test_error": final_error,
        "l2_clip": l2_clip,
        "noise_std": noise_std,
        "eval_time_median": float(np.median(eval_time[1:] or eval_time)),
        "step_time_median": float(np.median(step_time[1:] or step_time)),
        "weights": w.tolist(),
    }


def load_federation(spec: dict) -> dict:
    """The records fedray's silos hold for this job, via fedray's own loaders."""
    if spec["kind"] == "synthetic":
        from fedray.data import SyntheticLinear

        fed = SyntheticLinear(**spec["data"]).load(spec["seed"], spec["trial"])
    elif spec["kind"] == "mnist":
        from fedray.data import MnistPairs

        fed = MnistPairs(**spec["data"]).load(spec["seed"], spec["trial"])
    else:
        raise ValueError(f"kind must be synthetic or mnist; got {spec['kind']!r}")
    if fed.num_outputs != 1:
        raise ValueError("the numpy loop implements the binary logistic job only")
    return {"x": fed.x_train, "y": fed.y_train, "n": fed.n_train,
            "xt": fed.x_test, "yt": fed.y_test, "nt": fed.n_test}


def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    fed = load_federation(spec)
    round_ends: list[float] = []
    result = run_loop(spec, fed, np.random.default_rng([spec["seed"], 7919]),
                      on_round=lambda r: round_ends.append(time.time()))
    result["round_ends"] = round_ends
    Path(out_path).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
