"""``hydra/launcher=ray_jobs``: a sweep's jobs as Ray tasks, at most ``max_concurrent`` at a time,
on the cluster at ``address`` (by default the jobs' own ``runtime.address``; null: a private local
Ray, as a single run starts).

Each job is one task that runs the job exactly as Hydra's basic launcher would (``run_job`` with the
sweep's config), in a Ray worker of any node; its silo actors are started from there, so they
spread over the cluster like any job's. The task itself takes no CPU (``num_cpus: 0``): a job's
work is in its actors, and a waiting coordinator must not hold the CPUs its actors need.

What a job needs reaches every node through the task's ``runtime_env``: the variables fedray reads
(``FEDRAY_DATA_DIR``, ``FEDRAY_CACHE_DIR``, ``MLFLOW_*``) as set in the launching shell, plus
``env_vars`` from the config, and the launching directory, which the task enters first so that
relative paths (``sqlite:///mlflow.db``, data folders) mean the same as for the driver. The sweep's
parent run travels as a value: in the Hydra callbacks the task receives with the job (its
``fedray.sweep.ParentRun`` hands it to the task function at the job's start). That directory must exist on every node (one machine, or a shared file system);
otherwise give absolute paths and an ``mlflow server`` URI (README, "Sweeps on a cluster").

Why not an existing launcher: hydra-ray-launcher 1.2.2 pins cloudpickle < 3, which the installed
joblib (>= 1.4, through scikit-learn) refuses; hydra-joblib-launcher hard-codes joblib's loky
backend, so Ray's joblib backend cannot be used through it.

(No ``from __future__ import annotations`` here: Hydra's plugin scan executes this module outside
``sys.modules``, where dataclasses cannot resolve string annotations.)
"""

import logging
import os
import sys
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


@dataclass
class RayJobsLauncherConf:
    _target_: str = "hydra_plugins.fedray_launcher.ray_jobs.RayJobsLauncher"
    address: Optional[str] = "${runtime.address}"       # null: a private local Ray
    connect_timeout: float = "${runtime.connect_timeout}"  # type: ignore[assignment]
    max_concurrent: int = 2                              # jobs running at once
    env_vars: dict = field(default_factory=dict)         # more variables for every job


ConfigStore.instance().store(group="hydra/launcher", name="ray_jobs", node=RayJobsLauncherConf,
                             provider="fedray")


def _job(hydra_context: HydraContext, config: DictConfig, task_function: TaskFunction, singleton_state: dict,
         directory: str) -> JobReturn:
    os.chdir(directory)
    setup_globals()
    Singleton.set_state(singleton_state)
    return run_job(hydra_context=hydra_context, task_function=task_function, config=config,
                   job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")


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
        try:
            # runtime.py_modules (the user's packages) become the Ray job's: every job task and its actors get them
            py_modules = (self.config.get("runtime") or {}).get("py_modules")
            connect({"address": self.address, "connect_timeout": self.connect_timeout, "py_modules": py_modules})
        except ConnectionError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(1)
        remote = ray.remote(num_cpus=0, max_retries=0)(_job).options(runtime_env=self.runtime_env())
        # Each job runs in a task of its own and keeps no silo actors after it (fedray's Jobs.launched).
        task = self.task_function.launched() if isinstance(self.task_function, SweepMember) else self.task_function
        log.info(f"Launching {len(job_overrides)} jobs on Ray, at most {self.max_concurrent} at a time")
        pending, results = {}, {}
        for index, overrides in enumerate(job_overrides):
            idx = initial_job_idx + index
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(config):
                config.hydra.job.id = idx
                config.hydra.job.num = idx
            if len(pending) >= self.max_concurrent:
                self._collect(pending, results, ray)
            pending[remote.remote(self.hydra_context, config, task, Singleton.get_state(),
                                  os.getcwd())] = index
        while pending:
            self._collect(pending, results, ray)
        return [results[i] for i in range(len(job_overrides))]

    @staticmethod
    def _collect(pending: dict, results: dict, ray) -> None:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            results[pending.pop(ref)] = ray.get(ref)

