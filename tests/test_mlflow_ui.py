"""The MLflow UI as a user meets it, in headless Chromium (``docs/mlflow_ui.py`` makes the same
store and pages, and the committed screenshots): the runs table in the model-training view shows
the sweep's parent run, the children compare by their descriptive names, a child names its parent,
and the parent holds the sweep's comparison table and figure.

The sweep is the real command line, joined to the test run's shared local Ray (``runtime.address``)
and writing into a store whose tables are already made; the ``mlflow ui`` server starts while the
sweep runs. What the UI shows is the same: a Ray of its own and a fresh store's schema migrations
are covered by the main job's and the concurrent writers' tests."""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import REPO, mlflow_store, shared_ray_address

pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location("mlflow_ui", REPO / "docs" / "mlflow_ui.py")
ui = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ui)


@pytest.mark.long
def test_the_ui_shows_the_sweep_by_name(tmp_path, data_dir, ray_local, monkeypatch):
    if ui.browser() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium); .ci/run installs it when it can")
    uri = mlflow_store(tmp_path)                      # the file make_store writes to, tables made
    with ThreadPoolExecutor(4) as pool:
        sweep = pool.submit(ui.make_store, tmp_path, f"runtime.address={shared_ray_address(ray_local, monkeypatch)}")
        with ui.serve(uri) as base:                   # the server starts while the sweep runs
            assert sweep.result() == uri
            urls = ui.pages(base, uri)        # four browsers at once: each mostly waits on the page's scripts
            runs, compare, child, parent = pool.map(ui.page_text, [urls[k] for k in ("runs", "compare", "child", "parent")])
    assert "Runs" in runs and "p_sgd_synthetic: privacy.epsilon=1,4" in runs and "3 matching runs" in runs
    assert "epsilon=1 · p_sgd eps=1 M=1000 synthetic t0" in compare and "epsilon=4 · p_sgd eps=4 M=1000 synthetic t0" in compare
    assert "final_test_error" in compare and "epsilon_spent_max" in compare
    assert "Parent run p_sgd_synthetic: privacy.epsilon=1,4" in child
    assert all(name in parent for name in ("sweep_table.csv", "sweep_table.md", "sweep_figure.png"))
