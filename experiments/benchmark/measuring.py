"""Measuring a subprocess: its wall time, the peak memory of its process tree and the CPU load of
everything else on the machine meanwhile (Linux, from /proc). Shared by the benchmark's runners
(``run.py``) and its tuning protocols (``tuning_protocol.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np

GIB = 1024.0 ** 3
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, CPU ticks used)} for every process, from /proc (Linux)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            table[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return table


def _tree(root: int, table: dict) -> list[int]:
    """``root`` and all its descendants."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


class TreeMemory(threading.Thread):
    """Samples, every ``interval`` s, the summed RSS of a process and all its descendants (keeping
    the peak) and the CPU time used meanwhile by processes outside that tree and this one (other
    work on the machine, which would slow the measured job down)."""

    def __init__(self, pid: int, interval: float = 0.2):
        super().__init__(daemon=True)
        self.root = pid
        self.interval = interval
        self.peak = 0
        self.peak_processes = 0
        self.background_ticks = 0
        self.tree_cpu: list[tuple[float, int]] = []   # (time, CPU ticks used by the tree so far)
        self._seen: dict[int, int] = {}
        self._tree_ticks: dict[int, int] = {}          # last seen, so exited processes still count
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            table = _processes()
            procs = _tree(self.root, table)
            total = sum(_rss(pid) for pid in procs)
            for pid in procs:
                if pid in table:
                    self._tree_ticks[pid] = table[pid][1]
            self.tree_cpu.append((time.time(), sum(self._tree_ticks.values())))
            if total > self.peak:
                self.peak, self.peak_processes = total, len(procs)
            ours = set(procs) | {os.getpid()}
            for pid, (_, ticks) in table.items():
                if pid not in ours:
                    if pid in self._seen:
                        self.background_ticks += max(0, ticks - self._seen[pid])
                    self._seen[pid] = ticks
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def fedray_tree() -> Path:
    """The source tree of the fedray this interpreter imports (the repo, or a copy on PYTHONPATH).

    Subprocesses start there: Ray workers put their working directory first on ``sys.path``, so
    started anywhere else the silo actors could import a different fedray than the driver."""
    import fedray

    return Path(fedray.__file__).resolve().parents[1]


def _launch(cmd: list[str], log_path: Path, env: dict, timeout: float) -> tuple:
    """Run ``cmd`` in its own session from fedray's tree, sampling its process tree; returns
    (exit code or "timeout", launch time, exit time, the sampler)."""
    with open(log_path, "w") as log:
        launched = time.time()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(fedray_tree()),
                                start_new_session=True)
        sampler = TreeMemory(proc.pid)
        sampler.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)   # the job's own session: its Ray processes too
            proc.wait()
            code = "timeout"
        finished = time.time()
        sampler.stop()
    return code, launched, finished, sampler


def _failure(code, log_path: Path, sampler) -> dict:
    tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
    return {"error": f"exit {code}; last lines of {log_path}:\n    " + "\n    ".join(tail), "peak_rss": sampler.peak}


def timed(cmd: list[str], log_path: Path, env: dict, timeout: float) -> dict:
    """Wall time of ``cmd`` from launch to exit, its tree's peak memory and the load beside it."""
    code, launched, finished, sampler = _launch(cmd, log_path, env, timeout)
    if code != 0:
        return _failure(code, log_path, sampler)
    seconds = finished - launched
    return {"seconds": seconds, "peak_rss": sampler.peak,
            "background_cores": sampler.background_ticks / TICK / max(seconds, 1e-9)}


def measure(cmd: list[str], out_path: Path, log_path: Path, env: dict, timeout: float) -> dict:
    """Run ``cmd`` (which writes ``out_path``), sampling memory; returns its report plus timings."""
    code, launched, finished, sampler = _launch(cmd, log_path, env, timeout)
    if code != 0 or not out_path.exists():
        return _failure(code, log_path, sampler)
    report = json.loads(out_path.read_text())
    ends = np.asarray(report["round_ends"])
    gaps = np.diff(ends)
    cpu_per_round = float("nan")
    if gaps.size >= 2 and ends[-1] - ends[0] >= 2.0 and len(sampler.tree_cpu) >= 2:
        times, ticks = np.asarray(sampler.tree_cpu, dtype=float).T
        if times[0] <= ends[0] and ends[-1] <= times[-1]:
            used = np.interp(ends[-1], times, ticks) - np.interp(ends[0], times, ticks)
            cpu_per_round = float(used / TICK / gaps.size)
    report.update(
        steady=float((ends[-1] - ends[0]) / gaps.size) if gaps.size else float("nan"),
        cpu_per_round=cpu_per_round,
        first_round=float(ends[0] - launched) if ends.size else float("nan"),
        total=finished - launched,
        background_cores=sampler.background_ticks / TICK / max(finished - launched, 1e-9),
        peak_rss=sampler.peak,
        peak_processes=sampler.peak_processes,
        rounds=int(ends.size),
    )
    return report
