"""The docs' cluster recipe (docs/guide/sweeps.md, "Sweeps on a cluster, step by step") run as written.

The test takes the recipe's bash block from docs/guide/sweeps.md and runs it unchanged with bash: a real
`ray start --head` and a worker `ray start --address` (each with its own --temp-dir), a real
`mlflow server` on a SQLite store, and the documented sweep through the ray_jobs launcher. Only
the ports (free ones) and the head's address (this machine's) are given, through the variables
the recipe reads. Afterwards the store must hold the sweep's parent with one FINISHED child per
job, and every process the recipe started must be gone: the recipe ends them by their pids;
whatever survives is killed here, by pid, and fails the test.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def recipe_block() -> str:
    """The first bash block of the docs' "Sweeps on a cluster, step by step" section."""
    text = (REPO / "docs" / "guide" / "sweeps.md").read_text()
    section = text[text.index("## Sweeps on a cluster, step by step"):]
    section = section[:section.index("\n## ", 1)]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def free_port(pair: bool = False) -> int:
    """A port nothing listens on (and, with ``pair``, the one after it too)."""
    while True:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if not pair or port >= 65535:
            if not pair:
                return port
            continue
        with socket.socket() as s:
            try:
                s.bind(("", port + 1))
            except OSError:
                continue
        return port


def host_address() -> str:
    """This machine's first address, as the recipe's `hostname -I` gives it."""
    return subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True).stdout.split()[0]


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


def test_recipe_has_no_bare_ray_stop():
    commands = [line.split("#")[0].strip() for line in recipe_block().splitlines()]
    assert not any(re.search(r"\bray stop\b", command) for command in commands)
    assert any("--allowed-hosts" in command for command in commands)


@pytest.mark.slow
@pytest.mark.long
def test_cluster_recipe_runs_as_written(tmp_path):
    from mlflow.tracking import MlflowClient

    head = host_address()
    ray_port, mlflow_port = free_port(pair=True), free_port()
    short_tmp = Path(tempfile.mkdtemp(prefix="fr", dir="/tmp"))   # Ray's socket paths must stay short
    env = dict(os.environ, HEAD=head, RAY_PORT=str(ray_port), MLFLOW_PORT=str(mlflow_port), TMPDIR=str(short_tmp),
               RAY_AUTH_TOKEN=secrets.token_hex(32),          # this test's cluster token, not ~/.ray's
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("RAY_ADDRESS", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    # The block as written, under `set -e`; the trap only reports the pids the recipe kills.
    script = "set -e\ntrap 'echo \"recipe pids: $HEAD_PID $WORKER_PID $MLFLOW_PID\"' EXIT\n" + recipe_block()
    started = time.monotonic()
    shell = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen: set[int] = set()
    watching = threading.Event()

    def watch():
        while not watching.is_set():
            seen.update(descendants(shell.pid))
            time.sleep(0.2)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        output, _ = shell.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        output = ""
    finally:
        watching.set()
        watcher.join()
        if shell.poll() is None:
            os.kill(shell.pid, signal.SIGKILL)
            shell.wait()
    elapsed = time.monotonic() - started
    # Every process the recipe started ends: give the killed nodes time to stop their own children.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(alive(pid) for pid in seen):
        time.sleep(0.5)
    survivors = sorted(pid for pid in seen if alive(pid))
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(short_tmp, ignore_errors=True)
    print(f"recipe took {elapsed:.1f} s; {len(seen)} processes started\n{output[-3000:]}")
    assert shell.returncode == 0, output[-5000:]
    assert not survivors, f"processes the recipe left running: {survivors}"

    client = MlflowClient(f"sqlite:///{tmp_path / 'server.db'}")
    experiment = client.get_experiment_by_name("fedray")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("sweep") == "parent"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(children) == 2
    assert all(r.info.status == "FINISHED" for r in children)
    assert sorted(float(r.data.params["privacy.epsilon"]) for r in children) == [1.0, 3.0]
    assert all(int(r.data.tags["ray.actor_nodes"]) >= 1 for r in children)
