"""Infrastructure errors end a run fast, in one line naming the cause, with real processes: a
tracking server that refuses (a closed local port), a Ray address where something else listens,
and Ctrl-C (SIGINT to the command's process group, as a terminal sends it) at start-up and
mid-run, which must mark the MLflow run KILLED and leave no process behind."""

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import shared_ray_address

pytestmark = pytest.mark.slow

MAIN_JOB = [sys.executable, "-m", "fedray", "experiment=isrl_dp_convex", "progress=false"]


def _closed_port() -> int:
    with socket.socket() as probe:                  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("sweep", [False, True])
def test_a_refusing_tracking_server_is_one_line_before_ray_starts(tmp_path, sweep):
    uri = f"http://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    proc = subprocess.run([*MAIN_JOB[:3], *(["-m", "privacy.epsilon=1,3"] if sweep else []), *MAIN_JOB[3:], f"tracking.uri={uri}",
                           f"hydra.sweep.dir={tmp_path}/multirun"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300, env={**os.environ, "RAY_ADDRESS": ""})
    took = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = _lines(proc.stdout)
    assert line.startswith(f"error: tracking.uri must be an MLflow tracking server that answers; none answered at "
                           f"{uri}/health within 5 s (ConnectionRefusedError")
    assert "Started a local Ray instance" not in proc.stderr and "Traceback" not in proc.stderr
    assert took < 120        # MLflow's own retries took 260 s; here imports and composing are what is left


def test_an_address_where_something_else_listens_fails_within_the_connect_timeout(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)                                # accepts connections, speaks no gRPC
    accepted = []
    threading.Thread(target=lambda: [accepted.append(server.accept()) for _ in range(8)], daemon=True).start()
    address = f"127.0.0.1:{server.getsockname()[1]}"
    try:
        proc = subprocess.run([*MAIN_JOB, f"runtime.address={address}", "runtime.connect_timeout=3",
                               f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=300)
    finally:
        server.close()
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert [line for line in _lines(proc.stdout) if line.startswith("error:")] == [
        f"error: runtime.address={address}: something listens there, but no Ray cluster answered within 3 s "
        "(it does not speak Ray's gRPC protocol)"]
    assert "gcs_client" not in proc.stderr and "Failed to connect to GCS" not in proc.stderr


def _session_processes(session: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == session:
            found.append(int(stat.parent.name))
    return found


def _statuses(db: Path) -> list[str]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as connection:
        try:
            return [row[0] for row in connection.execute("select status from runs")]
        except sqlite3.OperationalError:            # the schema is not written yet
            return []


def _metrics_logged(db: Path) -> bool:
    try:
        with sqlite3.connect(db) as connection:
            return connection.execute("select count(*) from metrics where key = 'train_loss'").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def _commands(session: int) -> list[str]:
    """The command lines of the session's processes (Ray names its workers ``ray::...``)."""
    found = []
    for pid in _session_processes(session):
        try:
            found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


def _mapped(pid: int, name: str) -> bool:
    try:
        return name in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


# Where a Ctrl-C lands, each recognised by polling the process's state (never by a fixed sleep, so
# that the moment is the same on an idle or a loaded machine): the interpreter importing fedray
# (numpy's extension mapped), Ray's GCS server started, a silo actor's process named (its
# ``__init__`` loading the records), rounds running (a training loss logged). Before the fix, a
# Ctrl-C during Ray's start-up could leave logging's lock held and the command waited forever for
# its MLflow run to open; one during the imports printed a traceback and exited -2.
MOMENTS = {
    "importing": lambda proc, db: _mapped(proc.pid, "numpy"),
    "ray-start": lambda proc, db: any("gcs_server" in c for c in _commands(proc.pid)),
    "actor-creation": lambda proc, db: any("ray::SiloGroup" in c for c in _commands(proc.pid)),
    "mid-run": lambda proc, db: _metrics_logged(db),
}


def _gone_within(session: int, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _session_processes(session)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("when", list(MOMENTS))
def test_ctrl_c_ends_in_one_line_marks_the_run_killed_and_leaves_no_process(tmp_path, when):
    db = tmp_path / "mlflow.db"
    proc = subprocess.Popen([*MAIN_JOB, "num_rounds=2000", "tracking.log_every=1", f"tracking.uri=sqlite:///{db}",
                             f"tracking.artifact_location={tmp_path}/artifacts"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            start_new_session=True, env={**os.environ, "RAY_ADDRESS": ""})
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not MOMENTS[when](proc, db):
            time.sleep(0.02)
        assert proc.poll() is None and time.monotonic() < deadline, f"never reached {when}"
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert _lines(out) == ["stopped: interrupted (Ctrl-C); the run, if one had opened, is marked KILLED in MLflow"]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert _gone_within(proc.pid, 5.0) == []          # Ray's GCS, raylet, workers: ended by their ids
    statuses = _statuses(db)
    assert statuses == ["KILLED"] if when == "mid-run" else set(statuses) <= {"KILLED"}


def test_ctrl_c_after_the_run_finished_ends_it_cleanly_and_a_run_starts_its_own_ray_beside_a_cluster(
        tmp_path, ray_local, monkeypatch):
    """Catches a Ctrl-C that lands while a finished run shuts Ray down: before, the process died of
    a segmentation fault (exit -11) at interpreter exit and left two Ray helpers alive. The same
    run (one Ray start for both) has a Ray on this machine (the test run's shared one) advertised
    in RAY_ADDRESS, as `ray start` leaves it, which a bare ray.init() would join: without
    runtime.address it must start a private local Ray instead (and end it, by the check below)."""
    db = tmp_path / "mlflow.db"
    address = shared_ray_address(ray_local, monkeypatch)   # and RAY_AUTH_MODE=token: a join would succeed
    proc = subprocess.Popen([*MAIN_JOB, "num_rounds=3", f"tracking.uri=sqlite:///{db}",
                             f"tracking.artifact_location={tmp_path}/artifacts", "runtime.num_cpus=1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            start_new_session=True, env={**os.environ, "RAY_ADDRESS": address})
    try:
        for line in proc.stdout:            # the run's last line: everything is recorded
            if line.startswith("MLflow run"):
                os.killpg(proc.pid, signal.SIGINT)
                break
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err
    assert "Started a local Ray instance" in err and "Connecting to existing Ray cluster" not in err
    assert _gone_within(proc.pid, 5.0) == []
    assert _statuses(db) == ["FINISHED"]
