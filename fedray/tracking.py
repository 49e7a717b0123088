"""MLflow tracking: one run per job, written from the driver only.

A run gets the flattened resolved config as params, the resolved privacy values (K, noise
multiplier and std, clip, delta, planned epsilon), tags (algorithm, trust model, dataset),
per-round metrics written in batches every ``log_every`` rounds (at most one write per
``WRITE_INTERVAL`` seconds), final metrics, and artifacts:
the resolved config, a summary, every replica's per-round metrics (``rounds.csv``), a figure
of training loss and epsilon spent per round, and the released outputs (``output.npz``: one
(P, ...) array per output, the model first, row p the replica p; ``load_output`` reads it back).

With several replicas in a run, metric keys carry a ``/replica_<p>`` suffix. Past
``replica_curves`` replicas (a sweep carrying budgets x clips x steps x repetitions), per-replica
metrics would be thousands of metric keys that no UI can show and whose SQLite writes cost more
than the run (a row takes about 0.4 ms), so per-round and final metrics are then logged as
``<key>/min``, ``/mean``, ``/max`` over replicas; ``rounds.csv`` keeps every replica's curve and
``summary.json`` every replica's final metrics (what ``experiments.report`` reads).
"""

from __future__ import annotations

import json
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np
from filelock import FileLock

# mlflow (and sqlalchemy with it) is imported where it is first used: the import takes seconds,
# and the command line opens the store in a thread while Ray starts, so nothing waits for it.

MAX_PARAM_LENGTH = 6000
MAX_BATCH = 900
MAX_NAMED = 100         # params and tags in one log_batch (MLflow's cap)
WRITE_INTERVAL = 0.5            # seconds between two batched writes of round metrics, at least


def flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    """{"a": {"b": 1}} -> {"a.b": "1"}; lists are written as their JSON text."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
    return out


SQLITE = "sqlite:///"


def _store_uri(uri: str) -> str:
    """Relative sqlite paths are resolved against the working directory, made absolute for the UI."""
    if uri.startswith(SQLITE) and not uri.startswith(SQLITE + "/"):
        return SQLITE + str(Path(uri[len(SQLITE):]).resolve())
    return uri


STORE_BUSY_TIMEOUT = 600.0      # seconds a write waits for a busy store before the run fails


def _busy(err: Exception) -> bool:
    """A store that is there but busy: MLflow's "temporarily unavailable" (SQLite locked past its
    20 s wait, a server busy or restarting) or, while a SQLite store is opened, SQLite's own lock."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import OperationalError

    if isinstance(err, MlflowException):
        return err.error_code == "TEMPORARILY_UNAVAILABLE"
    return isinstance(err, OperationalError) and "database is locked" in str(err)


class RetryingClient:
    """An ``MlflowClient`` whose calls are retried while the store is busy (``_busy``). Retried
    writes are whole transactions that were rolled back, so nothing is written twice."""

    def __init__(self, uri: str):
        from mlflow.tracking import MlflowClient

        self.retries = 0
        self._client = self._retried(MlflowClient)(tracking_uri=uri)

    def _retried(self, method):
        from mlflow.exceptions import MlflowException
        from sqlalchemy.exc import OperationalError

        def retried(*args, **kwargs):
            deadline, wait = time.monotonic() + STORE_BUSY_TIMEOUT, 0.1
            while True:
                try:
                    return method(*args, **kwargs)
                except (MlflowException, OperationalError) as err:
                    if not _busy(err) or time.monotonic() > deadline:
                        raise
                self.retries += 1
                time.sleep(wait)
                wait = min(2 * wait, 5.0)
        return retried

    def __getattr__(self, name: str):
        if name.startswith("_"):        # not the client's: e.g. while unpickling, before _client is set
            raise AttributeError(name)
        method = getattr(self._client, name)
        return self._retried(method) if callable(method) else method


@contextmanager
def _store_lock(uri: str):
    """An inter-process lock beside a SQLite store's file; nothing for other stores."""
    if not uri.startswith(SQLITE):
        yield
        return
    path = Path(uri[len(SQLITE):])
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        yield


# MLflow 3's UI opens an experiment of this kind on its runs table (not on the GenAI overview).
EXPERIMENT_KIND, MODEL_DEVELOPMENT = "mlflow.experimentKind", "custom_model_development"


