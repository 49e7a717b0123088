"""`python -m fedray ...`: plan (validate everything), run on Ray, track in MLflow, summarise."""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from omegaconf import DictConfig
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedray.data import ChecksumError, DownloadError
from fedray.data.federation import PreparedFiles
from fedray.errors import BudgetError, ConfigError
from fedray.plan import Plan, make_plan
from fedray.preflight import shadowed_configs, tracking_store
from fedray.runtime import checkpoint, interrupts
from fedray.runtime.driver import ActorPool, RunResult, run, start
from fedray.sweep import Sweep, job_label
from fedray.tracking import RunWriter, browse_hint, run_name, tracker_from_config

console = Console()


def _span(values) -> str:
    lo, hi = float(np.min(values)), float(np.max(values))
    return f"{lo:.3g}" if np.isclose(lo, hi) else f"{lo:.3g}-{hi:.3g}"


SHOWN_REPLICAS = 12


def headline_metrics(result: RunResult) -> list[str]:
    """The metrics of the first released output (e.g. train_loss, test_error; a game's gap), in order."""
    others = list(result.outputs)[1:]
    return [k for k in result.final if not any(k.endswith(f"_{name}") for name in others)]


def shown_replicas(plan: Plan, result: RunResult) -> tuple[np.ndarray, str]:
    """Every replica, or past ``SHOWN_REPLICAS`` the one of lowest final headline metric per budget
    (and clip, for a clip grid)."""
    if plan.num_replicas <= SHOWN_REPLICAS:
        return np.arange(plan.num_replicas), ""
    first = headline_metrics(result)[0]
    zeros = np.zeros(plan.num_replicas)
    levels = np.stack([plan.epsilon_levels if plan.epsilon_levels is not None else zeros,
                       plan.l2_clips if plan.l2_clips is not None else zeros], axis=1)
    loss = np.nan_to_num(result.final[first], nan=np.inf)
    groups = [np.flatnonzero((levels == row).all(axis=1)) for row in np.unique(levels, axis=0)]
    best = [int(group[np.argmin(loss[group])]) for group in groups]
    per = "budget and clip" if plan.l2_clips is not None else "budget"
    note = f" (lowest {first.replace('_', ' ')} of {plan.num_replicas} replicas per {per}; all in MLflow)"
    return np.array(best), note


def column_label(name: str, plan: Plan) -> str:
    """A metric's column: its name, where regression's test error is its mean squared error."""
    if plan.shape.task == "regression" and name.startswith("test_error"):
        name = "test_mse" + name[len("test_error"):]
    return name.replace("_", " ")


def halting_rounds(result: RunResult) -> np.ndarray | None:
    """(P,) the round at which each replica halted, -1 if it ran on; None if the protocol never halts."""
    if not result.history or "halted" not in result.history[-1]:
        return None
    halted = np.array([np.broadcast_to(h.get("halted", 0.0), np.shape(result.history[-1]["halted"]))
                       for h in result.history]) > 0.5                 # (rounds, P)
    return np.where(halted.any(axis=0), halted.argmax(axis=0), -1)


def outcome_notes(plan: Plan, result: RunResult) -> list[str]:
    """What the table alone does not say: replicas that halted, releases that did not happen, and why."""
    notes, p = [], plan.num_replicas
    halted = halting_rounds(result)
    if halted is not None and (halted >= 0).any():
        stopped = np.flatnonzero(halted >= 0)
        when = f" at round {_span(halted[stopped])} of at most {plan.num_rounds}" if len(result.history) > 1 else ""
        who = f"all {p} replicas" if stopped.size == p else f"{stopped.size} of {p} replicas ({_ids(stopped)})"
        notes.append(f"halted: {who}{when}: the protocol's halting test failed and a halted replica takes no more steps"
                     + ("; the run ended when every replica had halted" if stopped.size == p else ""))
    last = result.history[-1] if result.history else {}
    if "released" in last:
        failed = np.flatnonzero(np.broadcast_to(last["released"], (p,)) < 0.5)
        if failed.size:
            who = f"all {p} replicas" if failed.size == p else f"{failed.size} of {p} replicas ({_ids(failed)})"
            why = ""
            if "certificate" in last and "certificate_limit" in last:
                bound = np.broadcast_to(last["certificate"], (p,))[failed]
                limit = np.broadcast_to(last["certificate_limit"], (p,))[failed]
                why = (f": the stability check failed (deletion sensitivity bound {_span(bound)} > "
                       f"{_span(limit)}, the sensitivity the noise is calibrated for)")
            notes.append(f"no release: {who} released nothing{why}; their metrics are NaN")
    return notes


