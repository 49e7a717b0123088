"""Benchmark: the same job run by fedray, by one numpy process and by Flower's simulation engine.

    python experiments/benchmark/run.py                 # the full benchmark: the jobs (about an hour,
                                                        # much of it Flower) and both protocols (hours)
    python experiments/benchmark/run.py --quick         # small N, few rounds, numpy vs fedray only
    python experiments/benchmark/run.py --jobs synthetic-N1000 mnist --no-flower
    python experiments/benchmark/run.py --jobs --protocols e1 e2 --protocol-trials 2   # protocols only
    python experiments/benchmark/run.py --no-flower --protocol-trials e1=2 e2=20   # every target, one invocation
    python experiments/benchmark/run.py --tables-from out/bench.json               # an earlier run's tables again
    python experiments/benchmark/run.py --tables-from out/bench.json --page docs/performance.md   # into the docs page
    python experiments/benchmark/run.py --jobs --sweep-scaling --scaling-trials 20 # sweep scaling alone (E2, 20 trials)

Every (job, runner) pair runs as its own subprocess, one after another, and is measured from
outside: a thread sums the resident memory (RSS) of the subprocess and all its descendants
(Ray's GCS, raylet and workers included) every 0.2 s, and the subprocess reports the wall-clock
end time of each round. Per runner the table gives

- s/round: (end of the last round - end of the first) / (rounds - 1): the mean over the rounds
  after the first. Not the median gap: a small federation runs several rounds per actor call
  (1, 2, 4, ... rounds), whose ends arrive together, so the gaps within a call are near zero;
- first round: from just before the subprocess starts to the end of round 0 (interpreter start,
  imports, Ray start, data loading, round 0);
- CPU s/round: CPU time of the whole process tree between the first and the last round end,
  per round (less sensitive than wall time to other work on the machine);
- peak RSS: the largest sum over the process tree (shared pages count once per process);
- final train loss: mean over silos of the training loss of the last iterate, compared with the
  numpy loop's and with its mean and spread over other seeds;
- other CPU load: CPU used meanwhile by processes outside the measured tree (other work on a
  shared machine; it slows the measured job down).

Runners
-------
fedray, privacy=none
    The normal path (`fedray.cli.run_job`: Hydra compose -> plan -> Ray with the default actor
    count -> MLflow tracking -> rich progress bar), privacy off but per-example clipping at
    l2_clip = 1: the round structure without noise and without the accountant.
fedray, paper
    The same with privacy=paper: ISRL-DP noise inside the silos and per-silo accounting each
    round. The paper's formula sets noise_std = 2 l2_clip sqrt(8 R ln(1/delta)) / (n eps); the
    script picks eps so that noise_std is exactly the job's (0.1), and checks the plan agrees.
numpy
    ``numpy_loop.py``: one process on one core (BLAS limited to one thread), vectorised over
    silos, its own random generator. Its steady time includes evaluating the model on every
    silo each round, as fedray does for its progress bar and MLflow; the second table also
    gives its training step alone.
Flower
    ``flower_job.py`` in Flower's simulation engine (flwr[simulation], pinned below), installed
    by this script into ``.flower-venv`` next to it; skipped with a message when it cannot be
    installed. Jobs with many silos run fewer rounds in Flower (``--flower-large-rounds``).

Jobs: synthetic logistic silos (d = 50, n = 500, K = 100, noise_std = 0.1, step 0.5, R = 50,
every silo every round) for N in 10, 100, 1,000, 10,000; the scale job N = 100,000 (n = 50,
K = 10, a few rounds, no Flower); E1's MNIST job (`experiment=isrl_dp_convex`); and the silo
scale jobs ``silos-N10000`` to ``silos-N1000000`` (n = 10, d = 50, K = 5, R = 10), whose table
gives the round time per 10^6 silos (linear in N if it stays flat).

Protocols (``tuning_protocol.py``): E1's and E2's whole tuning protocols, each sweep as its
experiment's script runs it, timed from launch to exit, against ``tuning_numpy.py``, which runs
the same Hydra jobs' replicas vectorised in one process on one core. By default both run with 20
trials (hours); ``--protocol-trials`` runs that many trials of each (or per protocol: e1=2 e2=20).

Sweep scaling (``--sweep-scaling``, ``sweep_scaling.py``): one sweep (E2's protocol of
``--scaling-trials`` trials, or with ``--quick`` the 2 private jobs of its main setting per trial)
one job after another and on 1, 2, 4, ... warm job workers (``hydra/launcher=ray_jobs``) up to
the CPUs of this machine or of the cluster at ``--address``, against its numpy limit.

Last, a table of the speed targets, each a ratio within this invocation, met or not: command to
first round at most 1.3x Ray's floor (the jobs up to N = 1,000 and MNIST, which generate no data
to speak of), a round at N = 10 and E1's N = 25 at most 2x the numpy loop, each protocol at most
1.5x its numpy limit, the round time per silo at 10^6 silos at most 1.25x its lowest at 10^4
and 10^5 (linear in N), and the scaling sweep on the most job workers faster than one job after
another.
"""