class MlflowTracker:
    """An MLflow store and experiment; ``start_run`` opens the run this tracker writes to."""

    def __init__(self, uri: str, experiment_name: str, artifact_location: str | None = None,
                 log_every: int = 5, replica_curves: int = 30, figure: bool = True,
                 writer: RunWriter | None = None):
        self.uri = _store_uri(uri)
        location = None
        if artifact_location and "://" not in artifact_location:
            location = Path(artifact_location).resolve().as_uri()
        elif artifact_location:
            location = artifact_location
        # Round metrics and (handed over) finishes are written by one background thread, the
        # writer's: the driver's rounds wait on the silo actors, so the store's writes overlap with
        # their work instead of adding to it. A tracker given a ``writer`` (the jobs of a sweep in
        # one process) shares it, with its store client and experiment; else it has its own.
        self._owns_writer = writer is None
        self._writer = RunWriter() if writer is None else writer
        self.client, self.experiment_id = self._writer.experiment(self.uri, experiment_name, location)
        self.run_id: str | None = None
        self.log_every = int(log_every)
        self.replica_curves = int(replica_curves)
        self.figure = bool(figure)
        self._pending: list = []                # mlflow Metric entities
        self._replicas = 1
        self._logged: dict[str, int] = {}       # a resumed run: key -> last step the store holds
        self._params: dict[str, str] = {}       # a resumed run: the params it was opened with
        self._written: list[Future] = []
        self._flushed_at = time.monotonic()     # the first write waits too: the first rounds warm up

    def start_run(self, run_name: str | None = None, parent_run_id: str | None = None) -> str:
        """Open the run (a child of ``parent_run_id`` if given) and return its id."""
        tags = {"mlflow.parentRunId": parent_run_id} if parent_run_id else {}
        self.run_id = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags).info.run_id
        return self.run_id

    def resume_run(self, run_id: str, next_round: int) -> bool:
        """Reopen ``run_id`` (a run this store holds in this experiment) for a run resumed from a
        checkpoint at ``next_round``, and note what it holds: resumed rounds are logged to it only
        where it lacks them (a killed driver logged some of them, or none). False if it is not here."""
        try:
            run = self.client.get_run(run_id)
        except Exception:           # deleted, or another store: the resumed run opens a new one
            return False
        if run.info.experiment_id != self.experiment_id or run.info.lifecycle_stage != "active":
            return False
        self.run_id = run_id
        self._logged = {key: max(m.step for m in self.client.get_metric_history(run_id, key))
                        for key in run.data.metrics}
        self._params = dict(run.data.params)
        self.client.update_run(run_id, status="RUNNING")
        resumed = run.data.tags.get("resumed_at_rounds")
        self.client.set_tag(run_id, "resumed_at_rounds", f"{resumed},{next_round}" if resumed else str(next_round))
        return True

    # -- writing -------------------------------------------------------------------------------
    def _batch(self, metrics=(), params=(), tags=()) -> None:
        """As few ``log_batch`` calls as MLflow's caps allow (each a store transaction): at most
        100 params and tags together and 1000 items in all per call (``MAX_BATCH`` under it)."""
        metrics, params, tags = list(metrics), list(params), list(tags)
        while metrics or params or tags:
            named_params = params[:MAX_NAMED]
            named_tags = tags[:MAX_NAMED - len(named_params)]
            params, tags = params[len(named_params):], tags[len(named_tags):]
            room = MAX_BATCH - len(named_params) - len(named_tags)
            self.client.log_batch(self.run_id, metrics=metrics[:room], params=named_params, tags=named_tags)
            metrics = metrics[room:]

    def _metric_items(self, metrics: dict, step: int, stamp: int):
        from mlflow.entities import Metric

        for key, values in metrics.items():
            values = np.atleast_1d(values)
            if values.shape[0] == 1:
                yield Metric(key, float(values[0]), stamp, step)
            else:
                for p, v in enumerate(values):
                    yield Metric(f"{key}/replica_{p}", float(v), stamp, step)

    def log_plan(self, plan, tags: dict[str, str] | None = None) -> None:
        """The plan's config, resolved values and privacy settings as params and tags (with
        ``tags``), in one store transaction where MLflow's caps allow."""
        self._replicas = plan.num_replicas
        params = flatten(plan.config)
        resolved = {f"resolved.{key}": value for key, value in plan.protocol.resolved.items()}
        resolved.update({
            "resolved.num_silos": plan.shape.num_silos,
            "resolved.n_train_min": plan.shape.min_train_size,
            "resolved.dim": plan.shape.dim,
            "resolved.num_replicas": plan.num_replicas,
            "resolved.delta_min": float(np.min(plan.privacy.delta)),
        })
        for key, values in replica_settings(plan).items():      # replica p's step, repetition, budget, clip
            resolved[f"resolved.{key}"] = _param_list(values, key)
        if plan.privacy.planned_epsilon is not None:
            resolved["resolved.planned_epsilon_max"] = float(np.max(plan.privacy.planned_epsilon))
            resolved["resolved.target_epsilon_min"] = float(np.min(plan.privacy.target_epsilon))
        if plan.privacy.nominal_epsilon is not None:
            resolved["resolved.paper_epsilon_max"] = float(np.max(plan.privacy.nominal_epsilon))
        params.update({k: str(v) for k, v in resolved.items()})
        # The values used where the config left them to a default (null): the delta, the data source.
        if plan.privacy.private:
            low, high = float(np.min(plan.privacy.delta)), float(np.max(plan.privacy.delta))
            params["privacy.delta"] = f"{low:g}" if low == high else f"{low:g}..{high:g} (per unit)"
        params["data.source"] = plan.dataset.source()
        tags = {
            "algorithm": plan.algorithm_name,
            "trust_model": plan.privacy.trust_model,
            "dataset": plan.dataset_name,
            "calibration": plan.privacy.calibration,
            "accountant": plan.privacy.accountant,
            "privacy_statement": plan.privacy.summary(),
            "replicas.common_random_numbers": str(plan.replicas.common_random_numbers).lower(),
            **(tags or {}),
        }
        from mlflow.entities import Param, RunTag

        # A resumed run keeps the params it was opened with (MLflow refuses changing one; only
        # runtime values, outside the checkpoint's fingerprint, can differ).
        self._batch(
            params=[Param(k, v[:MAX_PARAM_LENGTH]) for k, v in params.items() if k not in self._params],
            tags=[RunTag(k, str(v)) for k, v in tags.items()],
        )

    def _reduced(self, metrics: dict) -> dict:
        """Past ``replica_curves`` replicas, each per-replica metric as its min, mean and max."""
        if self._replicas <= self.replica_curves:
            return metrics
        reduced = {}
        for key, values in metrics.items():
            if np.size(values) == 1:        # one value for the whole run (a constant, the wall time)
                reduced[key] = values
                continue
            for name, reduce in (("min", np.min), ("mean", np.mean), ("max", np.max)):
                reduced[f"{key}/{name}"] = reduce(np.asarray(values))
        return reduced

    def log_round(self, round_index: int, metrics: dict) -> None:
        items = self._metric_items(self._reduced(metrics), round_index, int(time.time() * 1000))
        self._pending.extend(m for m in items if m.step > self._logged.get(m.key, -1))
        # Rounds of a small federation take a millisecond: a write (SQLite, in the writer thread,
        # which holds the driver's GIL meanwhile) every few of them would slow the run down.
        if (round_index + 1) % self.log_every == 0 and time.monotonic() - self._flushed_at >= WRITE_INTERVAL:
            self.flush()

    def flush(self) -> None:
        """Queue the pending round metrics for the writer thread (in order)."""
        if self._pending:
            self._written.append(self._writer.write(self._batch, metrics=self._pending))
            self._pending = []
            self._flushed_at = time.monotonic()

    def wait(self) -> None:
        """Block until every queued write is in the store; re-raise a failed write."""
        self.flush()
        written, self._written = self._written, []
        for future in written:
            future.result()

    def finish(self, plan, result, status: str = "FINISHED") -> None:
        """Final metrics, artifacts and the run's end status.

        A tracker that shares a writer (a sweep's job that another job or the sweep's end follows in
        this process) hands the writing to the writer's thread and returns at once: a
        many-replica run's finish (rounds.csv, artifacts) takes about 0.4 s of Python, which then
        overlaps the next job's rounds, when the driver mostly waits on its actors. The writer's
        ``wait()`` waits for it and re-raises its error; a failed handed-over finish leaves its run
        FAILED. A tracker with its own writer writes it now.
        """
        if self._owns_writer:
            self._finish(plan, result, status)
        else:
            self._writer.finish(self._finish_or_fail, plan, result, status)

    def _finish_or_fail(self, plan, result, status: str) -> None:
        try:
            self._finish(plan, result, status)
        except BaseException:
            with suppress(Exception):       # the finish's own error is the one to report
                self.fail()
            raise

    def _finish(self, plan, result, status: str) -> None:
        from mlflow.entities import RunTag

        # Not ``wait()``: this may run on the writer's own thread, where a write queued and waited
        # for would never start. The writes queued before are done (or fail here), in order.
        written, self._written = self._written, []
        pending, self._pending = self._pending, []     # so that ``fail`` here queues nothing either
        for future in written:
            future.result()
        self._batch(metrics=pending)
        stamp = int(time.time() * 1000)
        final = {f"final_{k}": v for k, v in result.final.items()}
        # Numeric constants are metrics; the rest (a mode's name, say) are tags.
        numeric = {k: v for k, v in result.constants.items() if np.asarray(v).dtype.kind in "biuf"}
        final.update(numeric)
        final["wall_time_s"] = result.wall_time
        if result.epsilon_spent is not None:
            final["epsilon_spent_max"] = result.epsilon_spent.max(axis=1)
            final["epsilon_spent_mean"] = result.epsilon_spent.mean(axis=1)
        # Which metrics read the units' data (diagnostics a deployment's server would not see).
        tags = [RunTag("diagnostic_metrics", ",".join(sorted(result.diagnostics)))]
        tags += [RunTag(f"constant.{k}", str(v)) for k, v in result.constants.items() if k not in numeric]
        if result.stopped is not None:
            tags.append(RunTag("stopped", result.stopped))
        self._batch(metrics=list(self._metric_items(self._reduced(final), plan.num_rounds, stamp)), tags=tags)
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "config.json").write_text(json.dumps(plan.config, indent=2, default=str))
            summary = {k: np.asarray(v).tolist() for k, v in final.items()}
            summary.update({f"replicas.{k}": v for k, v in replica_settings(plan).items()})
            (tmp / "summary.json").write_text(json.dumps(summary, indent=2))
            statement = plan.privacy.statement(result.epsilon_spent, result.diagnostics, result.stopped)
            (tmp / "privacy_statement.json").write_text(json.dumps(statement, indent=2))
            event = plan.privacy.planned_event()
            if event is not None:
                (tmp / PRIVACY_EVENT_ARTIFACT).write_text(json.dumps(event, indent=2))
            _round_table(result.history, plan.num_replicas, tmp / "rounds.csv")
            save_output(result.outputs, tmp / OUTPUT_ARTIFACT)
            if self.figure:
                _figure(result, tmp / "loss_and_epsilon.png")
            self.client.log_artifacts(self.run_id, str(tmp))
        self.client.set_terminated(self.run_id, status)
        if self._owns_writer:
            self._writer.close()

    def fail(self, status: str = "FAILED") -> None:
        """End the run as ``status``: FAILED, or KILLED when the user stopped it (Ctrl-C)."""
        try:
            self.wait()
        finally:
            if self._owns_writer:
                self._writer.close()
            self.client.set_terminated(self.run_id, status)


