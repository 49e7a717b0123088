"""Hydra entry point: `python -m fedray experiment=isrl_dp_convex [key=value ...]`."""

import os

import hydra
from omegaconf import DictConfig

from fedray.cli import run_job
from fedray.runtime.driver import ActorPool
from fedray.resolvers import register
from fedray.sweep import LAUNCHED_ENV

register()  # before Hydra composes the config
# The jobs of a sweep run in this process; consecutive jobs on the same records reuse the actors.
POOL = ActorPool()


@hydra.main(version_base="1.3", config_path="pkg://fedray.conf", config_name="config")
def main(cfg: DictConfig) -> None:
    # A job the ray_jobs launcher started keeps no actors: idle ones would hold CPUs other jobs need.
    run_job(cfg, None if os.environ.get(LAUNCHED_ENV) else POOL)


if __name__ == "__main__":
    main()
