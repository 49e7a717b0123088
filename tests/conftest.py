"""Shared fixtures and the two tiers.

The fast tier (``python -m pytest``) covers every module's unit behaviour and one end-to-end run
(tests/test_main_job.py: the command line, Ray and MLflow); the whole suite (``python -m pytest
--all``, what .ci/run runs) adds the tests marked ``slow``. A test may be marked ``slow`` only if it
checks several modules together (an audit or another statistical test, a run through the command
line in a subprocess, several full runs compared, anything on the shared local Ray, which counts
as slow by itself) and the unit behaviour it touches stays covered by a fast test, named in the
commit that marks it. Make a test faster before moving it: a move only shifts its time into the
whole suite.
"""

import copy
import functools
import hashlib
import os
import pickle
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true",
                     help="run the whole suite, the slow tier too (what .ci/run runs); by default tests "
                          "marked slow are deselected unless -m names a marker expression")


def pytest_collection_modifyitems(config, items):
    """The fast tier by default: tests marked ``slow`` are deselected (``--all`` or any ``-m``
    expression keeps them). Integration tests on the shared local Ray (the ``ray_local`` fixture)
    count as slow: the fast tier's one run on Ray is the main job, end to end. Tests marked ``long``
    come first (under xdist, first on each worker: ``deal_long_tests``)."""
    for item in items:
        if "ray_local" in item.fixturenames and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    # xdist hands tests out in this order: the longest start first, not as the last ones left
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
    if config.getoption("--all") or config.option.markexpr:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


def deal_long_tests(items: list, workers: int, is_long, group) -> list:
    """``items`` reordered so that each of ``workers`` xdist workers starts with its share of the
    long tests. xdist's work-stealing scheduler (``--dist worksteal``, in ``addopts``) first deals
    the collection out in contiguous chunks, chunk k of ``n // (workers - k)`` of the tests left,
    and steals only from a queue's end: with every long test at the front, all of them ran one
    after another on the first worker. Long tests of one group (a module: its tests may share a
    module-scoped cluster) stay in one chunk; groups go, largest first, to the chunk with the
    fewest long tests so far; the other tests fill the chunks in their order."""
    groups: dict = {}
    for item in items:
        if is_long(item):
            groups.setdefault(group(item), []).append(item)
    rest = [item for item in items if not is_long(item)]
    chunks: list[list] = [[] for _ in range(workers)]
    for members in sorted(groups.values(), key=len, reverse=True):
        min(chunks, key=len).extend(members)
    ordered, left = [], len(items)
    for k, chunk in enumerate(chunks):
        size = left // (workers - k)
        take = max(size - len(chunk), 0)
        ordered += chunk + rest[:take]
        rest = rest[take:]
        left -= len(chunk) + take
    return ordered + rest


class _LongTestsDealt:
    """Runs after every other plugin's reordering and deselection (``-k``, ``-m``), on the final
    collection that xdist deals out."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        workerinput = getattr(config, "workerinput", None)        # set in an xdist worker only
        if workerinput is not None and int(workerinput["workercount"]) > 1:
            items[:] = deal_long_tests(items, int(workerinput["workercount"]), dealt_first, deal_group)


def dealt_first(item) -> bool:
    """Whether ``item`` is dealt at the front of a worker's chunk: a ``long`` test, or one that
    must share a worker (``same_worker``)."""
    return item.get_closest_marker("long") is not None or item.get_closest_marker("same_worker") is not None


def deal_group(item) -> str:
    """The group ``item`` is dealt with: ``same_worker``'s name, else its module. Tests that plan
    the same slow accountant answer (an RDP calibration of seconds) share a name, so that one
    worker runs them one after another and the later ones read the answer the first one stored
    (in the run's own store, ``data_dir``: never kept between pytest runs, so every run computes
    it once); on two workers at once, both computed it."""
    shared = item.get_closest_marker("same_worker")
    return shared.args[0] if shared else item.nodeid.split("::")[0]


def pytest_configure(config):
    config.pluginmanager.register(_LongTestsDealt(), "fedray-long-tests-dealt")


def pytest_terminal_summary(terminalreporter, config):
    if not (config.getoption("--all") or config.option.markexpr):
        terminalreporter.write_line("fast tier: tests marked slow were deselected; `python -m pytest --all` "
                                    "runs the whole suite")


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (the default, ``addopts``): a worker per core, at most 4; each worker that runs
    an integration test starts a local Ray of its own."""
    return max(1, min(4, os.cpu_count() or 1))


@pytest.fixture(scope="session", autouse=True)
def data_dir(tmp_path_factory):
    """Offline copies of the datasets, unless the caller pointed FEDRAY_DATA_DIR elsewhere; built
    federations and accountant answers cached in the test run's own folder, shared by its xdist
    workers (entries are written whole, then renamed or committed), never in the user's ~/.cache:
    a test run starts cold, and Ray's workers inherit the variable."""
    if "FEDRAY_DATA_DIR" not in os.environ and SHARED_DATASETS.is_dir():
        os.environ["FEDRAY_DATA_DIR"] = str(SHARED_DATASETS)
    root = tmp_path_factory.getbasetemp()
    cache = (root.parent if "PYTEST_XDIST_WORKER" in os.environ else root) / "fedray-cache"
    cache.mkdir(exist_ok=True)
    os.environ["FEDRAY_CACHE_DIR"] = str(cache)
    _COMPOSITIONS[:] = [cache / "compositions"]
    _COMPOSITIONS[0].mkdir(exist_ok=True)
    return os.environ.get("FEDRAY_DATA_DIR")


