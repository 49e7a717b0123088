"""``hydra/launcher=ray_jobs``: a sweep's jobs on long-lived Ray actors, the job workers, at most
``max_concurrent`` jobs at a time, on the cluster at ``address`` (by default the jobs' own
``runtime.address``; null: a private local Ray, as a single run starts).

One worker per concurrency slot (``max_concurrent``, fewer for a smaller batch), placed with
Ray's SPREAD strategy over the cluster's nodes. Each job goes to whichever worker is free, and
runs there exactly as Hydra's basic launcher would run it (``run_job`` with the sweep's config);
its silo actors are started from there, so they spread over the cluster like any job's. A worker
takes no CPU (``num_cpus: 0``): a job's work is in its actors, and a waiting coordinator must not
hold the CPUs its actors need. A worker lives for the whole batch and keeps, from one job to its
next, what the sequential launcher keeps in its one process: its imports, its task function (the
command line's ``fedray.cli.Jobs``, with its ``ActorPool`` of silo actors, so its next job on the
same records skips actor start-up and loading, and its ``RunWriter``, which writes every job's
run through one thread, a finished run while the next one runs, with one store client and
experiment lookup), and what a process keeps by itself (the accountant store's connection). Job configs are composed here, in the launching process, while the workers
run the jobs before them (composition reads the config search path, which may exist only on the
launching machine), once per list of group choices (``fedray.compose.SweepComposer``).

Idle kept actors hold their CPU shares: a worker with no job left ends them at once (``close``,
after its runs are written), so a job waiting for CPUs held by another worker's kept actors gets
them when that worker's next job needs other actors, or when the jobs run out. At the batch's end
every worker's runs are written before ``launch`` returns, and every worker is ended by its
handle (``ray.kill``; its silo actors end with it) and is reported dead before ``launch`` returns,
also when a job or the launcher fails and on Ctrl-C.

What a job needs reaches every node through the workers' ``runtime_env``: the variables fedray
reads (``FEDRAY_DATA_DIR``, ``FEDRAY_CACHE_DIR``, ``MLFLOW_*``) as set in the launching shell,
plus ``env_vars`` from the config; ``runtime.py_modules`` are the Ray job's. A worker enters the
launching directory first, so that relative paths (``sqlite:///mlflow.db``, data folders) mean the
same as for the driver. The sweep's parent run travels as a value: in the Hydra callbacks each
worker receives (its ``fedray.sweep.ParentRun`` hands it to the task function at each job's start).
That directory must exist on every node (one machine, or a shared file system); otherwise give
absolute paths and an ``mlflow server`` URI (README, "Sweeps on a cluster").

Why not an existing launcher: hydra-ray-launcher 1.2.2 pins cloudpickle < 3, which the installed
joblib (>= 1.4, through scikit-learn) refuses; hydra-joblib-launcher hard-codes joblib's loky
backend, so Ray's joblib backend cannot be used through it.

(No ``from __future__ import annotations`` here: Hydra's plugin scan executes this module outside
``sys.modules``, where dataclasses cannot resolve string annotations.)
"""

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from fedray.data.download import CACHE_DIR_ENV, DATA_DIR_ENV
from fedray.sweep import SweepMember

log = logging.getLogger(__name__)

FORWARDED = (DATA_DIR_ENV, CACHE_DIR_ENV)
END_TIMEOUT = 30.0      # seconds to wait for killed job workers to be reported dead


@dataclass
class RayJobsLauncherConf:
    _target_: str = "hydra_plugins.fedray_launcher.ray_jobs.RayJobsLauncher"
    address: Optional[str] = "${runtime.address}"       # null: a private local Ray
    connect_timeout: float = "${runtime.connect_timeout}"  # type: ignore[assignment]
    max_concurrent: int = 2                              # jobs running at once
    env_vars: dict = field(default_factory=dict)         # more variables for every job


ConfigStore.instance().store(group="hydra/launcher", name="ray_jobs", node=RayJobsLauncherConf,
                             provider="fedray")


