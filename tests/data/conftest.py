"""Fixtures for the data tests: an isolated cache, and the offline copies of the real data sets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The offline copies sit next to the repository (../shared/datasets); FEDRAY_DATA_DIR, if set
# when pytest starts, wins.
_CANDIDATES = [
    os.environ.get("FEDRAY_DATA_DIR"),
    str(Path(__file__).resolve().parents[3] / "shared" / "datasets"),
]
SHARED_DATA = next((Path(c) for c in _CANDIDATES if c and (Path(c) / "insurance.csv").is_file()), None)


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    """No test reads a user's FEDRAY_DATA_DIR or writes to ~/.cache."""
    monkeypatch.delenv("FEDRAY_DATA_DIR", raising=False)
    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The folder of offline copies (skip the test if this machine has none)."""
    if SHARED_DATA is None:
        pytest.skip("no offline data sets; set FEDRAY_DATA_DIR to a folder with copies")
    return SHARED_DATA


@pytest.fixture
def shared_data(shared_data_dir, monkeypatch) -> Path:
    """Point FEDRAY_DATA_DIR at the offline copies for one test."""
    monkeypatch.setenv("FEDRAY_DATA_DIR", str(shared_data_dir))
    return shared_data_dir
