"""Sweep scaling: one sweep run one job after another, and on 1, 2, ... concurrent job workers.

    python experiments/benchmark/sweep_scaling.py --quick                 # 4 E2 jobs (about a minute on 2 idle cores)
    python experiments/benchmark/sweep_scaling.py --quick --trials 16     # 32 jobs of E2's main setting
    python experiments/benchmark/sweep_scaling.py --trials 20             # E2's whole protocol (320 jobs)
    python experiments/benchmark/sweep_scaling.py --trials 2 --address HEAD:6379   # on a cluster

The same multirun (``python -m fedray -m ...``) runs with fedray's default launcher (the jobs one
after another in one process, keeping their silo actors) and with ``hydra/launcher=ray_jobs`` at
``hydra.launcher.max_concurrent`` = 1, 2, 4, ... up to the CPUs Ray offers (this machine's, or the
cluster's at ``--address``, which every run joins through ``runtime.address``), each timed from
launch to exit (interpreter, Ray start or connection, every job, MLflow, shutdown) into a store of
its own whose schema is made beforehand, untimed. The numpy limit (``tuning_numpy.py``: the same
Hydra jobs' replicas vectorised in one process on one core, data loading included) runs last.

The sweep: E2's protocol (``tuning_protocol.sweeps("e2", trials)``: one multirun over the union of
its experiment's grids, 16 jobs a trial), or with ``--quick`` E2's main setting (N = 10, M = 5)
with both private algorithms (2 jobs a trial); 2 trials unless ``--trials`` says. Every
warm-worker sweep's final metrics (times aside) are compared, run by run, with the sequential
sweep's: the last column says whether they are all equal bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from measuring import GIB, timed  # noqa: E402


def planned_sweep(quick: bool, trials: int | None) -> tuple[dict, int]:
    """(the multirun, its trial count): E2's main setting with both private algorithms (``quick``),
    or E2's protocol, of ``trials`` trials (2 if None)."""
    from tuning_protocol import sweeps

    trials = trials or 2
    if quick:
        return {"fixed": ["experiment=e2_insurance"],
                "axes": [("trial", tuple(range(trials))), ("algorithm", ("isrl_dp_mb_sgd", "isrl_dp_local_sgd"))]}, trials
    (sweep,) = sweeps("e2", trials)
    return sweep, trials


def available_cpus(address: str | None) -> int:
    """The CPUs Ray offers the sweep: the cluster's at ``address``, else this machine's (a private
    local Ray takes every CPU the process may use)."""
    if not address:
        return len(os.sched_getaffinity(0))
    import ray

    ray.init(address=address, log_to_driver=False)
    try:
        return int(ray.cluster_resources().get("CPU", 1))
    finally:
        ray.shutdown()


def worker_counts(cpus: int, requested: list[int] | None) -> list[int]:
    """1, 2, 4, ... and ``cpus`` itself (or the ``requested`` counts), each at most ``cpus``."""
    if requested:
        bad = [k for k in requested if k < 1]
        if bad:
            raise SystemExit(f"--workers must be counts of at least 1; got {bad}")
        return sorted(set(requested))
    counts, k = [], 1
    while k < cpus:
        counts.append(k)
        k *= 2
    return counts + [max(cpus, 1)]