def _ids(indices: np.ndarray) -> str:
    shown = ", ".join(str(int(i)) for i in indices[:8])
    return shown + (", ..." if indices.size > 8 else "")


def final_status(plan: Plan, result: RunResult) -> str:
    """The progress bar's last words: the final value of the first headline metric and the spend."""
    first = headline_metrics(result)[0] if result.final else None
    status = ""
    if first is not None:
        label = "gap" if first == "gap" else first.split("_")[-1]
        mean = f" (mean of {plan.num_replicas})" if plan.num_replicas > 1 else ""
        status = f"final {label} {float(np.nanmean(result.final[first])):.4f}{mean}"
    if result.epsilon_spent is not None:
        status += f"  eps {float(np.max(result.epsilon_spent)):.3f}"
    halted = halting_rounds(result)
    if halted is not None and (halted >= 0).any():
        status += f"  halted {int((halted >= 0).sum())}/{plan.num_replicas}"
    return status


def summary_table(plan: Plan, result: RunResult) -> Table:
    """One row per shown replica; narrow enough for 80 columns (the algorithm, accountant and wall
    time are in the title and caption, not in every row). Columns: the first output's metrics, and
    the last of them for every other output (e.g. test error of the average)."""
    priv = plan.privacy
    rows, note = shown_replicas(plan, result)
    headline = headline_metrics(result)
    extra = [f"{headline[-1]}_{name}" for name in list(result.outputs)[1:] if f"{headline[-1]}_{name}" in result.final]
    stepped = "step_size" in plan.config["algorithm"]
    spent = f"eps spent: {priv.accountant} accountant, per unit, largest; " if priv.private else ""
    table = Table(title=f"fedray: {plan.algorithm_name} on {plan.dataset_name} ({priv.trust_model}){note}",
                  caption=f"{spent}wall time {result.wall_time:.1f} s", box=box.SIMPLE_HEAD, padding=(0, 1))
    clips = plan.l2_clips
    halted = halting_rounds(result)
    released = result.history[-1].get("released") if result.history else None
    outcome = ((("halted",) if halted is not None else ()) + (("released",) if released is not None else ()))
    for column in ("step", *(("clip",) if clips is not None else ()), "eps", "eps paper", "eps spent",
                   *(column_label(name, plan) for name in headline + extra), *outcome):
        table.add_column(column, justify="right")
    for p in rows:
        private = priv.private
        table.add_row(
            f"{plan.step_sizes[p]:.4g}" if stepped else "-",
            *((f"{clips[p]:.3g}",) if clips is not None else ()),
            _span(priv.target_epsilon[p]) if private else "-",
            _span(priv.nominal_epsilon[p]) if private and priv.nominal_epsilon is not None else "-",
            f"{float(result.epsilon_spent[p].max()):.3f}" if private else "inf",
            *(f"{result.final[name][p]:.4f}" for name in headline + extra),
            *((("-" if halted[p] < 0 else f"round {halted[p]}" if len(result.history) > 1 else "yes"),)
              if halted is not None else ()),
            *(("yes" if np.broadcast_to(released, (plan.num_replicas,))[p] > 0.5 else "no",)
              if released is not None else ()),
        )
    return table


def record_refused(cfg: DictConfig, err: Exception, sweep: Sweep) -> None:
    """A sweep's refused job as a FAILED child run of ``sweep``'s parent tagged with the reason, so
    the sweep goes on and the parent counts it."""
    from omegaconf import OmegaConf

    tracking = OmegaConf.to_container(cfg.tracking, resolve=True)
    tracker = tracker_from_config(tracking, run_name=f"{cfg.algorithm.get('name')} refused",
                                  parent_run_id=sweep.parent_run_id)
    tracker.client.set_tag(tracker.run_id, "refused", str(err)[:5000])
    tracker.client.set_tag(tracker.run_id, "overrides", job_overrides())
    tracker.fail()