class RunWriter:
    """One process's MLflow writer: its store clients and experiments, opened once, and one
    background thread that writes, in order, the round metrics of its trackers' runs and the
    finishes handed over to it, started at the first write.

    A tracker without one has its own. The jobs of a sweep in one process (the command line's
    ``fedray.cli.Jobs``, or a launcher's job worker) share one: each job's tracker then reuses the
    store client and experiment, and its finish is written while the next job runs. Their owner
    ``wait``s for the finishes before writing its next run and at the sweep's end, and ``close``s it.
    """

    def __init__(self) -> None:
        self._thread: ThreadPoolExecutor | None = None
        self._finishes: list[Future] = []
        self._clients: dict[str, RetryingClient] = {}
        self._experiments: dict[tuple, tuple[RetryingClient, str]] = {}

    def experiment(self, uri: str, name: str, location: str | None) -> tuple[RetryingClient, str]:
        """A client of the store at ``uri`` and the id of its experiment ``name`` (created, with
        ``location`` for its artifacts, if missing), looked up once per writer."""
        key = (uri, name, location)
        if key not in self._experiments:
            # Jobs started together on a fresh SQLite store would each create its schema (MLflow's
            # migrations are not safe to run twice at once) and the same experiment: one at a time.
            with _store_lock(uri):
                if uri not in self._clients:
                    self._clients[uri] = RetryingClient(uri)
                client = self._clients[uri]
                self._experiments[key] = client, _experiment_id(client, name, location)
        return self._experiments[key]

    def write(self, write, *args, **kwargs) -> Future:
        """Run ``write(*args, **kwargs)`` on the thread, after what was queued before it."""
        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlflow-writer")
        return self._thread.submit(write, *args, **kwargs)

    def finish(self, finish, *args) -> None:
        """Queue ``finish(*args)``, a run's finish, which ``wait`` waits for."""
        self._finishes.append(self.write(finish, *args))

    def wait(self) -> None:
        """Wait until every finish handed over is written; re-raise the first that failed."""
        pending, self._finishes = self._finishes, []
        errors = []
        for future in pending:
            try:
                future.result()
            except BaseException as err:    # wait for the others before reporting
                errors.append(err)
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Wait for what was handed over (its errors are raised) and end the thread."""
        try:
            self.wait()
        finally:
            if self._thread is not None:
                self._thread.shutdown()
                self._thread = None


def _experiment_id(client: RetryingClient, name: str, location: str | None) -> str:
    """The id of experiment ``name``, created if missing (another job may create it first)."""
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return client.create_experiment(name, artifact_location=location,
                                            tags={EXPERIMENT_KIND: MODEL_DEVELOPMENT})
        except MlflowException:
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if EXPERIMENT_KIND not in experiment.tags:
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND, MODEL_DEVELOPMENT)
    return experiment.experiment_id


OUTPUT_ARTIFACT = "output.npz"
PRIVACY_EVENT_ARTIFACT = "privacy_event.json"      # the planned run as one composed dp-accounting event


def save_output(outputs: dict, path: Path) -> None:
    """The released outputs (name -> (P, ...) array, the model first) as one ``.npz``, in order."""
    np.savez(path, **{name: np.asarray(values) for name, values in outputs.items()})


def load_output(run_id: str, tracking_uri: str | None = None) -> dict[str, np.ndarray]:
    """The released outputs of the finished run ``run_id`` in the store at ``tracking_uri`` (MLflow's
    default store if None): name -> (P, ...) array, the model first, row p the replica p (its
    settings are ``replicas.*`` in the run's ``summary.json``). A run that ended without releasing
    (failed, refused) has none: ``FileNotFoundError`` names the run.

    Example: ``fedray.load_output(run_id, tracking_uri="sqlite:///mlflow.db")["last"]``, the last
    iterate of every replica (a game's run holds its strategies, a driver-side program its release).
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=_store_uri(tracking_uri) if tracking_uri else None)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, OUTPUT_ARTIFACT, tmp)
        except (MlflowException, OSError) as err:
            raise FileNotFoundError(f"run {run_id} in {client.tracking_uri} has no {OUTPUT_ARTIFACT} "
                                    f"(only finished runs keep their released output): {err}") from None
        with np.load(path) as data:
            return {name: data[name] for name in data.files}