def _start_local_ray(ray) -> None:
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a cluster already running here


@pytest.fixture(scope="session")
def _ray_session():
    ray = pytest.importorskip("ray")
    _start_local_ray(ray)
    yield ray
    ray.shutdown()


@pytest.fixture
def ray_local(_ray_session):
    """One local Ray instance shared by every integration test; started again if a test before
    this one on the same worker ended it."""
    if not _ray_session.is_initialized():
        _start_local_ray(_ray_session)
    yield _ray_session


def shared_ray_address(ray, monkeypatch) -> str:
    """The GCS address of the test run's local Ray, for a command-line run to join (its token
    authentication is on, so the joining process is started with RAY_AUTH_MODE=token)."""
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    return ray.get_runtime_context().gcs_address


def mlflow_store(folder: Path, name: str = "mlflow.db") -> str:
    """The URI of an empty MLflow SQLite store ``folder/name`` (made on the first call for that
    file, kept on later ones): a copy of one store per worker with MLflow's tables already made,
    since making them runs MLflow's schema migrations, about 2 s a store. Tests of a store's
    creation itself (concurrent writers, the documented commands) start from no file instead."""
    target = Path(folder) / name
    if not target.exists():
        shutil.copyfile(_mlflow_template(), target)
    return f"sqlite:///{target}"


@functools.lru_cache(maxsize=None)
def _mlflow_template() -> Path:
    from mlflow.tracking import MlflowClient

    folder = Path(os.environ["FEDRAY_CACHE_DIR"]) / f"mlflow-template-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mlflow.db"
    if not path.exists():
        MlflowClient(tracking_uri=f"sqlite:///{folder}/making.db").search_experiments()
        os.replace(folder / "making.db", path)       # whole or absent
    return path


def compose(*overrides: str):
    """The composed Hydra config for ``overrides``, as `python -m fedray` would build it: a copy of
    one composition made in this test run, on this worker or read back from the one another
    worker stored (Hydra takes 0.1-0.3 s a composition, a copy 3 ms; a test may change its copy).

    Hydra composes in two steps: the config groups chosen (``experiment=``, ``algorithm=``, ...)
    select and merge the files, then the value overrides (``num_rounds=6``, ``+data.spec.noise=2``)
    are set on the merged config, in order, by ``OmegaConf.update``. Value overrides never choose
    a file, so one composition per list of group choices serves every list of values on it (the
    fast tier's 600 override lists share about 150): the values are set the way Hydra sets them, by
    ``fedray.compose.set_values``, as the sweep launchers set them (tests/test_compose_helper.py
    and tests/test_sweep_composer.py compare the two routes). A list this does not split (a
    sweep, a deletion, a ``hydra.`` key, a package) is composed whole, and so is any list whose
    values fail to apply, so that Hydra raises its own error."""
    from fedray.compose import set_values

    split = _split(overrides)
    if split is None:
        return copy.deepcopy(_composed(overrides))
    groups, values = split
    cfg = copy.deepcopy(_composed(groups))
    try:
        set_values(cfg, values)
    except Exception:       # Hydra's own message (or, were this route wrong, Hydra's config)
        return copy.deepcopy(_composed(overrides))
    return cfg


CONFIG_GROUPS = frozenset(p.name for p in (REPO / "fedray" / "conf").iterdir() if p.is_dir())


@functools.lru_cache(maxsize=None)
def _split(overrides: tuple[str, ...]):
    """(group overrides, parsed value overrides) of ``overrides``, or None to compose it whole."""
    from fedray.compose import split_overrides

    return split_overrides(overrides, CONFIG_GROUPS)


# The test run's folder of compositions (``data_dir``), shared by its xdist workers: a list of
# group choices one worker composed is read back by the other (a pickle, under 1 ms against
# 0.1-0.3 s a composition). Empty until the session starts; never kept between test runs.
_COMPOSITIONS: list[Path] = []


@functools.lru_cache(maxsize=None)
def _composed(overrides: tuple[str, ...]):
    if not _COMPOSITIONS:
        return _hydra_compose(overrides)
    path = _COMPOSITIONS[0] / f"{hashlib.sha256(repr(overrides).encode()).hexdigest()}.pickle"
    try:
        return pickle.loads(path.read_bytes())
    except FileNotFoundError:
        pass
    cfg = _hydra_compose(overrides)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_bytes(pickle.dumps(cfg))
    os.replace(partial, path)               # whole or absent
    return cfg


def _hydra_compose(overrides: tuple[str, ...]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from fedray.resolvers import register

    register()
    with initialize_config_dir(config_dir=str(REPO / "fedray" / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


def load_script(path: Path):
    """An experiment or benchmark script as a module (its folder on sys.path for its siblings),
    so tests can shrink its grid with monkeypatch and run its main."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(f"{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    return module


def round_keys(replicas: int = 1, seed: int = 0, round_index: int = 0):
    """The ``RoundKeys`` a test hands to halves it runs by hand: run ``seed``, repetition 0 and
    stream key (r,) for replica r, round ``round_index`` (``keys.at(t)`` for another)."""
    import numpy as np

    from fedray.core.protocol import RoundKeys

    return RoundKeys(seed, np.zeros(replicas, dtype=np.int64), round_index, np.arange(replicas, dtype=np.int64)[:, None])