from __future__ import annotations

import argparse
import json
from importlib import metadata
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from measuring import GIB, PAGE, measure

HERE = Path(__file__).resolve().parent
FLOWER_VENV = HERE / ".flower-venv"
FLOWER_REQUIREMENT = "flwr[simulation]==1.41.0"   # 1.42.0 pins a certifi newer than PyPI's mirror here
SHARED_DATASETS = HERE.parents[2] / "shared" / "datasets"


# -- jobs -------------------------------------------------------------------------------------

def synthetic_job(num_silos: int, samples: int = 500, test_samples: int = 100, dim: int = 50,
                  batch_size: int = 100, rounds: int = 50, step_size: float = 0.5,
                  noise_std: float = 0.1, l2_clip: float = 1.0, name: str | None = None,
                  paper_extra: tuple[str, ...] = ()) -> dict:
    """The synthetic logistic job; every silo takes part in every round."""
    data = {"num_silos": num_silos, "samples_per_silo": samples, "test_samples_per_silo": test_samples,
            "dim": dim}
    # eps at which the paper's formula gives exactly noise_std (delta = 1/n^2, L = 2 l2_clip):
    # noise_std = 2 l2_clip sqrt(8 R ln(n^2)) / (n eps)  (fedray.protocols.isrl_dp.calibration, seed-004 §5)
    epsilon = 2.0 * l2_clip * math.sqrt(8.0 * rounds * math.log(samples ** 2)) / (samples * noise_std)
    common = [
        "data=synthetic",
        f"data.spec.num_silos={num_silos}",
        f"data.spec.samples_per_silo={samples}",
        f"data.spec.test_samples_per_silo={test_samples}",
        f"data.spec.dim={dim}",
        f"participation.silos_per_round={num_silos}",
        f"algorithm.batch_size={batch_size}",
        f"algorithm.step_size={step_size}",
        f"num_rounds={rounds}",
        f"privacy.l2_clip={l2_clip}",
    ]
    return {
        "name": name or f"synthetic-N{num_silos}",
        "label": f"synthetic N={num_silos:,} (n={samples}, d={dim}, K={batch_size}, R={rounds})",
        "kind": "synthetic", "data": data, "seed": 0, "trial": 0,
        "num_silos": num_silos, "dim": dim, "silos_per_round": num_silos, "batch_size": batch_size,
        "num_rounds": rounds, "step_size": step_size, "l2_clip": l2_clip, "noise_std": noise_std,
        "noise_multiplier": None, "margin_clip": 15.0,
        "fedray_variants": {
            "fedray, privacy=none": common + ["privacy=none"],
            f"fedray, paper (eps={epsilon:.3f})": common + ["privacy=paper", f"privacy.epsilon={epsilon!r}",
                                                             *paper_extra],
        },
        "check_noise_std": noise_std,
    }


def mnist_job() -> dict:
    """seed-004 E1 at eps = 3 (`experiment=isrl_dp_convex`); K and the noise come from the plan."""
    from fedray.plan import make_plan

    overrides = ["experiment=isrl_dp_convex"]
    plan = make_plan(_compose(overrides))
    spec = dict(plan.config["data"]["spec"])
    spec.pop("_target_")
    epsilon = float(np.max(plan.privacy.target_epsilon))
    return {
        "name": "mnist",
        "label": f"E1 MNIST (N={plan.shape.num_silos}, M={plan.sampler.silos_per_round}, "
                 f"K={plan.protocol.batch_size}, R={plan.num_rounds}, eps={epsilon:g})",
        "kind": "mnist", "data": spec, "seed": plan.seed, "trial": plan.trial,
        "num_silos": plan.shape.num_silos, "dim": plan.shape.dim,
        "silos_per_round": plan.sampler.silos_per_round, "batch_size": plan.protocol.batch_size,
        "num_rounds": plan.num_rounds, "step_size": float(plan.step_sizes[0]), "l2_clip": plan.protocol.l2_clip,
        "noise_std": None, "noise_multiplier": float(np.asarray(plan.privacy.noise_multiplier).flat[0]),
        "margin_clip": float(plan.config["data"]["loss"]["margin_clip"]),
        "fedray_variants": {f"fedray, paper (eps={epsilon:g})": overrides},
    }


