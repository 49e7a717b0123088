"""The default sweeper composes every swept value before the first job, not every job, and sweeps
a union of grids."""

import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

import hydra_plugins.fedray_launcher.covering_sweeper as covering
from tests.conftest import mlflow_store, shared_ray_address

REPO = Path(__file__).resolve().parents[1]


class RecordingLoader:
    """A config loader recording the compositions asked of it (Hydra's own: tests/test_sweep_composer.py)."""

    def __init__(self):
        self.composed = []

    def list_groups(self, parent):
        return ["algorithm"]

    def load_sweep_config(self, master_config, sweep_overrides):
        self.composed.append(tuple(sweep_overrides))
        naming = {"exclude_keys": [], "item_sep": ",", "kv_sep": "="}
        return OmegaConf.create({"trial": None, "hydra": {"overrides": {"task": []},
                                                          "job": {"override_dirname": "", "config": {"override_dirname": naming}}}})


def test_every_override_is_checked_before_any_job_and_each_list_of_group_choices_composed_once():
    # Hydra's plugin scan re-executes plugin modules in place (new class objects, the base class
    # too), so the class is looked up now, not at import.
    sweeper = covering.CoveringSweeper(max_batch_size=None)
    sweeper.config, sweeper.hydra_context = object(), type("Context", (), {"config_loader": RecordingLoader()})()
    grid = [(f"trial={t}", f"algorithm={a}") for t in range(20) for a in ("x", "y")]
    sweeper.validate_batch_is_legal(grid[:7])
    sweeper.validate_batch_is_legal(grid[7:])          # a later batch checks only what is new
    assert sweeper.checked == set().union(*grid)
    # Hydra composed each list of group choices once; every trial's value was set on a copy
    assert sweeper.hydra_context.config_loader.composed == [("algorithm=x",), ("algorithm=y",)]


@pytest.mark.slow
def test_a_bad_value_anywhere_in_the_grid_stops_the_sweep_before_its_first_job(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fedray", "-m", "experiment=isrl_dp_convex", "trial=0,1,2",
         "algorithm=isrl_dp_mb_sgd,no_such_algorithm", f"tracking.uri={mlflow_store(tmp_path)}",
         f"hydra.sweep.dir={tmp_path}/multirun"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert proc.returncode == 2
    (line,) = [text for text in proc.stdout.splitlines() if text.strip()]       # one line, with the options
    assert line.startswith("error: algorithm must be one of the options of algorithm") and "no_such_algorithm" in line
    assert "Started a local Ray instance" not in proc.stderr
    client = MlflowClient(tracking_uri=mlflow_store(tmp_path))
    runs = client.search_runs([client.get_experiment_by_name("fedray").experiment_id])
    assert [(r.data.tags.get("sweep"), r.info.status) for r in runs] == [("parent", "FAILED")]     # no job ran


def jobs_of(arguments, grids, max_batch_size=None):
    sweeper = covering.CoveringSweeper(max_batch_size=max_batch_size, grids=grids)
    return sweeper.split_arguments(OverridesParser.create().parse_overrides(arguments), max_batch_size)


def test_grids_sweep_their_union_grid_by_grid_with_the_command_line_slowest():
    grids = [{"data.n": 10, "algorithm": "a,b"}, {"data.n": 3, "algorithm": "c", "privacy": "none"}]
    (jobs,) = jobs_of(["experiment=e", "trial=0,1"], grids)
    assert jobs == [
        ["experiment=e", "trial=0", "data.n=10", "algorithm=a"], ["experiment=e", "trial=0", "data.n=10", "algorithm=b"],
        ["experiment=e", "trial=1", "data.n=10", "algorithm=a"], ["experiment=e", "trial=1", "data.n=10", "algorithm=b"],
        ["experiment=e", "trial=0", "data.n=3", "algorithm=c", "privacy=none"],
        ["experiment=e", "trial=1", "data.n=3", "algorithm=c", "privacy=none"],
    ]
    batches = jobs_of(["experiment=e", "trial=0,1"], grids, max_batch_size=4)
    assert [len(batch) for batch in batches] == [4, 2] and sum(batches, []) == jobs
    assert jobs_of(["trial=0,1", "algorithm=a,b"], None) == jobs_of(["trial=0,1", "algorithm=a,b"], [])  # no grids: Hydra's
    # YAML values in a grid mean what the same override on the command line means
    from_yaml = jobs_of(["trial=0"], [{"progress": False, "runtime.address": None, "privacy.epsilon": 0.5}])
    assert from_yaml == jobs_of(["trial=0", "progress=false", "runtime.address=null", "privacy.epsilon=0.5"], None)


def test_a_key_both_in_a_grid_and_on_the_command_line_is_refused_with_its_name():
    with pytest.raises(HydraException, match=r"grids\[1\] sets data.n, which the command line sets too"):
        jobs_of(["trial=0,1", "data.n=5"], [{"algorithm": "a"}, {"data.n": 3}])


@pytest.mark.slow
def test_the_default_launcher_runs_each_job_with_its_own_config_while_composing_the_next(tmp_path, ray_local, monkeypatch):
    """Catches a job that runs with another job's config (the next one, composed while it runs).
    The command joins the test run's shared local Ray: where the actors run is not what is tested."""
    small = ["data=synthetic", "data.spec.num_silos=4", "data.spec.samples_per_silo=40", "data.spec.dim=3",
             "participation.silos_per_round=2", "num_rounds=2", "algorithm.batch_size=8", "progress=false",
             "privacy.enforce_budget=false"]
    proc = subprocess.run(
        [sys.executable, "-m", "fedray", "-m", *small, "trial=0,1", "algorithm.step_size=0.1,0.3",
         f"tracking.uri={mlflow_store(tmp_path)}", f"hydra.sweep.dir={tmp_path}/multirun",
         f"runtime.address={shared_ray_address(ray_local, monkeypatch)}"],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(tracking_uri=mlflow_store(tmp_path))
    runs = client.search_runs([client.get_experiment_by_name("fedray").experiment_id])
    children = sorted((r for r in runs if r.data.tags.get("sweep") != "parent"), key=lambda r: r.info.start_time)
    asked = [dict(item.split("=", 1) for item in r.data.tags["overrides"].split()) for r in children]
    assert [(a["trial"], a["algorithm.step_size"]) for a in asked] == [(t, s) for t in ("0", "1") for s in ("0.1", "0.3")]
    for run, wanted in zip(children, asked):      # what the job ran with is what its overrides asked for
        assert run.data.params["trial"] == wanted["trial"]
        assert float(run.data.params["algorithm.step_size"]) == float(wanted["algorithm.step_size"])
        assert run.info.status == "FINISHED"
    assert "_target_: hydra_plugins.fedray_launcher.overlapped.OverlappedLauncher" in \
        (tmp_path / "multirun" / "multirun.yaml").read_text()


def test_jobs_and_batches_are_those_of_hydras_basic_sweeper():
    """Catches a sweeper (written on Hydra's public plugin API) whose cartesian product, order,
    repeated keys, ranges or batching differ from the basic sweeper a Hydra user knows (which the
    test alone imports, as the independent route)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    parser = OverridesParser.create()
    for arguments, size in [(["a=1,2,3", "b=x,y", "c=5"], None), (["a=range(0,4)", "b=1,2", "a=7,8"], 3),
                            (["+new=1,2", "~gone", "b=[1,2]"], 1), (["k='a,b',c"], -1)]:
        overrides = parser.parse_overrides(arguments)
        hydras = BasicSweeper.split_arguments(overrides, None if size == -1 else size)
        assert covering.batches(covering.jobs_of(overrides), size) == hydras, arguments
