"""One benchmark job through fedray's normal path: Hydra compose -> plan -> Ray -> MLflow -> summary.

Run by ``run.py`` as a subprocess (so its memory and start-up are measured on their own)::

    python experiments/benchmark/fedray_job.py SPEC.json OUT.json

SPEC.json holds ``fedray_overrides`` (Hydra overrides, as on the command line). The job goes
through ``fedray.cli.run_job`` itself, with tracking and the progress bar on; the only thing
added is a wrapper around the progress callback that timestamps the end of every round.
OUT.json gets the round end times (epoch seconds), the per-round training loss and the final
metrics; the parent measures "time to first round" from just before it started this process,
so it covers interpreter start, imports, Ray start, data loading and round 0.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def compose(overrides: list[str]):
    """The config `python -m fedray OVERRIDES` would build (as tests/conftest.py does), from the
    fedray/conf tree of the fedray package that is imported."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from fedray.resolvers import register

    register()

    import fedray

    conf = Path(fedray.__file__).resolve().parent / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    import numpy as np

    import fedray.cli as cli
    import fedray.runtime.driver as driver

    round_ends: list[float] = []
    real_run = cli.run

    def timed_run(plan, *args, **kwargs):
        progress = kwargs.pop("progress", None)

        def on_round(r, metrics):
            if progress is not None:
                progress(r, metrics)
            round_ends.append(time.time())

        return real_run(plan, *args, progress=on_round, **kwargs)

    cli.run = timed_run
    actors: list[int] = []

    class CountingGroups(driver.RayGroups):
        def __init__(self, plan, num_actors, *args, **kwargs):
            actors.append(int(num_actors))
            super().__init__(plan, num_actors, *args, **kwargs)

    driver.RayGroups = CountingGroups
    cfg = compose(spec["fedray_overrides"])
    result = cli.run_job(cfg)
    out = {
        "round_ends": round_ends,
        "train_loss": [float(np.mean(h["train_loss"])) for h in result.history],
        "final_train_loss": float(result.final["train_loss"][0]),
        "final_test_error": float(result.final["test_error"][0]),
        "noise_std": float(result.constants["final_noise_std_max"]),   # every silo adds the same here
        "l2_clip": float(result.constants["l2_clip"]),
        "epsilon_spent_max": None if result.epsilon_spent is None else float(result.epsilon_spent.max()),
        "driver_time_to_first_round": float(result.time_to_first_round),
        "driver_wall_time": float(result.wall_time),
        "num_actors": actors[0] if actors else None,
    }
    Path(out_path).write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
