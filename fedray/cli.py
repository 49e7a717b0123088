"""`python -m fedray ...`: plan (validate everything), run on Ray, track in MLflow, summarise."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from omegaconf import DictConfig
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedray.data import ChecksumError, DownloadError
from fedray.errors import BudgetError, ConfigError
from fedray.plan import Plan, make_plan
from fedray.preflight import tracking_store
from fedray.runtime import checkpoint
from fedray.runtime.driver import ActorPool, RunResult, run, start
from fedray.sweep import parent_run_id
from fedray.tracking import finish_deferred, run_name, tracker_from_config

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
    for column in ("step", *(("clip",) if clips is not None else ()), "eps", "eps paper", "eps spent",
                   *(name.replace("_", " ") for name in headline + extra)):
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
        )
    return table


def record_refused(cfg: DictConfig, err: Exception) -> None:
    """A sweep's refused job as a FAILED child run tagged with the reason, so the sweep goes on and
    the parent counts it."""
    from omegaconf import OmegaConf

    tracking = OmegaConf.to_container(cfg.tracking, resolve=True)
    tracker = tracker_from_config(tracking, run_name=f"{cfg.algorithm.get('name')} refused",
                                  parent_run_id=parent_run_id())
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


def run_job(cfg: DictConfig, pool: ActorPool | None = None) -> RunResult | None:
    """One job: plan, start (or reuse ``pool``'s) actors while the MLflow run opens, rounds, summary."""
    try:
        if parent_run_id() is None:         # a sweep's parent run has asked the store already
            tracking_store(cfg.tracking.uri)    # an MLflow server that does not answer: before planning and Ray
        plan = make_plan(cfg)
        resumed = checkpoint.resumable(plan.runtime, plan.config)     # one of another config is refused here
        prepare = getattr(plan.dataset, "prepare", None)  # fetch public files once, before actors start
        if prepare is not None:
            prepare()
    except (ConfigError, BudgetError, DownloadError, ChecksumError) as err:
        console.print(f"[bold red]error:[/] {err}", soft_wrap=True)
        if parent_run_id() is None:
            sys.exit(2)
        record_refused(cfg, err)             # in a sweep: a FAILED child run; the sweep goes on
        return None

    for note in plan.protocol.resolved.get("notes", ()):      # what the resolved parameters mean at this size
        console.print(f"[bold yellow]note:[/] {note}", soft_wrap=True)

    def open_tracker():
        tracker = tracker_from_config(plan.tracking, run_name=run_name(plan),
                                      parent_run_id=parent_run_id(),  # set by fedray.sweep.ParentRun
                                      resumed=resumed)                # its MLflow run goes on
        tracker.log_plan(plan)
        if parent_run_id() is not None:
            tracker.client.set_tag(tracker.run_id, "overrides", job_overrides())
        return tracker

    # The MLflow store (schema creation on a fresh one) is set up while Ray and the silo actors start.
    with ThreadPoolExecutor(max_workers=1) as background:
        pending = background.submit(open_tracker)
        try:
            with console.status(f"starting Ray and the actors of {plan.shape.num_silos:,} units", spinner="dots"):
                groups = start(plan, pool)
        except BaseException as err:
            pending.result().fail(_ended(err))     # the run opened meanwhile: never leave it RUNNING
            if isinstance(err, ConnectionError):
                console.print(f"[bold red]error:[/] {err}", soft_wrap=True)
                sys.exit(1)
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
            tracker.client.set_tag(tracker.run_id, "ray.actor_nodes", str(len(set(groups.node_ids()))))
            result = run(plan, tracker=tracker, progress=on_round, groups=groups, pool=pool)
        except BaseException as err:
            tracker.fail(_ended(err))
            raise
    try:
        finish_deferred()               # the previous job's run, written during these rounds
    except BaseException:
        tracker.fail()
        raise
    # In a sweep run by this process the next job (or the sweep's end) waits for this run's writing.
    tracker.finish(plan, result, defer=pool is not None and parent_run_id() is not None)
    if result.stopped is not None:
        console.print(f"[bold yellow]stopped:[/] {result.stopped}", soft_wrap=True)
    console.print(summary_table(plan, result))
    diagnostics = ", ".join(sorted(result.diagnostics)) or "none"
    console.print(f"privacy: {plan.privacy.summary()}; diagnostic metrics (read data a deployment's server would not see): {diagnostics}",
                  soft_wrap=True)
    page = f"#/experiments/{tracker.experiment_id}/runs/{tracker.run_id}?workflowType=machine_learning"
    if tracker.uri.startswith(("http://", "https://")):
        where = f"open {tracker.uri.rstrip('/')}/{page}"
    else:   # MLflow 3's UI opens on its GenAI views unless the URL asks for the model-training one
        where = f"browse with: mlflow ui --backend-store-uri {tracker.uri}, then open http://127.0.0.1:5000/{page}"
    console.print(f"MLflow run [bold]{tracker.run_id}[/] in [bold]{tracker.uri}[/]; {where}", soft_wrap=True)
    return result