def final_metrics(work: Path, name: str) -> dict[str, dict]:
    """Each child run's final metrics but times, by run name, from the sweep's store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / (name + '.db')}")
    ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(ids, max_results=50000)
    return {r.info.run_name: {k: v for k, v in r.data.metrics.items() if "time" not in k}
            for r in runs if r.data.tags.get("sweep") != "parent"}


def run_scaling(quick: bool, trials: int | None, work: Path, env: dict, timeout: float, address: str | None = None,
                workers: list[int] | None = None, measured: dict | None = None) -> dict:
    """Every mode of the sweep, then its numpy limit; returns what ``table`` prints. ``measured``:
    this sweep's sequential run and numpy limit timed already in this invocation (E2's protocol,
    ``tuning_protocol.run_protocol``'s result, whose first sweep's store is ``e2-sweep0``), reused
    rather than run twice."""
    import pickle

    from mlflow.tracking import MlflowClient

    from tuning_protocol import command, numpy_jobs_of

    sweep, trials = planned_sweep(quick, trials)
    jobs = numpy_jobs_of([sweep], trials)
    cpus = available_cpus(address)
    # The datasets the cache keeps, built once, untimed (as tuning_protocol.run_protocol does).
    warm = {(repr(job["dataset"]), job["seed"], job["trial"]): job for job in jobs if getattr(job["dataset"], "cache", False)}
    for job in warm.values():
        job["dataset"].load(job["seed"], job["trial"])
    joined = [f"runtime.address={address}"] if address else []
    modes = [("sequential", None)] + [(f"{k} warm worker{'s' if k > 1 else ''}", k) for k in worker_counts(cpus, workers)]
    runs, reference = [], None
    for label, count in modes:
        name = "scaling-sequential" if count is None else f"scaling-workers{count}"
        if count is None and measured is not None:
            part, name = dict(measured["fedray"][0]), "e2-sweep0"
            print(f"[sweep-scaling] {label}: E2's protocol run above", flush=True)
        else:
            MlflowClient(tracking_uri=f"sqlite:///{work / (name + '.db')}").search_experiments()    # schema, untimed
            extra = joined + ([] if count is None else ["hydra/launcher=ray_jobs", f"hydra.launcher.max_concurrent={count}"])
            print(f"[sweep-scaling] {label}, {len(jobs)} jobs ...", flush=True)
            part = timed(command(sweep, work, name) + extra, work / f"{name}.log", env, timeout)
        part.update(mode=label, workers=count)
        if "error" not in part:
            metrics = final_metrics(work, name)
            part["finished_runs"] = len(metrics)
            if reference is None:
                reference = metrics
            part["same_as_sequential"] = metrics == reference and len(metrics) == len(jobs)
        runs.append(part)
    what = f"E2 main setting, private, {trials} trials (--quick)" if quick else f"E2 protocol, {trials} trials"
    result = {"sweep": what, "jobs": len(jobs), "cpus": cpus, "address": address, "modes": runs,
              "reused": measured is not None}
    if measured is not None:
        return dict(result, numpy=measured["numpy"])
    jobs_path, out = work / "scaling-numpy.pkl", work / "scaling-numpy.out.json"
    jobs_path.write_bytes(pickle.dumps(jobs))
    numpy_env = dict(env, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    print(f"[sweep-scaling] numpy limit, {len(jobs)} jobs ...", flush=True)
    limit = timed([sys.executable, str(HERE / "tuning_numpy.py"), str(jobs_path), str(out)],
                  work / "scaling-numpy.log", numpy_env, timeout)
    return dict(result, numpy=limit)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(result: dict) -> str:
    """The sweep-scaling table: wall time, speed-ups and the ratio to the numpy limit per mode."""
    where = f"the cluster at {result['address']}" if result.get("address") else "a private local Ray"
    reused = " (one after another and the numpy limit: the protocol's runs above)" if result.get("reused") else ""
    lines = [f"Sweep scaling: {result['sweep']} ({result['jobs']} Hydra jobs) on {where}, {result['cpus']} CPUs{reused}",
             "",
             "| launcher | job workers | wall s | speed-up vs 1 worker | speed-up vs sequential | ÷ numpy limit "
             "| peak RSS (GiB) | other CPU load (cores) | final metrics = sequential |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    modes, limit = result["modes"], result["numpy"]
    sequential = next((m.get("seconds") for m in modes if m["workers"] is None), None)
    one = next((m.get("seconds") for m in modes if m["workers"] == 1), None)
    numpy_s = limit.get("seconds")
    for m in modes:
        launcher = "fedray (one after another)" if m["workers"] is None else "ray_jobs"
        count = "-" if m["workers"] is None else str(m["workers"])
        if "error" in m:
            lines.append(f"| {launcher} | {count} | - | - | - | - | - | - | {m['error'].splitlines()[0]} |")
            continue
        s = m["seconds"]
        lines.append(
            f"| {launcher} | {count} | {s:.1f} | {_x(one / s if one and m['workers'] else None)} "
            f"| {_x(sequential / s if sequential else None)} | {_x(s / numpy_s if numpy_s else None)} "
            f"| {m['peak_rss'] / GIB:.2f} | {m['background_cores']:.2f} "
            f"| {'yes' if m['same_as_sequential'] else 'no'} ({m['finished_runs']} runs) |")
    if "error" in limit:
        lines.append(f"| numpy limit | - | - | - | - | - | - | - | {limit['error'].splitlines()[0]} |")
    else:
        lines.append(f"| numpy limit (one process, one core) | - | {numpy_s:.1f} | - | - | 1.00x "
                     f"| {limit['peak_rss'] / GIB:.2f} | {limit['background_cores']:.2f} | - |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="E2's main setting, both private algorithms: 2 jobs a trial (about a minute)")
    parser.add_argument("--trials", type=int, help="trials (default 2; E2's protocol has 16 jobs a trial)")
    parser.add_argument("--address", help="a Ray cluster every sweep joins (runtime.address); default: private local Ray")
    parser.add_argument("--workers", type=int, nargs="+", help="job-worker counts (default 1, 2, 4, ... the CPUs)")
    parser.add_argument("--workdir", type=Path, help="logs and MLflow stores (default: temp)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--timeout", type=float, default=4 * 3600.0, help="seconds per sweep")
    args = parser.parse_args(argv)
    if args.trials is not None and args.trials < 1:
        parser.error(f"--trials must be at least 1; got {args.trials}")
    from run import SHARED_DATASETS, child_env, machine

    if "FEDRAY_DATA_DIR" not in os.environ and SHARED_DATASETS.is_dir():
        os.environ["FEDRAY_DATA_DIR"] = str(SHARED_DATASETS)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="fedray-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    result = run_scaling(args.quick, args.trials, work, child_env({}), args.timeout, args.address, args.workers)
    text = machine() + "\n\n" + table(result)
    print("\n" + text, flush=True)
    (work / "scaling.md").write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(result, default=str, indent=1))
    return result


if __name__ == "__main__":
    main()
