"""Whole tuning protocols: E1's and E2's sweeps through fedray against their numpy limit.

fedray runs each protocol as its experiment's script does (``experiments/e1_mnist/run.sh``,
``experiments/e2_insurance/all.sh``): one ``python -m fedray -m ...`` multirun per sweep, each
timed from launch to exit (interpreter, Ray start, every job's data, rounds, MLflow, shutdown).
The numpy limit (``tuning_numpy.py``) runs the same Hydra jobs, each job's replicas vectorised,
in one process on one core; it is timed from launch to exit too, data loading included.

The jobs' replicas, step sizes, noise multipliers and K come from fedray's own plans, made
before anything is timed. A plan depends on the trial only through the data, whose silo sizes
are the same in every trial here; that is checked on trial 1 and the trial-0 plan reused.

With ``trials`` below 20 (the papers' count) both sides do that fraction of the protocol.
"""

from __future__ import annotations

import itertools
import json
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
E2_SCRIPTS = HERE.parents[1] / "experiments" / "e2_insurance"


def e2_settings() -> tuple[tuple[int, int], ...]:
    """The (N, M) settings of ``all.sh``, read from the script itself, so the benchmark runs what
    it runs (the clip grid is in the experiment's config, as ``run.sh`` runs it)."""
    loop = next(line for line in (E2_SCRIPTS / "all.sh").read_text().splitlines()
                if line.startswith("for setting in"))
    return tuple(tuple(int(v) for v in pair.split()) for pair in loop.split('"')[1::2])


def sweeps(protocol: str, trials: int) -> list[dict]:
    """The multiruns of a protocol: ``axes`` (Hydra sweep overrides, slowest first) over ``fixed``."""
    private, baseline = ("isrl_dp_mb_sgd", "isrl_dp_local_sgd"), ("mb_sgd", "local_sgd")
    trial_axis = ("trial", tuple(range(trials)))
    if protocol == "e1":
        return [{"fixed": ["experiment=e1_mnist"] + extra,
                 "axes": [trial_axis, ("participation.silos_per_round", (25, 12)), ("algorithm", algorithms)]}
                for algorithms, extra in ((private, []), (baseline, ["privacy=none"]))]
    if protocol == "e2":
        return [{"fixed": ["experiment=e2_insurance", f"data.spec.num_silos={n}", f"participation.silos_per_round={m}"]
                 + extra,
                 "axes": [trial_axis, ("algorithm", algorithms)]}
                for n, m in e2_settings() for algorithms, extra in ((private, []), (baseline, ["privacy=none"]))]
    raise ValueError(f"protocol must be e1 or e2; got {protocol!r}")


def command(sweep: dict, work: Path, name: str) -> list[str]:
    """The multirun command line, its store and outputs under ``work``."""
    axes = [f"{key}={','.join(repr(v) if isinstance(v, float) else str(v) for v in values)}"
            for key, values in sweep["axes"]]
    return [sys.executable, "-m", "fedray", "-m", *sweep["fixed"], *axes,
            f"tracking.uri=sqlite:///{work / (name + '.db')}", f"tracking.artifact_location={work / 'mlartifacts'}",
            f"hydra.sweep.dir={work / 'multirun' / name}"]


def numpy_jobs(protocol: str, trials: int) -> list[dict]:
    """What ``tuning_numpy.py`` needs for every job of the protocol, from fedray's plans."""
    from fedray.plan import make_plan
    from fedray_job import compose

    jobs = []
    for index, sweep in enumerate(sweeps(protocol, trials)):
        keys = [key for key, _ in sweep["axes"]]
        others = [values for key, values in sweep["axes"] if key != "trial"]
        for combo in itertools.product(*others):
            settings = dict(zip([k for k in keys if k != "trial"], combo))
            overrides = sweep["fixed"] + [f"{k}={v!r}" if isinstance(v, float) else f"{k}={v}" for k, v in settings.items()]
            base = job_spec(make_plan(compose(overrides + ["trial=0"])))
            if trials > 1:
                check = job_spec(make_plan(compose(overrides + ["trial=1"])))
                for key in ("step_sizes", "noise_multiplier", "batch_size", "l2_clip", "repetitions"):
                    if not np.array_equal(np.asarray(base[key]), np.asarray(check[key])):
                        raise SystemExit(f"{overrides}: the plan's {key} differs between trials 0 and 1")
            for trial in range(trials):
                jobs.append(dict(base, trial=trial, seed=trial, sweep=index,
                                 name=" ".join(overrides[1:] + [f"trial={trial}"])))
    return jobs


