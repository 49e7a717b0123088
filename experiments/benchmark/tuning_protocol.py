"""Whole tuning protocols: E1's and E2's sweeps through fedray against their numpy limit.

fedray runs each protocol as its experiment's script does (``experiments/e1_mnist/run.sh``,
``experiments/e2_insurance/all.sh``): E1 as two ``python -m fedray -m ...`` multiruns, E2 as one
over the union of its experiment's grids (``hydra.sweeper.grids``), each timed from launch to
exit (interpreter, Ray start, every job's data, rounds, MLflow, shutdown). The numpy limit
(``tuning_numpy.py``) runs the same Hydra jobs, listed by the sweeper itself, each job's
replicas vectorised, in one process on one core; it is timed from launch to exit too, data
loading included.

The jobs' replicas, step sizes, noise multipliers and K come from fedray's own plans, made
before anything is timed, and every federation the dataset cache keeps (MNIST's) is built then
too, so that both sides read it. A plan depends on the trial only through the data, whose silo sizes
are the same in every trial here; that is checked on trial 1 and the trial-0 plan reused.

With ``trials`` below 20 (the papers' count) both sides do that fraction of the protocol.
"""

from __future__ import annotations

import json
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np

from measuring import GIB, timed

HERE = Path(__file__).resolve().parent
CONF = HERE.parents[1] / "fedray" / "conf"
# What a job's overrides add to the sweep's and the benchmark's own (store and output places):
# the rest names the job's setting, shared by its trials.
NOT_SETTING = ("trial=", "tracking.", "hydra.")


def sweeps(protocol: str, trials: int) -> list[dict]:
    """The multiruns of a protocol, as its script runs them (``experiments/e1_mnist/run.sh``,
    ``experiments/e2_insurance/all.sh``): ``fixed`` overrides, then ``axes`` (Hydra sweep
    overrides, slowest first). E2 is one multirun over the union of its experiment's grids."""
    trial_axis = ("trial", tuple(range(trials)))
    if protocol == "e1":
        private, baseline = ("isrl_dp_mb_sgd", "isrl_dp_local_sgd"), ("mb_sgd", "local_sgd")
        return [{"fixed": ["experiment=e1_mnist"] + extra,
                 "axes": [trial_axis, ("participation.silos_per_round", (25, 12)), ("algorithm", algorithms)]}
                for algorithms, extra in ((private, []), (baseline, ["privacy=none"]))]
    if protocol == "e2":
        return [{"fixed": ["experiment=e2_insurance_all"], "axes": [trial_axis]}]
    raise ValueError(f"protocol must be e1 or e2; got {protocol!r}")


def sweep_arguments(sweep: dict) -> list[str]:
    return sweep["fixed"] + [f"{key}={','.join(repr(v) if isinstance(v, float) else str(v) for v in values)}"
                             for key, values in sweep["axes"]]


def launched(sweep: dict) -> list[tuple[int, list[str]]]:
    """Every job of a multirun, in launch order, as (group, overrides): the overrides the sweeper
    gives it, and its grid (0 for a sweep without ``hydra.sweeper.grids``)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    import hydra_plugins.fedray_launcher.covering_sweeper as covering
    from fedray.resolvers import register

    register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        config = compose("config", overrides=sweep["fixed"], return_hydra_config=True)
    grids = config.hydra.sweeper.get("grids")
    grids = OmegaConf.to_container(grids) if grids is not None else []
    arguments = OverridesParser.create().parse_overrides(sweep_arguments(sweep))
    jobs = []
    for group, grid in enumerate(grids or [None]):
        # Looked up now: Hydra's plugin scan re-executes the module (new classes, the base too).
        sweeper = covering.CoveringSweeper(max_batch_size=None, grids=None if grid is None else [grid])
        jobs += [(group, overrides) for overrides in sweeper.split_arguments(arguments, None)[0]]
    return jobs


def setting(overrides) -> tuple[str, ...]:
    """A job's overrides without its trial and where it writes: the same for all its trials."""
    return tuple(sorted(o for o in overrides if not o.startswith(NOT_SETTING)))


def command(sweep: dict, work: Path, name: str) -> list[str]:
    """The multirun command line, its store and outputs under ``work``."""
    return [sys.executable, "-m", "fedray", "-m", *sweep_arguments(sweep),
            f"tracking.uri=sqlite:///{work / (name + '.db')}", f"tracking.artifact_location={work / 'mlartifacts'}",
            f"hydra.sweep.dir={work / 'multirun' / name}"]


def numpy_jobs(protocol: str, trials: int) -> list[dict]:
    """What ``tuning_numpy.py`` needs for every job of the protocol, from fedray's plans; ``group``
    numbers the protocol's sweeps, or its grids where it is one multirun over grids."""
    return numpy_jobs_of(sweeps(protocol, trials), trials)


