"""Hydra entry point: `python -m fedray experiment=isrl_dp_convex [key=value ...]`."""

import os
import signal
import sys
import time
from pathlib import Path

STOPPED = "stopped: interrupted (Ctrl-C); the run, if one had opened, is marked KILLED in MLflow"


def _interrupted_while_importing(signum, frame) -> None:
    """A Ctrl-C while the imports below run: nothing has started (no run, no Ray, no thread of
    ours), so the command ends at once, with the same line as later."""
    sys.stdout.write(STOPPED + "\n")
    sys.stdout.flush()
    os._exit(130)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, _interrupted_while_importing)    # until cli() takes over

import hydra  # noqa: E402  (the handler above covers these imports: they take seconds)

from fedray.cli import Jobs, console  # noqa: E402
from fedray.override_errors import as_config_error, one_line  # noqa: E402
from fedray.resolvers import register  # noqa: E402


def main(jobs: Jobs | None = None) -> None:
    """Hydra's command line with ``jobs`` (new ones by default) as the task function: the jobs of a
    sweep run by this process share its silo actors and its run-writing thread."""
    task = jobs if jobs is not None else Jobs()
    register()          # the configs' resolvers, before Hydra composes
    hydra.main(version_base="1.3", config_path="pkg://fedray.conf", config_name="config")(task)()


def _descendants() -> list[int]:
    """The ids of this process's children and their children (Linux /proc; elsewhere none)."""
    parents = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found, frontier = [], [os.getpid()]
    while frontier:
        frontier = [child for pid in frontier for child in parents.get(pid, [])]
        found += frontier
    return found


def _end_started_processes(grace: float = 3.0) -> list[int]:
    """Stop this process's Ray session and end the processes it started that are still alive (a
    Ctrl-C during ``ray.init`` leaves its GCS server and raylet running for a minute): each one by
    its id, SIGTERM, then SIGKILL for those alive after ``grace`` seconds. Returns the ids ended."""
    if "ray" in sys.modules:
        import ray

        try:
            ray.shutdown()
        except BaseException:   # a half-started session: its processes are ended below
            pass
    started = _descendants()
    alive = started
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while (alive := [pid for pid in _descendants() if pid in started]) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not alive:
            break
    return started


def cli() -> None:
    """``main`` with Hydra's composition errors (a misspelt key or option, bad override syntax)
    as one ``error:`` line, a did-you-mean where a name is unknown, and exit status 2, as fedray's
    own config errors; ``HYDRA_FULL_ERROR=1`` set by the user keeps Hydra's full report. Ctrl-C
    ends with one line (the run is marked KILLED by ``run_job``), status 130, and no process left.
    The jobs' shared actors and writing thread are made here, when a job needs them, and ended here."""
    jobs = Jobs()
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)     # Python's own, once imports are done
        _main(jobs)
        signal.signal(signal.SIGINT, signal.SIG_IGN)     # what ran is recorded: end what was started
        jobs.close()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)     # a second Ctrl-C must not cut the clean-up short
        _end_started_processes()
        stopped, rest = STOPPED.split(":", 1)
        console.print(f"[bold red]{stopped}:[/]{rest}", soft_wrap=True, highlight=False)
        sys.exit(130)
    _end_started_processes()


def _main(jobs: Jobs) -> None:
    if os.environ.get("HYDRA_FULL_ERROR"):
        main(jobs)
        return
    os.environ["HYDRA_FULL_ERROR"] = "1"        # Hydra raises its errors here instead of printing them
    try:
        main(jobs)
    except Exception as err:
        error = as_config_error(err, [arg for arg in sys.argv[1:] if not arg.startswith("-")])
        line = str(error) if error is not None else one_line(err)
        if line is None:
            raise
        console.print(f"[bold red]error:[/] {line}", soft_wrap=True, markup=True, highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    cli()
