"""Ray's own start-up floor: what any Ray program pays before its actors answer.

Run by ``run.py`` as a subprocess, measured from outside like the fedray job::

    python experiments/benchmark/ray_floor.py SPEC.json OUT.json

SPEC.json holds ``num_actors`` (as many as the fedray job started). The process imports ray, starts
a private local Ray as fedray does (``address="local"``, no dashboard, no log forwarding), starts
that many actors of an empty class and calls each once; OUT.json gets the time the last call
returned as its one "round end". Command to first round over this is fedray's start-up overhead.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    import ray

    @ray.remote
    class Empty:
        def ping(self) -> int:
            return 0

    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    actors = [Empty.remote() for _ in range(int(spec["num_actors"]))]
    ray.get([a.ping.remote() for a in actors])
    Path(out_path).write_text(json.dumps({"round_ends": [time.time()], "num_actors": len(actors)}))
    ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