def numpy_jobs_of(planned: list[dict], trials: int) -> list[dict]:
    """``numpy_jobs`` for the multiruns ``planned`` (each as ``sweeps`` gives them), of ``trials`` trials."""
    from fedray.plan import make_plan
    from fedray_job import compose

    jobs, specs, groups = [], {}, 0
    for sweep in planned:
        order = launched(sweep)
        for group, overrides in order:
            key = setting(overrides)
            if key not in specs:
                base = job_spec(make_plan(compose(list(key) + ["trial=0"])))
                if trials > 1:
                    check = job_spec(make_plan(compose(list(key) + ["trial=1"])))
                    for name in ("step_sizes", "noise_multiplier", "batch_size", "l2_clip", "repetitions"):
                        if not np.array_equal(np.asarray(base[name]), np.asarray(check[name])):
                            raise SystemExit(f"{key}: the plan's {name} differs between trials 0 and 1")
                specs[key] = base
            trial = int(next(o for o in overrides if o.startswith("trial=")).split("=", 1)[1])
            jobs.append(dict(specs[key], trial=trial, seed=trial, sweep=groups + group, setting=key,
                             name=" ".join(key + (f"trial={trial}",))))
        groups += 1 + max(group for group, _ in order)
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


def fedray_median_losses(work: Path, name: str, experiment: str, jobs: list[dict]) -> dict[int, float]:
    """Per group of ``jobs``: the median over every replica of every finished job of the final
    tail-average training loss, read back from the sweep's store (a run's group from its overrides)."""
    from mlflow.tracking import MlflowClient

    group_of = {job["setting"]: job["sweep"] for job in jobs}
    client = MlflowClient(tracking_uri=f"sqlite:///{work / (name + '.db')}")
    found = client.get_experiment_by_name(experiment)
    values: dict[int, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in client.search_runs([found.experiment_id], filter_string="attributes.status = 'FINISHED'",
                                      max_results=50000):
            if "algorithm" not in run.data.tags:        # the sweep's parent run
                continue
            group = group_of[setting(run.data.tags["overrides"].split())]
            summary = json.loads(Path(client.download_artifacts(run.info.run_id, "summary.json", tmp)).read_text())
            values.setdefault(group, []).extend(np.atleast_1d(summary["final_train_loss_avg"]))
    return {group: float(np.median(v)) for group, v in values.items()}


def run_protocol(protocol: str, trials: int, work: Path, env: dict, timeout: float) -> dict:
    """Both sides of one protocol; returns times, runs and the loss check."""
    from mlflow.tracking import MlflowClient

    jobs = numpy_jobs(protocol, trials)
    # Every cached federation built once, untimed: both sides then read it from the dataset cache
    # (fedray.data.cache). Otherwise MNIST's PCA, seconds a trial, would fall on fedray, run first.
    warm = {(repr(job["dataset"]), job["seed"], job["trial"]): job for job in jobs if getattr(job["dataset"], "cache", False)}
    for job in warm.values():
        job["dataset"].load(job["seed"], job["trial"])
    experiment = "e1_mnist" if protocol == "e1" else "e2_insurance"
    fedray_parts, planned, medians = [], sweeps(protocol, trials), {}
    for i, sweep in enumerate(planned):
        name = f"{protocol}-sweep{i}"
        # An existing store, as the experiment's scripts use one for all their sweeps and the
        # jobs' runs above find one: creating its schema (seconds) is not timed.
        MlflowClient(tracking_uri=f"sqlite:///{work / (name + '.db')}").search_experiments()
        print(f"[protocol-{protocol}] fedray sweep {i + 1} of {len(planned)} ...", flush=True)
        part = timed(command(sweep, work, name), work / f"{name}.log", env, timeout)
        if "error" not in part:
            medians.update(fedray_median_losses(work, name, experiment, jobs))
        fedray_parts.append(part)
    jobs_path = work / f"{protocol}-numpy.pkl"
    jobs_path.write_bytes(pickle.dumps(jobs))
    out = work / f"{protocol}-numpy.out.json"
    numpy_env = dict(env, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    print(f"[protocol-{protocol}] numpy limit, {len(jobs)} jobs ...", flush=True)
    limit = timed([sys.executable, str(HERE / "tuning_numpy.py"), str(jobs_path), str(out)],
                  work / f"{protocol}-numpy.log", numpy_env, timeout)
    groups = sorted({job["sweep"] for job in jobs})
    if "error" not in limit:
        report = json.loads(out.read_text())
        limit["median_losses"] = [float(np.median([v for job, res in zip(jobs, report["jobs"]) if job["sweep"] == g
                                                   for v in res["final_train_loss_avg"]]))
                                  for g in groups]
    runs = sum(len(job["step_sizes"]) for job in jobs)
    return {"protocol": protocol, "trials": trials, "jobs": len(jobs), "runs": runs, "fedray": fedray_parts,
            "fedray_median_losses": [medians.get(g, float("nan")) for g in groups], "numpy": limit}


def table(results: list[dict]) -> str:
    lines = ["| protocol | trials | Hydra jobs | runs | fedray s (sweeps) | numpy limit s | fedray ÷ numpy "
             "| peak RSS fedray / numpy (GiB) | median final train loss per sweep or grid, fedray / numpy "
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
        ours = res.get("fedray_median_losses") or [p["median_loss"] for p in parts]   # older JSON: per sweep
        losses = ", ".join(f"{p:.4g} / {q:.4g}" for p, q in zip(ours, limit["median_losses"]))
        lines.append(
            f"| {res['protocol'].upper()} | {res['trials']} | {res['jobs']} | {res['runs']:,} | {total:.0f} "
            f"({parts_s}) | {limit['seconds']:.0f} | "
            f"{total / limit['seconds']:.2f}x | {max(p['peak_rss'] for p in parts) / GIB:.2f} / "
            f"{limit['peak_rss'] / GIB:.2f} | {losses} | {load:.2f} |")
    return "\n".join(lines)
