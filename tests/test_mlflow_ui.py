"""The MLflow UI as a user meets it, in headless Chromium (``docs/mlflow_ui.py`` makes the same
store and pages, and the committed screenshots): the runs table in the model-training view shows
the sweep's parent run, the children compare by their descriptive names, a child names its parent,
and the parent holds the sweep's comparison table and figure."""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location("mlflow_ui", REPO / "docs" / "mlflow_ui.py")
ui = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ui)


@pytest.mark.long
def test_the_ui_shows_the_sweep_by_name(tmp_path, data_dir):
    if ui.browser() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium); .ci/run installs it when it can")
    uri = ui.make_store(tmp_path)
    with ui.serve(uri) as base, ThreadPoolExecutor(4) as pool:
        urls = ui.pages(base, uri)            # four browsers at once: each mostly waits on the page's scripts
        runs, compare, child, parent = pool.map(ui.page_text, [urls[k] for k in ("runs", "compare", "child", "parent")])
    assert "Runs" in runs and "p_sgd_synthetic: privacy.epsilon=1,4" in runs and "3 matching runs" in runs
    assert "epsilon=1 · p_sgd eps=1 M=1000 synthetic t0" in compare and "epsilon=4 · p_sgd eps=4 M=1000 synthetic t0" in compare
    assert "final_test_error" in compare and "epsilon_spent_max" in compare
    assert "Parent run p_sgd_synthetic: privacy.epsilon=1,4" in child
    assert all(name in parent for name in ("sweep_table.csv", "sweep_table.md", "sweep_figure.png"))
