"""Hydra entry point: `python -m fedray experiment=isrl_dp_convex [key=value ...]`."""

import os
import sys

import hydra
from omegaconf import DictConfig

from fedray.cli import console, run_job
from fedray.override_errors import as_config_error, one_line
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


def cli() -> None:
    """``main`` with Hydra's composition errors (a misspelt key or option, bad override syntax)
    as one ``error:`` line, a did-you-mean where a name is unknown, and exit status 2, as fedray's
    own config errors; ``HYDRA_FULL_ERROR=1`` set by the user keeps Hydra's full report."""
    if os.environ.get("HYDRA_FULL_ERROR"):
        main()
        return
    os.environ["HYDRA_FULL_ERROR"] = "1"        # Hydra raises its errors here instead of printing them
    try:
        main()
    except Exception as err:
        error = as_config_error(err, [arg for arg in sys.argv[1:] if not arg.startswith("-")])
        line = str(error) if error is not None else one_line(err)
        if line is None:
            raise
        console.print(f"[bold red]error:[/] {line}", soft_wrap=True, markup=True, highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    cli()
