"""``hydra/launcher=fedray`` (the default): Hydra's basic launcher, composing the next job's config
while this one runs.

The basic launcher runs a sweep's jobs one after another in this process and composes each job's
config just before it starts: about 0.2 s of Python per job, while the job's silo actors sit idle.
Here one background thread composes job i + 1 as soon as job i starts, so the composition overlaps
job i's rounds, when this process mostly waits on its actors; and it composes once per list of
group choices (``fedray.compose.SweepComposer``), a copy of which takes each job's values. Jobs
still run one at a time, in order, through Hydra's own ``run_job``; a job whose composition fails
raises at its turn, as with the basic launcher. Composition reads config files and builds a new config; it touches no state
the running job uses (the job's ``HydraConfig`` is set by ``run_job`` in this thread).

Only Hydra's public plugin API is used (``hydra.plugins.launcher.Launcher``, ``run_job``, the
config loader of the ``HydraContext``, the override parser).

(No ``from __future__ import annotations``: see ``ray_jobs.py``.)
"""

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from omegaconf import open_dict

log = logging.getLogger(__name__)


@dataclass
class OverlappedLauncherConf:
    _target_: str = "hydra_plugins.fedray_launcher.overlapped.OverlappedLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="fedray", node=OverlappedLauncherConf, provider="fedray")


class OverlappedLauncher(Launcher):
    def __init__(self) -> None:
        super().__init__()
        self.config = self.task_function = self.hydra_context = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally")
        from fedray.compose import SweepComposer

        compose = SweepComposer(self.hydra_context.config_loader, self.config).compose

        runs: List[JobReturn] = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="compose") as composer:
            pending = composer.submit(compose, job_overrides[0]) if job_overrides else None
            for i, overrides in enumerate(job_overrides):
                idx = initial_job_idx + i
                log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
                sweep_config = pending.result()
                if i + 1 < len(job_overrides):
                    pending = composer.submit(compose, job_overrides[i + 1])
                with open_dict(sweep_config):
                    sweep_config.hydra.job.id = idx
                    sweep_config.hydra.job.num = idx
                runs.append(run_job(hydra_context=self.hydra_context, task_function=self.task_function,
                                    config=sweep_config, job_dir_key="hydra.sweep.dir",
                                    job_subdir_key="hydra.sweep.subdir"))
                configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return runs
