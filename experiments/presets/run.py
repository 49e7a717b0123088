"""Every experiment preset run once as a newcomer would: ``python -m fedray experiment=<name>``.

Each preset runs from the command line (its own local Ray and a throw-away SQLite MLflow store),
timed from the command's start to its exit; the run's ``summary.json`` artifact gives the final
metrics (the median over replicas where a preset carries several, with the best replica's value
beside it: a grid's replicas include settings that diverge) and the largest epsilon spent. Writes
``results.csv`` next to this file, which the docs' papers pages quote as each preset's expected
output and time, and prints it.

    python experiments/presets/run.py                      # every preset (about 25 min on 2 cores)
    python experiments/presets/run.py smd_bilinear x2_sphere  # some; their rows replace the stored ones
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PRESETS = HERE.parents[1] / "fedray" / "conf" / "experiment"
FIELDS = ("preset", "seconds", "epsilon_spent", "metrics", "exit")
# The metrics a row shows, in this order, where a run has them (released values first).
SHOWN = ("final_train_loss", "final_test_error", "final_excess_risk", "final_gap", "final_mse")


def _shown(name: str, values: np.ndarray) -> str:
    """The median over replicas, and the best (smallest) replica's value where they differ."""
    median, best = float(np.median(values)), float(np.min(values))
    return f"{name} {median:.4g}" + (f" (best {best:.4g})" if values.size > 1 and best < 0.999 * median else "")


def run_preset(name: str, store: Path) -> dict:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{store / (name + '.db')}"
    command = [sys.executable, "-m", "fedray", f"experiment={name}", "progress=false", f"tracking.uri={uri}"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=store, capture_output=True, text=True, env={**os.environ})
    seconds = time.perf_counter() - start
    row = {"preset": name, "seconds": round(seconds, 1), "exit": done.returncode, "epsilon_spent": "", "metrics": ""}
    if done.returncode != 0:
        row["metrics"] = (done.stderr.strip().splitlines() or ["(no output)"])[-1][:200]
        return row
    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=1,
                              order_by=["attributes.start_time DESC"])
    summary = json.loads(Path(client.download_artifacts(runs[0].info.run_id, "summary.json", str(store))).read_text())
    shown = [_shown(key[6:], np.asarray(summary[key], dtype=float)) for key in SHOWN if key in summary]
    row["metrics"] = ", ".join(shown)
    if "epsilon_spent_max" in summary:
        row["epsilon_spent"] = f"{np.max(summary['epsilon_spent_max']):.4g}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("presets", nargs="*", help="preset names (default: every one)")
    args = parser.parse_args()
    names = args.presets or sorted(p.stem for p in PRESETS.glob("*.yaml"))
    stored = HERE / "results.csv"
    rows = {}
    if args.presets and stored.exists():
        with open(stored) as f:
            rows = {r["preset"]: r for r in csv.DictReader(f)}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            rows[name] = run_preset(name, Path(tmp))
            print(" | ".join(str(rows[name][k]) for k in FIELDS), flush=True)
    with open(stored, "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows[k] for k in sorted(rows))


if __name__ == "__main__":
    main()