def job_overrides() -> str:
    """This job's command-line overrides (what tells the jobs of a sweep apart)."""
    from hydra.core.hydra_config import HydraConfig

    return " ".join(HydraConfig.get().overrides.task)[:5000]


def _ended(err: BaseException) -> str:
    """The MLflow status of a run that ``err`` ended: KILLED for Ctrl-C, else FAILED."""
    return "KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED"


def _check_searchpath() -> None:
    """A user's config directory never silently loses to fedray's same-named file."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        shadowed_configs(list(HydraConfig.get().searchpath), Path(__file__).resolve().parent / "conf")


def run_job(cfg: DictConfig, pool: ActorPool | None = None, sweep: Sweep | None = None,
            writer: RunWriter | None = None) -> RunResult | None:
    """One job: plan, start (or reuse ``pool``'s) actors while the MLflow run opens, rounds, summary.

    In a ``sweep`` the run is a child of its parent run, and a refused job is a FAILED child (the
    sweep goes on); with a ``writer`` too (the process's, which its jobs share), the run is written
    through it and its finish handed to it (the next job, or the sweep's end, waits for it)."""
    parent_run_id = None if sweep is None else sweep.parent_run_id
    try:
        if parent_run_id is None:           # a sweep's parent run has asked the store already
            tracking_store(cfg.tracking.uri)    # an MLflow server that does not answer: before planning and Ray
        _check_searchpath()
        plan = make_plan(cfg)
        resumed = checkpoint.resumable(plan.runtime, plan.config)     # one of another config is refused here
        if isinstance(plan.dataset, PreparedFiles):    # fetch public files once, before actors start
            plan.dataset.prepare()
    except (ConfigError, BudgetError, DownloadError, ChecksumError) as err:
        console.print(f"[bold red]error:[/] {err}", soft_wrap=True)
        if sweep is None:
            sys.exit(2)
        record_refused(cfg, err, sweep)      # in a sweep: a FAILED child run; the sweep goes on
        return None

    for note in plan.protocol.resolved.get("notes", ()):      # what the resolved parameters mean at this size
        console.print(f"[bold yellow]note:[/] {note}", soft_wrap=True)

    def open_tracker():
        label = "" if sweep is None else job_label(job_overrides().split(), sweep.swept_keys)  # swept values first
        tracker = tracker_from_config(plan.tracking, run_name=run_name(plan, label),
                                      parent_run_id=parent_run_id,    # from fedray.sweep.ParentRun
                                      resumed=resumed,                # its MLflow run goes on
                                      writer=writer if sweep is not None else None)
        tracker.log_plan(plan, tags=None if sweep is None else {"overrides": job_overrides()})
        return tracker

    # From here a Ctrl-C is raised at safe points only (fedray.runtime.interrupts says why: raised
    # inside Ray's start-up it could leave the logging lock held, and the command waited forever
    # for the MLflow run below to open and be marked KILLED).
    with interrupts.deferred():
        return _started_job(plan, pool, open_tracker, sweep, writer)


def _started_job(plan: Plan, pool: ActorPool | None, open_tracker, sweep: Sweep | None,
                 writer: RunWriter | None) -> RunResult:
    # The MLflow store (schema creation on a fresh one) is set up while Ray and the silo actors start.
    with ThreadPoolExecutor(max_workers=1) as background:
        pending = background.submit(open_tracker)
        try:
            with console.status(f"starting Ray and the actors of {plan.shape.num_silos:,} units", spinner="dots"):
                groups = start(plan, pool)
            interrupts.check()                  # a Ctrl-C during Ray's start-up ends the job here
        except BaseException as err:
            if interrupts.pending():    # Ctrl-C first: what failed after it (Ray's start cut short) is moot
                err = KeyboardInterrupt()
            pending.result().fail(_ended(err))     # the run opened meanwhile: never leave it RUNNING
            if isinstance(err, ConnectionError):
                console.print(f"[bold red]error:[/] {err}", soft_wrap=True)
                sys.exit(1)
            if isinstance(err, KeyboardInterrupt):
                raise err from None
            raise
        tracker = pending.result()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[status]}"))
    with Progress(*columns, console=console, disable=not plan.progress, transient=False) as bar:
        task = bar.add_task("rounds", total=plan.num_rounds, status="")

        def on_round(r: int, metrics: dict) -> None:
            shown = next((k for k in ("train_loss", "gap") if k in metrics), None)
            if shown is not None:  # rounds between evaluations keep the last value shown
                on_round.label, on_round.loss = shown.split("_")[-1], float(np.mean(metrics[shown]))
            status = "" if on_round.label is None else f"{on_round.label} {on_round.loss:.4f}"
            if "epsilon_max" in metrics:
                status += f"  eps {float(np.max(metrics['epsilon_max'])):.3f}"
            bar.update(task, completed=r + 1, status=status)   # r: the last step the round ran

        on_round.label, on_round.loss = None, float("nan")      # nothing shown before a first evaluation
        try:
            interrupts.check()                  # a Ctrl-C while the run opened
            tracker.client.set_tag(tracker.run_id, "ray.actor_nodes", str(len(set(groups.node_ids()))))
            result = run(plan, tracker=tracker, progress=on_round, groups=groups, pool=pool)
            interrupts.check()                  # a Ctrl-C after the last gather: not finished yet
        except BaseException as err:
            tracker.fail(_ended(err))
            raise
        bar.update(task, status=final_status(plan, result))     # the released model's values, not a round's
    if writer is not None:
        try:
            writer.wait()               # the previous job's run, written during these rounds
        except BaseException:
            tracker.fail()
            raise
    # In a sweep run by this process the next job (or the sweep's end) waits for this run's writing.
    tracker.finish(plan, result)
    if sweep is None and threading.current_thread() is threading.main_thread():
        # A single run is finished and recorded: a Ctrl-C from here on would only cut Ray's shutdown
        # short (at interpreter exit that crashed the process and left Ray's helpers alive), so the
        # rest (the summary, ending the processes this command started) runs to its end.
        interrupts.ignore()
    if result.stopped is not None:
        console.print(f"[bold yellow]stopped:[/] {result.stopped}", soft_wrap=True)
    console.print(summary_table(plan, result))
    for note in outcome_notes(plan, result):
        console.print(f"[bold yellow]{note.split(':')[0]}:[/]{note.split(':', 1)[1]}", soft_wrap=True)
    diagnostics = ", ".join(sorted(result.diagnostics)) or "none"
    console.print(f"privacy: {plan.privacy.summary()}; diagnostic metrics (read data a deployment's server would not see): {diagnostics}",
                  soft_wrap=True)
    where = browse_hint(tracker.uri, tracker.experiment_id, tracker.run_id)
    console.print(f"MLflow run [bold]{tracker.run_id}[/] in [bold]{tracker.uri}[/]; {where}", soft_wrap=True)
    return result


class Jobs:
    """Hydra's task function for the jobs this process runs, and what they share; made and ended
    (``close``) by ``fedray.__main__.cli``, or by a launcher's job worker (``launched``), nothing of
    it at import.

    - The silo actors kept from one job for the next (an ``ActorPool``, made at the first job):
      consecutive jobs of a sweep on the same records reuse them.
    - The sweep the jobs belong to, handed in by ``fedray.sweep.ParentRun`` at each job's start
      (``join_sweep``), and the thread that writes a finished job's run while the next job runs
      (a ``RunWriter``, which also writes every job's round metrics and keeps the store client),
      waited for at the sweep's end (``wait_written``).
    """

    def __init__(self) -> None:
        self.pool: ActorPool | None = None
        self.sweep: Sweep | None = None
        self.writer: RunWriter | None = None

    def join_sweep(self, sweep: Sweep) -> None:
        self.sweep = sweep

    def launched(self) -> Jobs:
        """A new one, sharing nothing with this one, for a launcher's job worker (the ray_jobs
        launcher's): it keeps that worker's actors and writer until the worker ``close``s it."""
        return Jobs()

    def __call__(self, cfg: DictConfig) -> None:
        if self.pool is None:
            self.pool = ActorPool()
        if self.sweep is not None and self.writer is None:
            self.writer = RunWriter()
        run_job(cfg, self.pool, self.sweep, self.writer)

    def wait_written(self) -> None:
        """Wait until every finished job's run is written; re-raise the first write that failed."""
        if self.writer is not None:
            self.writer.wait()

    def close(self) -> None:
        """End the writing thread (after its writes) and the kept actors."""
        try:
            if self.writer is not None:
                self.writer.close()
        finally:
            self.writer = None
            if self.pool is not None:
                self.pool.drop_all()
            self.pool = None
