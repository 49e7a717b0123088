"""A newcomer's first hour, walked in one invocation: install from the wheel in a fresh virtual
environment, the bare command, misspelt keys and options, bad tracking URIs and Ray addresses,
Ctrl-C at start-up and mid-run, a sweep with a refused job, one preset per paper and (with
``--cluster``) the documented cluster recipe. Each step prints its command, exit status, the lines
it printed, its wall time and whether it behaved as a user should expect; the table at the end is
what the closing note of the newcomer issue quotes.

    python experiments/newcomer_walk/run.py               # about 10 minutes on 2 cores
    python experiments/newcomer_walk/run.py --quick       # without the presets (about 4 minutes)
    python experiments/newcomer_walk/run.py --cluster     # also the cluster recipe (5 more)
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def alive(group: int) -> list[int]:
    """Processes still in process group ``group`` (what a Ctrl-C must not leave behind)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] != "Z":
                found.append(int(entry.name))
    return found


class Walk:
    def __init__(self, python: str, cwd: Path):
        self.python, self.cwd, self.rows = python, cwd, []

    def step(self, name: str, args: list[str], expect, interrupt_after: float | None = None, timeout=900):
        """Run ``python -m fedray *args`` (or a SIGINT after ``interrupt_after`` s) and record it."""
        command = [self.python, "-m", "fedray", *args]
        started = time.monotonic()
        proc = subprocess.Popen(command, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        if interrupt_after is not None:
            time.sleep(interrupt_after)
            os.killpg(proc.pid, signal.SIGINT)          # what a terminal's Ctrl-C sends
        out, err = proc.communicate(timeout=timeout)
        took = time.monotonic() - started
        time.sleep(2)
        left = alive(proc.pid)
        ok = expect(proc.returncode, lines(out), err) and not left
        self.rows.append((name, " ".join(args), proc.returncode, len(lines(out)) + len(lines(err)), took,
                          "yes" if ok else "NO", (lines(out) or [""])[-1][:90]))
        print(f"{name}: exit {proc.returncode}, {took:.1f} s, {'ok' if ok else 'NOT OK'}"
              + (f", processes left: {left}" if left else ""), flush=True)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        return proc.returncode, out, err

    def table(self) -> str:
        rows = ["| step | arguments | exit | lines | seconds | as expected | last line |", "|---|---|---:|---:|---:|---|---|"]
        rows += [f"| {n} | `{a}` | {c} | {k} | {t:.1f} | {ok} | {last.replace('|', '/')} |"
                 for n, a, c, k, t, ok, last in self.rows]
        return "\n".join(rows)


def one_error_line(code: int, out: list[str], err: str, status: int = 2) -> bool:
    return code == status and len(out) == 1 and out[0].startswith("error:") and "Traceback" not in err


def wheel_python(folder: Path) -> str:
    """A fresh virtual environment with fedray installed from a wheel built from this checkout (its
    dependencies from this environment, so only the package's own files can serve it)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(folder / "dist"), str(REPO)],
                   check=True, cwd=folder)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(folder / "venv")], check=True)
    python = str(folder / "venv" / "bin" / "python")
    wheel = next((folder / "dist").glob("fedray-*.whl"))
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)], check=True)
    where = subprocess.run([python, "-c", "import fedray; print(fedray.__file__)"], capture_output=True, text=True,
                           check=True, cwd=folder, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert where.stdout.startswith(str(folder / "venv")), where.stdout
    return python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the one-preset-per-paper runs")
    parser.add_argument("--cluster", action="store_true", help="also run the documented cluster recipe")
    options = parser.parse_args()
    os.environ.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory(prefix="fedray-walk-") as tmp:
        folder = Path(tmp)
        started = time.monotonic()
        python = wheel_python(folder)
        print(f"wheel built and installed in a fresh venv: {time.monotonic() - started:.1f} s", flush=True)
        run = folder / "run"
        run.mkdir()
        walk = Walk(python, run)
        store = [f"tracking.uri=sqlite:///{run}/mlflow.db", "progress=false"]
        finished = lambda code, out, err: code == 0 and any("eps spent" in line for line in out)    # noqa: E731
        walk.step("bare command, from the wheel", store, finished)
        for bad in ("privacy.epsilonn=3", "algorithm.stepsize=0.3", "experiment=isrl_dp_convx", "+algorithm.stepsize=0.3"):
            walk.step("misspelt key or option", [bad, *store],
                      lambda code, out, err: one_error_line(code, out, err) and "did you mean" in out[0])
        walk.step("algorithm switched in a preset", ["experiment=isrl_dp_convex", "algorithm=isrl_dp_local_sgd", *store],
                  lambda code, out, err: one_error_line(code, out, err))
        walk.step("tracking server refusing", ["experiment=isrl_dp_convex", "progress=false",
                                               f"tracking.uri=http://127.0.0.1:{closed_port()}"],
                  lambda code, out, err: one_error_line(code, out, err))
        walk.step("Ray address refusing", ["experiment=isrl_dp_convex", f"runtime.address=127.0.0.1:{closed_port()}",
                                           "runtime.connect_timeout=5", *store],
                  lambda code, out, err: code == 1 and sum(line.startswith("error:") for line in out) == 1)
        interrupted = lambda code, out, err: code == 130 and "Traceback" not in err      # noqa: E731
        walk.step("Ctrl-C at start-up", ["experiment=isrl_dp_convex", *store], interrupted, interrupt_after=4)
        walk.step("Ctrl-C mid-run", ["experiment=isrl_dp_convex", "num_rounds=3000", *store], interrupted,
                  interrupt_after=30)
        walk.step("sweep with a refused job", ["-m", "experiment=isrl_dp_convex", "num_rounds=3",
                                               "participation.silos_per_round=12,30", *store,
                                               f"hydra.sweep.dir={run}/multirun"],
                  lambda code, out, err: code == 1 and any("failed or were refused" in line for line in out))
        if not options.quick:
            for preset in ("isrl_dp_convex", "p_sgd_synthetic", "smd_bilinear", "user_level_sphere",
                           "sc_output_pert_means"):
                walk.step("one preset per paper", [f"experiment={preset}", *store], finished)
        if options.cluster:
            started = time.monotonic()
            code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "--all",
                                   str(REPO / "tests" / "test_cluster_recipe.py")], cwd=REPO).returncode
            walk.rows.append(("cluster recipe, as documented", "tests/test_cluster_recipe.py", code, 0,
                              time.monotonic() - started, "yes" if code == 0 else "NO", ""))
        print()
        print(walk.table())
        if any(row[5] != "yes" for row in walk.rows):
            sys.exit(1)


if __name__ == "__main__":
    main()