class JobWorker:
    """A job worker (the launcher makes it a Ray actor): runs the jobs it is given one at a time, in
    the launching directory, with one task function for all of them, which keeps what it keeps
    between jobs (``fedray.cli.Jobs``: the silo actors and the run-writing thread)."""

    def __init__(self, hydra_context: HydraContext, task_function: TaskFunction, singleton_state: dict,
                 directory: str) -> None:
        os.chdir(directory)
        setup_globals()
        Singleton.set_state(singleton_state)
        self.hydra_context, self.task_function = hydra_context, task_function

    def run(self, config: DictConfig) -> JobReturn:
        return run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=config,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")

    def close(self) -> None:
        """Wait until this worker's finished runs are written (the first write that failed is
        raised), then end its kept silo actors and its writing thread."""
        if isinstance(self.task_function, SweepMember):
            self.task_function.close()

    def alive(self) -> bool:
        return True


def _end(workers: list, ray, timeout: float = END_TIMEOUT) -> None:
    """Kill ``workers`` (their silo actors end with them) and wait until Ray reports each one dead,
    so that none outlives ``launch`` (``ray.kill`` only asks)."""
    for worker in workers:
        ray.kill(worker)
    deadline = time.monotonic() + timeout
    while workers and time.monotonic() < deadline:
        alive = []
        for worker in workers:
            try:
                ray.get(worker.alive.remote(), timeout=max(deadline - time.monotonic(), 0.01))
                alive.append(worker)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass
        workers = alive
        if workers:
            time.sleep(0.05)


class RayJobsLauncher(Launcher):
    def __init__(self, address: Optional[str] = None, connect_timeout: float = 30.0, max_concurrent: int = 2,
                 env_vars: Optional[dict] = None) -> None:
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"hydra.launcher.max_concurrent must be an integer >= 1, got {max_concurrent!r}")
        self.address, self.connect_timeout = address, float(connect_timeout)
        self.max_concurrent, self.env_vars = max_concurrent, dict(env_vars or {})
        self.config = self.hydra_context = self.task_function = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def runtime_env(self) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if k in FORWARDED or k.startswith("MLFLOW_")}
        env.update({k: str(v) for k, v in self.env_vars.items()})
        return {"env_vars": env}

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import ray

        from fedray.runtime.driver import connect

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        if not job_overrides:
            return []
        try:
            # runtime.py_modules (the user's packages) become the Ray job's: every worker and its actors get them
            py_modules = (self.config.get("runtime") or {}).get("py_modules")
            connect({"address": self.address, "connect_timeout": self.connect_timeout, "py_modules": py_modules})
        except ConnectionError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(1)
        # Each worker gets a task function of its own, which keeps its actors from job to job (fedray's Jobs.launched).
        task = self.task_function.launched() if isinstance(self.task_function, SweepMember) else self.task_function
        count = min(self.max_concurrent, len(job_overrides))
        actor = ray.remote(num_cpus=0)(JobWorker).options(scheduling_strategy="SPREAD", runtime_env=self.runtime_env())
        log.info(f"Launching {len(job_overrides)} jobs on Ray, on {count} job workers")
        workers = []
        try:
            setup = (self.hydra_context, task, Singleton.get_state(), os.getcwd())
            workers += [actor.remote(*setup) for _ in range(count)]
            return self._dispatch(workers, job_overrides, initial_job_idx, ray)
        finally:
            _end(workers, ray)              # also on a failed job, a launcher error, Ctrl-C

    def _dispatch(self, workers: list, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                  ray) -> list[JobReturn]:
        """Each job to the first free worker (the next job's config composed while they run); every
        worker closed after its last job; the results in job order once every run is written."""
        from fedray.compose import SweepComposer

        free, pending, results = list(workers), {}, {}
        composer = SweepComposer(self.hydra_context.config_loader, self.config)

        def collect() -> None:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            index, worker = pending.pop(ref)
            results[index] = ray.get(ref)
            free.append(worker)

        for index, overrides in enumerate(job_overrides):
            idx = initial_job_idx + index
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            config = composer.compose(overrides)
            with open_dict(config):
                config.hydra.job.id = idx
                config.hydra.job.num = idx
            if not free:
                collect()
            worker = free.pop(0)
            pending[worker.run.remote(config)] = (index, worker)
        # A worker's calls run in order: each closes after its last job, releasing its kept actors
        # to the jobs still running elsewhere.
        closed = [worker.close.remote() for worker in workers]
        while pending:
            collect()
        ray.get(closed)
        return [results[i] for i in range(len(job_overrides))]