def replica_settings(plan) -> dict[str, list]:
    """Each replica's settings, in replica order: step size, repetition, and where the run carries
    a grid of them, budget and clip (``summary.json`` holds them as ``replicas.<key>``)."""
    settings = {"step_sizes": [float(v) for v in plan.step_sizes], "repetitions": [int(v) for v in plan.repetitions]}
    if plan.epsilon_levels is not None:
        settings["replica_epsilons"] = [float(v) for v in plan.epsilon_levels]
    if plan.l2_clips is not None:
        settings["replica_clips"] = [float(v) for v in plan.l2_clips]
    return settings


def _param_list(values: list, key: str) -> str:
    """A list as a JSON param, or past MLflow's param length a note of where the whole list is (a
    truncated list would read as a shorter one, or as no JSON at all)."""
    text = json.dumps(values)
    return text if len(text) <= MAX_PARAM_LENGTH else f"{len(values)} values: replicas.{key} in summary.json"


def _round_table(history: list[dict], num_replicas: int, path: Path) -> None:
    """One row per (round, replica) with every metric of that round (blank if not evaluated).

    Built a column at a time, each distinct value formatted once (replicas share budgets, clips
    and participation: 900 replicas x 35 rounds cost 0.3 s a run cell by cell)."""
    keys = sorted({key for metrics in history for key in metrics})
    sep = "," if keys else ""
    replicas, blank = [f"{p}{sep}" for p in range(num_replicas)], [""] * num_replicas
    with path.open("w") as out:
        out.write(",".join(["round", "replica"] + keys) + "\n")
        for r, metrics in enumerate(history):
            columns = [_formatted(metrics[k], num_replicas) if k in metrics else blank for k in keys]
            rows = zip(*columns) if columns else [()] * num_replicas
            out.writelines(f"{r},{p}{','.join(cells)}\n" for p, cells in zip(replicas, rows))