def job_spec(plan) -> dict:
    algorithm = {"MinibatchSGD": "minibatch", "LocalSGD": "local"}[plan.protocol.algorithm_class.__name__]
    loss = plan.loss
    return {
        "algorithm": algorithm, "dataset": plan.dataset, "seed": plan.seed, "trial": plan.trial,
        "loss": {"Logistic": "logistic", "Squared": "squared"}[type(loss).__name__],
        "margin_clip": float(getattr(loss, "margin_clip", 15.0)),
        "l2_clip": plan.protocol.l2_clip,           # None: the largest feature norm, read off the data
        "private": plan.privacy.private, "noise_multiplier": np.asarray(plan.privacy.noise_multiplier, dtype=float),
        "sample_size": plan.protocol.privacy_sample_size,
        "step_sizes": np.asarray(plan.step_sizes, dtype=float), "repetitions": np.asarray(plan.repetitions),
        "batch_size": plan.protocol.batch_size, "num_rounds": plan.num_rounds,
        "silos_per_round": plan.sampler.silos_per_round, "evaluate_every": plan.evaluate_every,
        "average_last": plan.protocol.algorithm_fields.get("average_last", 8),
    }


def fedray_median_loss(work: Path, name: str, experiment: str) -> float:
    """Median over every replica of every job of the final tail-average training loss."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / (name + '.db')}")
    found = client.get_experiment_by_name(experiment)
    values = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in client.search_runs([found.experiment_id], filter_string="attributes.status = 'FINISHED'",
                                      max_results=50000):
            if "algorithm" not in run.data.tags:        # the sweep's parent run
                continue
            summary = json.loads(Path(client.download_artifacts(run.info.run_id, "summary.json", tmp)).read_text())
            values += list(np.atleast_1d(summary["final_train_loss_avg"]))
    return float(np.median(values)) if values else float("nan")


def run_protocol(protocol: str, trials: int, work: Path, env: dict, timeout: float) -> dict:
    """Both sides of one protocol; returns times, runs and the loss check."""
    from mlflow.tracking import MlflowClient

    from run import timed

    jobs = numpy_jobs(protocol, trials)
    experiment = "e1_mnist" if protocol == "e1" else "e2_insurance"
    fedray_parts, planned = [], sweeps(protocol, trials)
    for i, sweep in enumerate(planned):
        name = f"{protocol}-sweep{i}"
        # An existing store, as the experiment's scripts use one for all their sweeps and the
        # jobs' runs above find one: creating its schema (seconds) is not timed.
        MlflowClient(tracking_uri=f"sqlite:///{work / (name + '.db')}").search_experiments()
        print(f"[protocol-{protocol}] fedray sweep {i + 1} of {len(planned)} ...", flush=True)
        part = timed(command(sweep, work, name), work / f"{name}.log", env, timeout)
        part["median_loss"] = fedray_median_loss(work, name, experiment) if "error" not in part else float("nan")
        fedray_parts.append(part)
    jobs_path = work / f"{protocol}-numpy.pkl"
    jobs_path.write_bytes(pickle.dumps(jobs))
    out = work / f"{protocol}-numpy.out.json"
    numpy_env = dict(env, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    print(f"[protocol-{protocol}] numpy limit, {len(jobs)} jobs ...", flush=True)
    limit = timed([sys.executable, str(HERE / "tuning_numpy.py"), str(jobs_path), str(out)],
                  work / f"{protocol}-numpy.log", numpy_env, timeout)
    if "error" not in limit:
        report = json.loads(out.read_text())
        limit["median_losses"] = [float(np.median([v for job, res in zip(jobs, report["jobs"]) if job["sweep"] == i
                                                   for v in res["final_train_loss_avg"]]))
                                  for i in range(len(fedray_parts))]
    runs = sum(len(job["step_sizes"]) for job in jobs)
    return {"protocol": protocol, "trials": trials, "jobs": len(jobs), "runs": runs,
            "fedray": fedray_parts, "numpy": limit}


def table(results: list[dict]) -> str:
    from run import GIB

    lines = ["| protocol | trials | Hydra jobs | runs | fedray s (sweeps) | numpy limit s | fedray ÷ numpy "
             "| peak RSS fedray / numpy (GiB) | median final train loss per sweep, fedray / numpy "
             "| other CPU load (cores) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for res in results:
        parts, limit = res["fedray"], res["numpy"]
        if any("error" in p for p in parts + [limit]):
            why = next(p["error"].splitlines()[0] for p in parts + [limit] if "error" in p)
            lines.append(f"| {res['protocol'].upper()} | {res['trials']} | {res['jobs']} | {res['runs']:,} | - | - | - "
                         f"| - | - | {why} |")
            continue
        total = sum(p["seconds"] for p in parts)
        load = sum(p["background_cores"] * p["seconds"] for p in parts + [limit]) / (total + limit["seconds"])
        parts_s = " + ".join(f"{p['seconds']:.0f}" for p in parts)
        losses = ", ".join(f"{p['median_loss']:.4g} / {q:.4g}" for p, q in zip(parts, limit["median_losses"]))
        lines.append(
            f"| {res['protocol'].upper()} | {res['trials']} | {res['jobs']} | {res['runs']:,} | {total:.0f} "
            f"({parts_s}) | {limit['seconds']:.0f} | "
            f"{total / limit['seconds']:.2f}x | {max(p['peak_rss'] for p in parts) / GIB:.2f} / "
            f"{limit['peak_rss'] / GIB:.2f} | {losses} | {load:.2f} |")
    return "\n".join(lines)
