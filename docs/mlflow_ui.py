"""Screenshots of the MLflow UI on a small fedray sweep, taken by headless Chromium; the same pages
are what ``tests/test_mlflow_ui.py`` checks.

    python docs/mlflow_ui.py          # writes docs/mlflow_ui_runs.png, _compare.png, _parent.png (about 1 min)

It runs a two-job sweep (P_SGD at eps = 1 and 4) into a fresh SQLite store, serves it with
``mlflow ui`` and loads three pages in Chromium (Debian's ``chromium``): the runs table (the parent
run ``p_sgd_synthetic: privacy.epsilon=1,4`` with its children folded under it), the comparison of the two children (their names,
parameters and metrics), and the parent's artifacts (the sweep's table and figure, the figure open). MLflow 3 opens
on its GenAI views unless the URL asks for ``workflowType=machine_learning``; fedray prints such
URLs at the end of every run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SWEEP = ["experiment=p_sgd_synthetic", "data.spec.num_silos=5000", "num_rounds=5", "progress=false",
         "privacy.epsilon=1,4", "runtime.num_cpus=2"]
ML = "workflowType=machine_learning"


def browser() -> str | None:
    """The Chromium executable, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def make_store(folder: Path, *overrides: str) -> str:
    """Run the sweep into ``folder`` (with ``overrides`` added, e.g. a ``runtime.address`` to join);
    returns the store's URI."""
    uri = f"sqlite:///{folder}/mlflow.db"
    subprocess.run([sys.executable, "-m", "fedray", "-m", *SWEEP, f"tracking.uri={uri}",
                    f"tracking.artifact_location={folder}/artifacts", f"hydra.sweep.dir={folder}/multirun", *overrides],
                   cwd=REPO, check=True, capture_output=True, text=True, timeout=600)
    return uri


@contextmanager
def serve(uri: str, wait: bool = True):
    """``mlflow ui`` on ``uri`` at a free local port; yields its base URL once it answers (at once
    with ``wait=False``: the caller waits, with ``answers``, while it does something else)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # MLflow's GenAI job runner (scoring, trace archival) is not used here and costs ~20 s of start-up CPU.
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1",
                               "--port", str(port), "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    base = f"http://127.0.0.1:{port}"
    try:
        if wait:
            answers(base, server)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)


def answers(base: str, server: subprocess.Popen | None = None, timeout: float = 600) -> None:
    """Return once the server at ``base`` answers; raise if it has not within ``timeout`` seconds
    (a loaded machine: its start took over 3 minutes) or ``server`` has exited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(base, timeout=5)
            return
        except OSError:
            if time.monotonic() > deadline or (server is not None and server.poll() is not None):
                raise RuntimeError(f"mlflow ui did not answer at {base}") from None
            time.sleep(0.2)


def pages(base: str, uri: str) -> dict[str, str]:
    """The URLs of the three pages: runs table, the children compared, the parent's artifacts."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("fedray").experiment_id
    runs = client.search_runs([experiment])
    parent = next(r.info.run_id for r in runs if r.data.tags.get("sweep") == "parent")
    children = [r.info.run_id for r in runs if r.data.tags.get("mlflow.parentRunId") == parent]
    quote = urllib.parse.quote
    return {
        "runs": f"{base}/#/experiments/{experiment}/runs?{ML}",
        "compare": f"{base}/#/compare-runs?runs={quote(json.dumps(children))}&experiments={quote(json.dumps([experiment]))}&{ML}",
        "parent": f"{base}/#/experiments/{experiment}/runs/{parent}/artifacts/sweep_figure.png?{ML}",
        "child": f"{base}/#/experiments/{experiment}/runs/{children[0]}?{ML}",
    }


def _chromium(*args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                              f"--user-data-dir={profile}", "--virtual-time-budget=25000", "--window-size=1500,950",
                              *args], capture_output=True, text=True, timeout=180)
    return out.stdout


def page_text(url: str) -> str:
    """The rendered page's visible text (scripts run, styles dropped)."""
    html = _chromium("--dump-dom", url)
    html = re.sub(r"<(style|script)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def screenshot(url: str, path: Path) -> None:
    _chromium(f"--screenshot={path}", url)


def main() -> None:
    if browser() is None:
        sys.exit("chromium is not installed (Debian: apt-get install chromium)")
    os.environ.setdefault("FEDRAY_DATA_DIR", str(REPO.parent / "shared" / "datasets"))
    with tempfile.TemporaryDirectory() as tmp:
        uri = make_store(Path(tmp))
        with serve(uri) as base:
            for name, url in pages(base, uri).items():
                if name != "child":
                    screenshot(url, HERE / f"mlflow_ui_{name}.png")
                    print(f"{name}: {url} -> docs/mlflow_ui_{name}.png")


if __name__ == "__main__":
    main()