def _formatted(values, num_replicas: int) -> np.ndarray:
    """(P,) ``repr`` of each value, computed once per distinct bit pattern."""
    values = np.ascontiguousarray(np.broadcast_to(np.asarray(values, dtype=float), (num_replicas,)))
    _, first, inverse = np.unique(values.view(np.int64), return_index=True, return_inverse=True)
    return np.array([repr(v) for v in values[first].tolist()], dtype=object)[inverse.reshape(-1)]


def _figure(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evaluated = [(r, h["train_loss"]) for r, h in enumerate(result.history) if "train_loss" in h]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    axes[0].plot([r for r, _ in evaluated], np.array([loss for _, loss in evaluated]))
    axes[0].set(xlabel="round", ylabel="training loss", title="loss")
    if result.history and "epsilon_max" in result.history[0]:
        eps = np.array([h["epsilon_max"] for h in result.history])
        axes[1].plot(np.arange(len(result.history)), eps)
    axes[1].set(xlabel="round", ylabel="epsilon spent (max over silos)", title="privacy spend")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# MLflow's UI starts without the GenAI job runner (three more processes that import MLflow) and with
# one web worker instead of four: on two busy cores it answers in about a third of the time.
UI_COMMAND = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow ui --workers 1"


def browse_hint(uri: str, experiment_id: str, run_id: str) -> str:
    """Where to see run ``run_id``: its URL on a tracking server, or for a local store the command
    that starts MLflow's UI on it and the URL then (MLflow 3's UI opens on its GenAI views unless the
    URL asks for the model-training one)."""
    page = f"#/experiments/{experiment_id}/runs/{run_id}?workflowType=machine_learning"
    if uri.startswith(("http://", "https://")):
        return f"open {uri.rstrip('/')}/{page}"
    return f"browse with: {UI_COMMAND} --backend-store-uri {uri}, then open http://127.0.0.1:5000/{page}"


def run_name(plan, label: str = "") -> str:
    """A name that tells runs apart in the MLflow UI, whose name column shows about 20 characters:
    in a sweep's job the values the sweep varies first (``label``, e.g. ``epsilon=1``), then the
    algorithm, budget, participants per round, data and trial, e.g.
    ``isrl_dp_mb_sgd eps=3 M=12 mnist t0``."""
    if not plan.privacy.private:
        budget = "non-private"
    elif plan.epsilon_levels is not None:
        budget = "eps=" + ",".join(f"{v:g}" for v in np.unique(plan.epsilon_levels))
    else:
        low, high = float(np.min(plan.privacy.target_epsilon)), float(np.max(plan.privacy.target_epsilon))
        budget = f"eps={low:g}" if low == high else f"eps={low:g}..{high:g}"
    per_round = plan.sampler.per_round(plan.shape.num_silos)
    participation = f"M={per_round}" if per_round is not None else type(plan.sampler).__name__
    name = f"{plan.algorithm_name} {budget} {participation} {plan.dataset_name} t{plan.trial}"
    return f"{label} · {name}" if label else name


def tracker_from_config(tracking: dict, run_name: str | None = None, parent_run_id: str | None = None,
                        resumed=None, writer: RunWriter | None = None) -> MlflowTracker:
    """A tracker for the ``tracking`` config with its run opened: the run of the checkpoint
    ``resumed`` if it has one this store holds, else a new one; writing through ``writer`` if given."""
    tracker = MlflowTracker(
        uri=tracking["uri"],
        experiment_name=tracking["experiment_name"],
        artifact_location=tracking.get("artifact_location"),
        log_every=tracking.get("log_every", 5),
        replica_curves=tracking.get("replica_curves", 30),
        figure=tracking.get("figure", True),
        writer=writer,
    )
    run_id = getattr(resumed, "run_id", None)
    if run_id is None or not tracker.resume_run(run_id, resumed.next_round):
        tracker.start_run(run_name, parent_run_id)
    return tracker

