"""``hydra/launcher=fedray`` (the default): Hydra's basic launcher, composing the next job's config
while this one runs.

The basic launcher runs a sweep's jobs one after another in this process and composes each job's
config just before it starts: about 0.2 s of Python per job, while the job's silo actors sit idle.
Here one background thread composes job i + 1 as soon as job i starts, so the composition overlaps
job i's rounds, when this process mostly waits on its actors. Jobs still run one at a time, in
order, through Hydra's own ``run_job``; a job whose composition fails raises at its turn, as with
the basic launcher. Composition reads config files and builds a new config; it touches no state
the running job uses (the job's ``HydraConfig`` is set by ``run_job`` in this thread).

Each config file is read and parsed once per sweep (``SweepConfigFiles``), not once per job: YAML
parsing was about 40% of a composition, and a sweep of hundreds of small jobs composes hundreds of
times on the core its actors need.

(No ``from __future__ import annotations``: see ``ray_jobs.py``.)
"""

import copy
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence

from hydra._internal.config_repository import IConfigRepository
from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra.core.config_store import ConfigStore
from hydra.core.object_type import ObjectType
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from omegaconf import open_dict

log = logging.getLogger(__name__)


@dataclass
class OverlappedLauncherConf:
    _target_: str = "hydra_plugins.fedray_launcher.overlapped.OverlappedLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="fedray", node=OverlappedLauncherConf, provider="fedray")


class SweepConfigFiles(IConfigRepository):
    """A config repository that loads each config file once: Hydra's own cache
    (``CachingConfigRepository``) lasts one composition, and each composition starts from a deep
    copy of the loader's repository, which this one answers with itself so its cache lasts the
    sweep. What it returns is a copy of what it loaded, with its own ``config`` (a composition
    builds its config in that object), keyed by the search path the composition set."""

    def __init__(self, delegate: IConfigRepository):
        self.delegate, self.cache, self.search_path = delegate, {}, None

    def __deepcopy__(self, memo):
        return self

    def initialize_sources(self, config_search_path) -> None:
        self.search_path = tuple((e.provider, e.path) for e in config_search_path.get_path())
        self.delegate.initialize_sources(config_search_path)

    def load_config(self, config_path: str):
        key = (self.search_path, config_path)
        if key not in self.cache:
            self.cache[key] = self.delegate.load_config(config_path)
        found = self.cache[key]
        if found is None:
            return None
        found = copy.copy(found)
        found.config = copy.deepcopy(found.config)      # a composition builds its config in place
        return found

    def get_schema_source(self):
        return self.delegate.get_schema_source()

    def group_exists(self, config_path: str) -> bool:
        return self.delegate.group_exists(config_path)

    def config_exists(self, config_path: str) -> bool:
        return self.delegate.config_exists(config_path)

    def get_group_options(self, group_name: str, results_filter=ObjectType.CONFIG):
        return self.delegate.get_group_options(group_name, results_filter)

    def get_sources(self):
        return self.delegate.get_sources()


@contextmanager
def config_files_read_once(config_loader):
    """``config_loader`` composing from a ``SweepConfigFiles`` over a copy of its repository (the
    original is left as it was, as Hydra's per-composition copies leave it), until the block ends."""
    original = getattr(config_loader, "repository", None)
    if original is None:            # another loader: compose as it does
        yield
        return
    config_loader.repository = SweepConfigFiles(copy.deepcopy(original))
    try:
        yield
    finally:
        config_loader.repository = original


class OverlappedLauncher(BasicLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally")

        def compose(overrides):
            return self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))

        runs: List[JobReturn] = []
        with config_files_read_once(self.hydra_context.config_loader), \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="compose") as composer:
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