def all_jobs(quick: bool) -> list[dict]:
    if quick:
        return [synthetic_job(n, rounds=10, name=f"quick-N{n}") for n in (10, 100)]
    jobs = [synthetic_job(n) for n in (10, 100, 1000, 10_000)]
    # At n = 50, R = 5 the paper's formula gives noise 0.1 at eps = 7.08, which the RDP accountant
    # charges at eps ~ 14.8: fedray refuses that plan unless told to run it anyway (timing only).
    scale = synthetic_job(100_000, samples=50, test_samples=10, batch_size=10, rounds=5, name="scale-N100000",
                          paper_extra=("++privacy.enforce_budget=false",))
    scale["flower"] = False
    jobs.append(scale)
    jobs.append(mnist_job())
    jobs += silo_scale_jobs()
    return jobs


SILO_SCALE = (10_000, 100_000, 1_000_000)


def silo_scale_jobs() -> list[dict]:
    """Round time against the silo count at a fixed silo size (n = 10, d = 50, K = 5, R = 10): is it
    linear from 10^4 to 10^6, and does 10^6 fit in memory? Run anyway past the budget (timing only:
    the paper's noise at n = 10 is charged far above its nominal epsilon)."""
    jobs = []
    for n in SILO_SCALE:
        job = synthetic_job(n, samples=10, test_samples=2, batch_size=5, rounds=10, name=f"silos-N{n}",
                            paper_extra=("++privacy.enforce_budget=false",))
        job["flower"], job["scale"] = False, True
        jobs.append(job)
    return jobs


def _compose(overrides: list[str]):
    from fedray_job import compose

    return compose(overrides)


def check_job(job: dict) -> None:
    """Plan every fedray variant before anything runs; the paper variant must give the job's noise."""
    from fedray.plan import make_plan

    for label, overrides in job["fedray_variants"].items():
        plan = make_plan(_compose(overrides))
        want = job.get("check_noise_std")
        if want is not None and plan.privacy.private:
            got = float(np.mean(plan.privacy.noise_multiplier)) * 2.0 * plan.protocol.l2_clip / plan.protocol.privacy_sample_size
            if abs(got - want) > 1e-9 * want:
                raise SystemExit(f"{job['name']} / {label}: the plan's noise std is {got}, not {want}")


# -- the three runners -------------------------------------------------------------------------

