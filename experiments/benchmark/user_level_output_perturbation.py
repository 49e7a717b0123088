"""Seed 003's E1 cell (SCOutputPert, certificate mode, user-level mean estimation on sufficient
statistics) through fedray against a one-process numpy implementation of the same release.

fedray runs its normal path (Hydra overrides -> make_plan -> local Ray with ``runtime.num_actors``
silo actors -> fedray.runtime.driver.run): the actors generate and hold the users' mean items;
the driver-side program solves the ridge problem through the oracle (trust-region Newton-CG, each
value, gradient or Hessian-vector product one call over the actors), gathers every user's
gradient for the certificate, and releases R replicas. The numpy reference, written here from
the spec (§2.3b), draws the same Binomial user means in one process, takes their mean (the
closed form), the per-user spread, the certificate and R noisy releases.

Printed: seconds (fedray's from the call with Ray's start; the actors' start with the users'
generation; the program alone on loaded actors), the ratio to numpy, peak memory (fedray's actors by VmHWM, numpy by tracemalloc), and
the oracle's per-call overhead: one gradient evaluation over every user through the actors
against the same evaluation as a local numpy call, per solver iteration. No timing is asserted.

    python experiments/benchmark/user_level_output_perturbation.py                   # n = 1e5, d = 100, R = 20
    python experiments/benchmark/user_level_output_perturbation.py --users 10000 --dim 10
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedray.compose import compose_plan  # noqa: E402
from fedray.protocols.user_level.deletion import CertifiedPerturbation  # noqa: E402
from shuffle_sco import GIB, ProcessWatch  # noqa: E402


def numpy_release(spec, seed: int, mechanism: CertifiedPerturbation,
                  replicas: int) -> tuple[np.ndarray, bool, float, np.ndarray]:
    """(R, d) releases, whether the certificate held, seconds, the users' mean (its own data,
    which has fedray's law, not its bits): the users' Binomial means drawn in
    one process, their mean, the spread max_i ||a_i - abar||, the certificate, R noisy copies."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    biases = rng.uniform(spec.bias_low, spec.bias_high, spec.dim)
    m = spec.items_per_user
    points = (2.0 * rng.binomial(m, np.broadcast_to(biases, (spec.num_silos, spec.dim))) - m) / (m * np.sqrt(spec.dim))
    centre = points.mean(axis=0)
    gamma = float(np.sqrt(((points - centre) ** 2).sum(axis=1).max()))       # mu = 1: gradients theta - a_i
    passed = mechanism.certifies(gamma, 0.0)
    released = centre + mechanism.noise_std * rng.standard_normal((replicas, spec.dim))
    return released, passed, time.perf_counter() - start, centre


def oracle_overhead(plan, calls: int) -> tuple[float, float]:
    """Seconds per full gradient evaluation through the actors and as a local numpy call."""
    from fedray.core.objective import DataObjective
    from fedray.runtime.driver import start

    program = plan.protocol.build(None)
    groups = start(plan)
    try:
        data = DataObjective(groups, program.objective, plan.shape.num_silos)
        params = np.zeros((1,) + program.model_shape)
        data.value_and_gradient(params)                     # warm: the first call ships the objective
        began = time.perf_counter()
        for _ in range(calls):
            data.value_and_gradient(params)
        through_actors = (time.perf_counter() - began) / calls
    finally:
        groups.close()
    points = plan.dataset.load(plan.seed, plan.trial).x_train[:, 0, :]
    theta = np.zeros(points.shape[1])
    began = time.perf_counter()
    for _ in range(calls):
        (-(points @ theta)).mean(), -points.mean(axis=0)    # the Linear loss's value and gradient
    return through_actors, (time.perf_counter() - began) / calls


def main(argv: list[str] | None = None) -> dict:
    from fedray.runtime.driver import run, start

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=10**10)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=20)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args(argv)
    plan = compose_plan(["experiment=sc_output_pert_means", "algorithm.mode=certificate", "algorithm.on_unstable=abort_not_private",
                         f"data.spec.num_silos={args.users}", f"data.spec.items_per_user={args.items}",
                         f"data.spec.dim={args.dim}", f"repetitions={args.replicas}", "progress=false",
                         f"runtime.num_actors={args.actors}"])
    mechanism = plan.protocol.build(None).mechanisms[0]
    print(f"## SCOutputPert (certificate) on user means: n = {args.users:,}, m = {args.items:.0e}, d = {args.dim}, "
          f"{args.replicas} replicas, eps = 1, delta = 1e-5; sigma = {mechanism.noise_std:.3g}")
    with ProcessWatch() as watch:
        began = time.perf_counter()
        result = run(plan)
        fedray_seconds = time.perf_counter() - began
    actors = watch.actor_peaks("ray::SiloGroup")
    began = time.perf_counter()
    groups = start(plan)
    from fedray.core.objective import DataObjective

    program = plan.protocol.build(None)
    DataObjective(groups, program.objective, args.users).value_and_gradient(np.zeros((1,) + program.model_shape))
    load_seconds = time.perf_counter() - began          # actors started, users generated in them
    began = time.perf_counter()
    warm = run(plan, groups=groups)
    program_seconds = time.perf_counter() - began
    tracemalloc.start()
    released, passed, numpy_seconds, numpy_centre = numpy_release(plan.dataset, plan.seed, mechanism, args.replicas)
    numpy_peak = tracemalloc.get_traced_memory()[1] / GIB
    tracemalloc.stop()
    erm = plan.dataset.load(plan.seed, plan.trial).x_train[:, 0, :].mean(axis=0)
    error = lambda out, centre=erm: np.linalg.norm(out - centre, axis=1).mean()          # noqa: E731
    calls = int(result.history[-1]["solver_calls"][0])
    print("| runner | seconds | ratio to numpy | peak memory (GiB) | released | mean error |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| fedray, Ray's start included ({args.actors} actors) | {fedray_seconds:.2f} | "
          f"{fedray_seconds / numpy_seconds:.2f} | {max(actors, default=float('nan')):.3f} per actor | "
          f"{int(result.history[-1]['released'].sum())} of {args.replicas} | {error(result.model[:, :, 0]):.3g} |")
    print(f"| fedray, actors started and their users generated | {load_seconds:.2f} | "
          f"{load_seconds / numpy_seconds:.2f} | | | |")
    print(f"| fedray, the program on loaded actors (solve, certificate, release, evaluation) | {program_seconds:.2f} | "
          f"{program_seconds / numpy_seconds:.2f} | | {int(warm.history[-1]['released'].sum())} of {args.replicas} | "
          f"{error(warm.model[:, :, 0]):.3g} |")
    print(f"| numpy (1 process) | {numpy_seconds:.2f} | 1.00 | {numpy_peak:.3f} (tracemalloc) | "
          f"{args.replicas if passed else 0} of {args.replicas} | {error(released, numpy_centre):.3g} |")
    through_actors, local = oracle_overhead(plan, args.calls)
    print(f"oracle: one value and gradient over all {args.users:,} users {1e3 * through_actors:.2f} ms through "
          f"{args.actors} actors against {1e3 * local:.2f} ms as a local numpy call (ratio {through_actors / local:.1f}); "
          f"the solve made {calls} oracle calls")
    return {"fedray_seconds": fedray_seconds, "load_seconds": load_seconds, "program_seconds": program_seconds,
            "numpy_seconds": numpy_seconds}


if __name__ == "__main__":
    main()
