"""Many tiny sequential steps: fedray's block rounds against a one-process numpy loop.

The job: P_SGD (seed-000 Alg. 3) without privacy on synthetic logistic data, one record per
user, B users per step, T = n / B steps, each step's iterate needed by the next. fedray runs it
through its normal path (plan -> local Ray with 2 actors -> blocks of steps where the users live
-> the driver re-runs every server step on the released sums); the reference is a plain numpy
loop in this process doing the same arithmetic (clipped logistic gradients of the step's users,
their sum, the step, the running average), written independently of fedray's code. fedray's
driver configures each block from the state its actor reports and re-runs the previous block's
server steps while the next one computes. Prints
seconds per step for both, their ratio, the time fedray spends before its first step, and the
largest difference of the final iterates (they agree to rounding).

    python experiments/benchmark/sequential_steps.py                  # T = 100,000 steps (B = 1)
    python experiments/benchmark/sequential_steps.py --steps 20000 --batch 5
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def numpy_loop(x: np.ndarray, y: np.ndarray, batch: int, steps: int, step_size: float, clip: float,
               margin_clip: float) -> tuple[np.ndarray, float]:
    """(theta_bar, seconds): the reference loop, one process, users in id order."""
    theta, total = np.zeros(x.shape[1]), np.zeros(x.shape[1])
    start = time.perf_counter()
    for t in range(steps):
        xb, yb = x[t * batch:(t + 1) * batch], y[t * batch:(t + 1) * batch]
        residual = 1.0 / (1.0 + np.exp(-np.clip(xb @ theta, -margin_clip, margin_clip))) - yb
        norms = np.abs(residual) * np.linalg.norm(xb, axis=1)
        scale = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
        gradient = (xb * (residual * scale)[:, None]).sum(axis=0) / batch
        total += theta
        theta = theta - step_size * gradient
    return total / steps, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--block-steps", type=int, default=4096)
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")

    from hydra import compose, initialize_config_dir

    from fedray.plan import make_plan
    from fedray.resolvers import register
    from fedray.runtime.driver import run

    register()
    users = args.steps * args.batch
    overrides = ["experiment=p_sgd_synthetic", "privacy=none", "privacy.l2_clip=1.0", f"num_rounds={args.steps}",
                 f"participation.batch_size={args.batch}", f"data.spec.num_silos={users}", f"data.spec.dim={args.dim}",
                 "algorithm.step_size=0.05", f"algorithm.block_steps={args.block_steps}", "progress=false",
                 f"evaluate_every={args.steps + 1}", "runtime.num_actors=2"]
    with initialize_config_dir(config_dir=str(REPO / "fedray" / "conf"), version_base="1.3"):
        plan = make_plan(compose("config", overrides=overrides))

    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train[:, 0, :], fed.y_train[:, 0]
    # The loop's time varies by a third between runs on a shared machine: take the median of three.
    runs = [numpy_loop(x, y, args.batch, args.steps, 0.05, 1.0, plan.loss.margin_clip) for _ in range(3)]
    reference, numpy_seconds = runs[0][0], float(np.median([seconds for _, seconds in runs]))

    result = run(plan)
    fedray_steps = result.wall_time - result.time_to_first_round
    fedray_avg = result.outputs["avg"][0, :, 0]
    numpy_per_step, fedray_per_step = numpy_seconds / args.steps, result.wall_time / args.steps
    print(f"P_SGD without privacy: n = {users:,} users, B = {args.batch}, T = {args.steps:,} steps, d = {args.dim}, "
          f"blocks of {args.block_steps} steps, 2 actors")
    print("| runner | s/step | total (s) | ratio to numpy |")
    print("|---|---:|---:|---:|")
    print(f"| numpy loop, one process (median of 3) | {numpy_per_step:.3g} | {numpy_seconds:.2f} | 1.00 |")
    print(f"| fedray, whole run (actors, data, steps, evaluation) | {fedray_per_step:.3g} | {result.wall_time:.2f} | "
          f"{result.wall_time / numpy_seconds:.2f} |")
    print(f"| fedray, from the first block on | {fedray_steps / args.steps:.3g} | {fedray_steps:.2f} | "
          f"{fedray_steps / numpy_seconds:.2f} |")
    print(f"largest |theta_bar(fedray) - theta_bar(numpy)| = {np.max(np.abs(fedray_avg - reference)):.2e}")


if __name__ == "__main__":
    main()