def child_env(job: dict) -> dict:
    env = dict(os.environ)
    # Render the progress bar as in a terminal, refresh thread included, although output goes to a log.
    env.update(TTY_COMPATIBLE="1", TTY_INTERACTIVE="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    return env


def run_fedray(job: dict, label: str, overrides: list[str], work: Path, timeout: float) -> dict:
    tag = f"{job['name']}-fedray-{'paper' if 'paper' in label else 'none'}"
    overrides = overrides + [
        f"tracking.uri=sqlite:///{work / 'mlflow.db'}",
        f"tracking.artifact_location={work / 'mlartifacts'}",
        "progress=true",
    ]
    spec_path = work / f"{tag}.spec.json"
    spec_path.write_text(json.dumps({"fedray_overrides": overrides}))
    cmd = [sys.executable, str(HERE / "fedray_job.py"), str(spec_path), str(work / f"{tag}.out.json")]
    return measure(cmd, work / f"{tag}.out.json", work / f"{tag}.log", child_env(job), timeout)


def run_numpy(job: dict, work: Path, timeout: float) -> dict:
    tag = f"{job['name']}-numpy"
    spec_path = work / f"{tag}.spec.json"
    spec_path.write_text(json.dumps(job))
    cmd = [sys.executable, str(HERE / "numpy_loop.py"), str(spec_path), str(work / f"{tag}.out.json")]
    # One process on one core, as each Ray actor (Ray sets OMP_NUM_THREADS=1 in them): a
    # multithreaded BLAS gains nothing on these small products and collapses when cores are busy.
    env = dict(child_env(job), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return measure(cmd, work / f"{tag}.out.json", work / f"{tag}.log", env, timeout)


def run_ray_floor(job: dict, num_actors: int, work: Path, timeout: float) -> dict:
    tag = f"{job['name']}-ray-floor"
    spec_path = work / f"{tag}.spec.json"
    spec_path.write_text(json.dumps({"num_actors": num_actors}))
    cmd = [sys.executable, str(HERE / "ray_floor.py"), str(spec_path), str(work / f"{tag}.out.json")]
    return measure(cmd, work / f"{tag}.out.json", work / f"{tag}.log", child_env(job), timeout)


def seed_spread(job: dict, seeds: int = 8, budget: float = 30.0) -> tuple[float, float] | None:
    """(mean, std) of the numpy loop's final loss over other seeds: the noise the comparison allows."""
    from numpy_loop import load_federation, run_loop

    fed = load_federation(job)
    losses, started = [], time.perf_counter()
    for s in range(1, seeds + 1):
        rng = np.random.default_rng([job["seed"], 7919, s])
        losses.append(run_loop(job, fed, rng, evaluate_rounds=False)["final_train_loss"])
        if time.perf_counter() - started > budget:
            break
    return (float(np.mean(losses)), float(np.std(losses, ddof=1))) if len(losses) > 1 else None


def flower_python() -> tuple[Path | None, str]:
    """The Flower virtual environment's interpreter, creating it if needed; (None, why) if it fails."""
    python = FLOWER_VENV / "bin" / "python"
    probe = [str(python), "-c", "import flwr, ray, numpy; print(flwr.__version__)"]
    if python.exists():
        done = subprocess.run(probe, capture_output=True, text=True)
        if done.returncode == 0:
            return python, done.stdout.strip()
    print(f"installing {FLOWER_REQUIREMENT} into {FLOWER_VENV} ...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(FLOWER_VENV)], check=True, capture_output=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", FLOWER_REQUIREMENT, "numpy"],
                              capture_output=True, text=True, timeout=1200)
    except (subprocess.SubprocessError, OSError) as err:
        return None, f"could not create the Flower environment: {err}"
    if done.returncode != 0:
        return None, "pip could not install " + FLOWER_REQUIREMENT + ": " + done.stderr.strip().splitlines()[-1]
    done = subprocess.run(probe, capture_output=True, text=True)
    if done.returncode != 0:
        return None, "flwr installed but does not import: " + done.stderr.strip().splitlines()[-1]
    return python, done.stdout.strip()


def dump_federation(job: dict, directory: Path) -> dict:
    """Write the job's records as .npy files for Flower's clients; resolve a data-dependent clip."""
    from numpy_loop import load_federation

    fed = load_federation(job)
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in fed.items():
        np.save(directory / f"{key}.npy", value)
    spec = dict(job)
    if spec["l2_clip"] is None:   # the paper's L estimate: the largest training feature norm
        mask = np.arange(fed["x"].shape[1])[None, :] < fed["n"][:, None]
        spec["l2_clip"] = float(np.linalg.norm(fed["x"], axis=2)[mask].max())
    if spec["noise_std"] is None:
        spec["noise_std"] = spec["noise_multiplier"] * 2.0 * spec["l2_clip"] / spec["batch_size"]
    return spec


def run_flower(job: dict, python: Path, work: Path, rounds: int, timeout: float) -> dict:
    tag = f"{job['name']}-flower"
    data = work / f"{tag}-data"
    spec = dump_federation(job, data)
    spec["flower_rounds"] = rounds
    spec_path = work / f"{tag}.spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {k: v for k, v in child_env(job).items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    cmd = [str(python), str(HERE / "flower_job.py"), str(spec_path), str(data), str(work / f"{tag}.out.json")]
    try:
        return measure(cmd, work / f"{tag}.out.json", work / f"{tag}.log", env, timeout)
    finally:
        shutil.rmtree(data, ignore_errors=True)


# -- the table --------------------------------------------------------------------------------

def _fmt_time(seconds) -> str:
    if seconds is None or not np.isfinite(seconds):
        return "-"
    return f"{seconds:.3g}" if seconds < 100 else f"{seconds:.0f}"


def _ratio(a, b) -> str:
    if a is None or b is None or not (np.isfinite(a) and np.isfinite(b)) or b <= 0:
        return "-"
    return f"{a / b:.3g}x"


def table(results: list[dict]) -> str:
    lines = [
        "| job | runner | rounds | s/round after the first (mean) | CPU s/round, all processes | first round (s) "
        "| peak RSS, all processes (GiB) "
        "| final train loss | loss − numpy (other numpy seeds) | other CPU load (cores) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        job, runners = res["job"], res["runners"]
        numpy_loss = runners.get("numpy", {}).get("final_train_loss")
        spread, mean = res.get("seed_std"), res.get("seed_mean")
        for name, rep in runners.items():
            if "error" in rep or "skipped" in rep:
                why = rep.get("skipped") or rep["error"].splitlines()[0]
                lines.append(f"| {job['label']} | {name} | - | - | - | - | "
                             f"{rep.get('peak_rss', 0) / GIB:.2f} | - | {why} | - |")
                continue
            loss = rep.get("final_train_loss")
            note = ""
            if name.startswith("Flower") and rep["rounds"] < job["num_rounds"]:
                ref = runners.get("numpy", {}).get("train_loss", [])
                if len(ref) > rep["rounds"]:
                    note = f"after {rep['rounds']} rounds; numpy then: {ref[rep['rounds']]:.4f}"
                    numpy_at = ref[rep["rounds"]]
                    note += f" (diff {loss - numpy_at:+.4f})" if loss is not None else ""
            elif name != "numpy" and loss is not None and numpy_loss is not None:
                note = f"{loss - numpy_loss:+.4f}"
                if spread:
                    note += f"; vs seed mean {loss - mean:+.4f} ± {spread:.4f}"
            elif name == "numpy" and spread:
                note = f"seed mean {mean:.4f} ± {spread:.4f}"
            lines.append(
                f"| {job['label']} | {name} | {rep['rounds']} | {_fmt_time(rep['steady'])} | "
                f"{_fmt_time(rep['cpu_per_round'])} | {rep['first_round']:.1f} | {rep['peak_rss'] / GIB:.2f} | "
                f"{'-' if loss is None else f'{loss:.4f}'} | {note} | {rep['background_cores']:.2f} |"
            )
    lines += ["", "| job | numpy s/round: with per-round evaluation / step only | fedray none ÷ numpy "
                  "| fedray paper ÷ numpy | fedray none ÷ numpy step only | Flower ÷ fedray none "
                  "| Flower ÷ fedray paper | first round: Ray floor (s) | fedray none ÷ Ray floor "
                  "| fedray paper ÷ Ray floor |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for res in results:
        runners = res["runners"]

        def steady(prefix):
            for name, rep in runners.items():
                if name.startswith(prefix) and "steady" in rep:
                    return rep["steady"]
            return None

        none, paper, num, flower = (steady("fedray, privacy=none"), steady("fedray, paper"),
                                    steady("numpy"), steady("Flower"))
        def first(prefix):
            return next((rep["first_round"] for name, rep in runners.items()
                         if name.startswith(prefix) and "first_round" in rep), None)

        step = runners.get("numpy", {}).get("step_time_median")
        floor = first("Ray floor")
        lines.append(f"| {res['job']['label']} | {_fmt_time(num)} / {_fmt_time(step)} | {_ratio(none, num)} | "
                     f"{_ratio(paper, num)} | {_ratio(none, step)} | {_ratio(flower, none)} | "
                     f"{_ratio(flower, paper)} | {_fmt_time(floor)} | {_ratio(first('fedray, privacy=none'), floor)} | "
                     f"{_ratio(first('fedray, paper'), floor)} |")
    scaled = [res for res in results if res["job"].get("scale")]
    if scaled:
        lines += ["", "| silos N | runner | s/round | s/round per 10^6 silos | peak RSS, all processes (GiB) |",
                  "|---:|---|---:|---:|---:|"]
        for res in scaled:
            n = res["job"]["num_silos"]
            for name, rep in res["runners"].items():
                if "steady" in rep and np.isfinite(rep["steady"]):
                    lines.append(f"| {n:,} | {name} | {_fmt_time(rep['steady'])} | "
                                 f"{_fmt_time(rep['steady'] * 1e6 / n)} | {rep['peak_rss'] / GIB:.2f} |")
    return "\n".join(lines)


# Issue 16's speed targets, each a ratio measured within one invocation.
FIRST_ROUND_LIMIT = 1.3      # command to first round, against Ray's floor with as many actors
SMALL_ROUND_LIMIT = 2.0      # per round at N = 10 and E1's N = 25, against the numpy loop
PROTOCOL_LIMIT = 1.5         # a whole tuning protocol, against its numpy limit
SMALL_JOBS = ("synthetic-N10", "mnist")
START_UP_JOBS = ("synthetic-N10", "synthetic-N100", "synthetic-N1000", "mnist")   # no data generation to speak of
SCALE_GROWTH_LIMIT = 1.25    # round time per silo at 10^6 against its lowest at fewer silos


def _variant(runner: str) -> str:
    """The fedray variant of a runner's name: "fedray, paper (eps=3)" -> "paper"."""
    return runner.split(",", 1)[1].strip().split(" ")[0]


def _ratios(results: list[dict], names, measure: str, against: str) -> list[tuple[str, float]]:
    """(job and fedray variant, fedray's ``measure`` / the ``against`` runner's) for the named jobs."""
    found = []
    for res in results:
        if res["job"]["name"] not in names:
            continue
        base = next((rep.get(measure) for name, rep in res["runners"].items() if name.startswith(against)), None)
        for name, rep in res["runners"].items():
            if name.startswith("fedray") and rep.get(measure) is not None and base:
                found.append((f"{res['job']['name']} {_variant(name)}", rep[measure] / base))
    return found


def targets_table(results: list[dict], protocols: list[dict], scaling: dict | None = None) -> str:
    """The targets, each met or not, from this invocation's numbers."""
    lines = ["| target | limit | measured | met |", "|---|---:|---|---|"]

    def row(target: str, limit: str, pairs: list[tuple[str, float]], bound: float) -> None:
        if pairs:
            shown = "; ".join(f"{label} {value:.2f}x" for label, value in pairs)
            lines.append(f"| {target} | {limit} | {shown} | {'yes' if max(v for _, v in pairs) <= bound else 'no'} |")

    row("1. command to first round ÷ Ray's floor (jobs without data generation)", f"{FIRST_ROUND_LIMIT}x",
        _ratios(results, START_UP_JOBS, "first_round", "Ray floor"), FIRST_ROUND_LIMIT)
    row("2. s/round ÷ the numpy loop, N = 10 and E1's N = 25", f"{SMALL_ROUND_LIMIT}x",
        _ratios(results, SMALL_JOBS, "steady", "numpy"), SMALL_ROUND_LIMIT)
    pairs = []
    # E2's protocol is also the scaling sweep when the invocation reused its runs: its ratio is then
    # the faster launcher's (the issue asks for whichever is faster on the machine), both shown.
    fastest = None
    if scaling and scaling.get("reused"):
        timed = [m for m in scaling["modes"] if "seconds" in m and m.get("same_as_sequential")]
        fastest = min(timed, key=lambda m: m["seconds"], default=None)
    for res in protocols:
        if not any("error" in part for part in res["fedray"] + [res["numpy"]]):
            total = sum(part["seconds"] for part in res["fedray"])
            label = f"{res['protocol'].upper()} ({res['trials']} trials)"
            if res["protocol"] == "e2" and fastest is not None and fastest["workers"] is not None:
                label += f", one after another {total / res['numpy']['seconds']:.2f}x, on {fastest['workers']} warm job workers"
                total = fastest["seconds"]
            pairs.append((label, total / res["numpy"]["seconds"]))
    row("3. whole tuning protocol ÷ its numpy limit", f"{PROTOCOL_LIMIT}x", pairs, PROTOCOL_LIMIT)
    scaled = {res["job"]["num_silos"]: res for res in results if res["job"].get("scale")}
    if max(scaled, default=0) >= 1_000_000:
        per_silo = {}
        for n, res in sorted(scaled.items()):
            for name, rep in res["runners"].items():
                if name.startswith("fedray") and np.isfinite(rep.get("steady", np.nan)):
                    per_silo.setdefault(_variant(name), {})[n] = rep["steady"] * 1e6 / n
        growth = [(f"{variant} {' / '.join(f'{v:.2f}' for v in times.values())} s per 10^6 silos at "
                   f"{' / '.join(f'10^{int(np.log10(n))}' for n in times)}; at 10^6 over the lowest below",
                   times[max(times)] / min(v for n, v in times.items() if n < max(times)))
                  for variant, times in per_silo.items() if len(times) > 1]
        row("4. round time linear in N up to 10^6 silos (n = 10) on this machine", f"{SCALE_GROWTH_LIMIT}x",
            growth, SCALE_GROWTH_LIMIT)
    timed_modes = {m["workers"]: m["seconds"] for m in (scaling or {}).get("modes", ()) if "seconds" in m}
    if None in timed_modes and len(timed_modes) > 1:
        most = max(k for k in timed_modes if k is not None)
        row(f"5. sweep ({scaling['sweep']}) on {most} warm job workers ÷ one job after another", "< 1x",
            [(f"{timed_modes[most]:.1f} s / {timed_modes[None]:.1f} s", timed_modes[most] / timed_modes[None])],
            1.0 - 1e-12)
    return "\n".join(lines)


def machine() -> str:
    import ray

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PHYS_PAGES") * PAGE / GIB
    return (f"{time.strftime('%Y-%m-%d')}; {cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, "
            f"{platform.system()} {platform.release()}; Python {platform.python_version()}, "
            f"numpy {np.__version__}, ray {ray.__version__}, mlflow {metadata.version('mlflow')}")


def tables(results: list[dict], protocol_results: list[dict], scaling: dict | None = None) -> str:
    from sweep_scaling import table as scaling_table
    from tuning_protocol import table as protocol_table

    return "\n\n".join(filter(None, [table(results) if results else "",
                                    protocol_table(protocol_results) if protocol_results else "",
                                    scaling_table(scaling) if scaling else "",
                                    targets_table(results, protocol_results, scaling)]))


PAGE_BEGIN = "<!-- benchmark tables: written by experiments/benchmark/run.py --page; do not edit -->"
PAGE_END = "<!-- end of the benchmark tables -->"


def marked_page(page: Path) -> str:
    """``page``'s text, refused (``SystemExit``, naming it) unless it holds each marker once."""
    current = page.read_text() if page.is_file() else ""
    if current.count(PAGE_BEGIN) != 1 or current.count(PAGE_END) != 1:
        raise SystemExit(f"--page {page}: needs the lines {PAGE_BEGIN!r} and {PAGE_END!r} once each")
    return current


def write_page(page: Path, header: str, text: str) -> None:
    """Put an invocation's header and tables into ``page``, between its two markers (the prose
    around them is kept); a page without them is refused, and nothing is written."""
    before, rest = marked_page(page).split(PAGE_BEGIN)
    after = rest.split(PAGE_END)[1]
    block = f"{PAGE_BEGIN}\n\n{page_header(header)}\n\n{text}\n\n{PAGE_END}"
    page.write_text(before + block + after)


def page_header(header: str) -> str:
    """The invocation's header line (machine, versions, where fedray came from) as a sentence."""
    return f"Machine and software: {header}."


# -- main -------------------------------------------------------------------------------------

def protocol_trials(parser, values: list[str]) -> dict[str, int]:
    """``--protocol-trials``: one count for both protocols (``20``), or counts per protocol
    (``e1=2 e2=20``; one not named runs the papers' 20)."""
    counts = {"e1": 20, "e2": 20}
    for value in values:
        name, _, count = value.rpartition("=")
        if name and name not in counts:
            parser.error(f"--protocol-trials: unknown protocol {name!r} in {value!r}; choose from e1, e2")
        try:
            number = int(count)
        except ValueError:
            number = 0
        if number < 1:
            parser.error(f"--protocol-trials must be a count of at least 1, or PROTOCOL=COUNT; got {value!r}")
        counts.update({name: number} if name else dict.fromkeys(counts, number))
    return counts


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small N, few rounds, numpy vs fedray only")
    parser.add_argument("--jobs", nargs="*", help="job names to run (default: all of the mode)")
    parser.add_argument("--no-flower", action="store_true", help="skip Flower")
    parser.add_argument("--flower-large-rounds", type=int, default=3,
                        help="rounds Flower runs when N > 1,000 (default 3)")
    parser.add_argument("--workdir", type=Path, help="where logs, MLflow store and reports go (default: temp)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per subprocess")
    parser.add_argument("--protocols", nargs="*", choices=("e1", "e2"),
                        help="whole tuning protocols against their numpy limit (default: both, unless "
                             "--quick or --jobs is given)")
    parser.add_argument("--protocol-trials", nargs="+", default=["20"], metavar="N | PROTOCOL=N",
                        help="trials of each protocol, or per protocol (e1=2 e2=20; default 20, the papers' count)")
    parser.add_argument("--tables-from", type=Path, metavar="JSON",
                        help="print the tables of an earlier invocation's --json file and run nothing")
    parser.add_argument("--page", type=Path, metavar="MARKDOWN",
                        help="also write the header and tables into this page, between its benchmark markers "
                             "(docs/performance.md)")
    parser.add_argument("--protocol-timeout", type=float, default=4 * 3600.0, help="seconds per sweep")
    parser.add_argument("--sweep-scaling", action="store_true",
                        help="also run sweep_scaling.py's table: one sweep one job after another and on 1, 2, ... "
                             "warm job workers (with --quick: its 8-job size)")
    parser.add_argument("--scaling-trials", type=int,
                        help="trials of the scaling sweep (default: E2's protocol trials when it runs, else 2)")
    parser.add_argument("--address", help="the Ray cluster the scaling sweeps join (runtime.address)")
    args = parser.parse_args(argv)
    protocols = args.protocols if args.protocols is not None else ([] if args.quick or args.jobs else ["e1", "e2"])
    trials = protocol_trials(parser, args.protocol_trials)
    if args.tables_from is not None:
        sys.path.insert(0, str(HERE))
        saved = json.loads(args.tables_from.read_text())
        text = tables(saved["results"], saved["protocols"], saved.get("scaling"))
        print(saved["header"] + "\n\n" + text)
        if args.page is not None:
            write_page(args.page, saved["header"], text)
        return saved["results"]

    sys.path.insert(0, str(HERE))
    if "FEDRAY_DATA_DIR" not in os.environ and SHARED_DATASETS.is_dir():
        os.environ["FEDRAY_DATA_DIR"] = str(SHARED_DATASETS)   # offline copies, as tests/conftest.py
    jobs = all_jobs(args.quick)
    if args.jobs is not None and not args.jobs and (args.protocols or args.sweep_scaling):
        jobs = []                                      # --jobs with no names: the protocols (or scaling) alone
    elif args.jobs:
        unknown = set(args.jobs) - {j["name"] for j in jobs}
        if unknown:
            parser.error(f"unknown jobs {sorted(unknown)}; choose from {[j['name'] for j in jobs]}")
        jobs = [j for j in jobs if j["name"] in args.jobs]
    for job in jobs:
        check_job(job)
    if args.page is not None:           # refused now, not after an hour of measuring
        try:
            marked_page(args.page)
        except SystemExit as err:
            parser.error(str(err))
    work = args.workdir or Path(tempfile.mkdtemp(prefix="fedray-benchmark-"))
    work.mkdir(parents=True, exist_ok=True)

    # An existing MLflow store, as on every run but a user's first (creating one costs seconds).
    from mlflow.tracking import MlflowClient

    started = time.perf_counter()
    MlflowClient(tracking_uri=f"sqlite:///{work / 'mlflow.db'}").search_experiments()
    mlflow_create = time.perf_counter() - started

    flower, flower_version = None, None
    if jobs and not args.quick and not args.no_flower:
        flower, flower_version = flower_python()
        if flower is None:
            print(f"Flower skipped: {flower_version}", flush=True)
    import fedray

    source = Path(fedray.__file__).resolve().parent
    commit = subprocess.run(["git", "-C", str(source), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    header = machine() + f"; fedray from {source}"
    if commit.returncode == 0:
        header += f" at commit {commit.stdout.strip()}" + (" with local changes" if dirty.stdout.strip() else "")
    header += time.strftime("; started %H:%M UTC", time.gmtime())
    if flower is not None:
        header += f"; flwr {flower_version}"
    print(header, flush=True)
    print(f"work dir {work}; a fresh mlflow.db took {mlflow_create:.1f} s to create (not in the timings)",
          flush=True)

    results = []
    for job in jobs:
        if job["data"].get("cache"):
            # Build the federation once, untimed: it lands in the dataset cache (fedray.data.cache),
            # which every runner then reads. Otherwise the first runner, fedray, would pay the PCA
            # build (about 5 s) that the numpy runner after it skips; the cache, keyed by the raw
            # files' content, misses on a machine (or cache folder) that never built this federation.
            from numpy_loop import load_federation

            load_federation(job)
        runners: dict[str, dict] = {}
        for label, overrides in job["fedray_variants"].items():
            print(f"[{job['name']}] {label} ...", flush=True)
            runners[label] = run_fedray(job, label, overrides, work, args.timeout)
        started_actors = next((rep["num_actors"] for rep in runners.values() if rep.get("num_actors")), None)
        if started_actors:
            print(f"[{job['name']}] Ray floor, {started_actors} actors ...", flush=True)
            runners["Ray floor"] = run_ray_floor(job, started_actors, work, args.timeout)
        print(f"[{job['name']}] numpy ...", flush=True)
        runners["numpy"] = run_numpy(job, work, args.timeout)
        if job.get("flower", True) and not args.quick and not args.no_flower:
            name = f"Flower {flower_version}" if flower else "Flower"
            if flower is None:
                runners[name] = {"skipped": "Flower not installed"}
            else:
                rounds = job["num_rounds"] if job["num_silos"] <= 1000 else args.flower_large_rounds
                print(f"[{job['name']}] Flower, {rounds} rounds ...", flush=True)
                runners[name] = run_flower(job, flower, work, rounds, args.timeout)
        spread = seed_spread(job) if job["num_silos"] <= 1000 else None
        results.append({"job": job, "runners": runners,
                        "seed_mean": spread and spread[0], "seed_std": spread and spread[1]})
        for name, rep in runners.items():
            if "error" in rep:
                print(f"  {name}: {rep['error']}", flush=True)
            elif "steady" in rep:
                print(f"  {name}: {rep['steady']:.4g} s/round, first round {rep['first_round']:.1f} s, "
                      f"peak {rep['peak_rss'] / GIB:.2f} GiB, loss {rep.get('final_train_loss')}, "
                      f"other load {rep['background_cores']:.2f} cores", flush=True)

    from tuning_protocol import run_protocol

    protocol_results = [run_protocol(name, trials[name], work, child_env({}), args.protocol_timeout)
                        for name in protocols]
    scaling = None
    if args.sweep_scaling:
        from sweep_scaling import run_scaling

        scaling_trials = args.scaling_trials or (trials["e2"] if "e2" in protocols and not args.quick else None)
        # The scaling sweep one after another and its numpy limit are E2's protocol's own runs when
        # both are the same multirun (same trials, this machine): reused, not run a second time.
        e2 = next((res for res in protocol_results if res["protocol"] == "e2"), None)
        same = (e2 is not None and not args.quick and not args.address and scaling_trials == e2["trials"]
                and not any("error" in part for part in e2["fedray"] + [e2["numpy"]]))
        scaling = run_scaling(args.quick, scaling_trials, work, child_env({}), args.protocol_timeout, args.address,
                              measured=e2 if same else None)
    text = tables(results, protocol_results, scaling)
    header += time.strftime(", ended %H:%M UTC", time.gmtime())
    print()
    print(header)
    print()
    print(text)
    (work / "table.md").write_text(header + "\n\n" + text + "\n")
    if args.json:
        args.json.write_text(json.dumps({"header": header, "results": results, "protocols": protocol_results, "scaling": scaling},
                                        default=str, indent=1))
    if args.page is not None:
        write_page(args.page, header, text)
    return results


if __name__ == "__main__":
    main()
