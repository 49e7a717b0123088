"""Hydra entry point: `python -m fedray experiment=isrl_dp_convex [key=value ...]`."""

import hydra
from omegaconf import DictConfig

from fedray.cli import run_job
from fedray.resolvers import register

register()  # before Hydra composes the config


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_job(cfg)


if __name__ == "__main__":
    main()
