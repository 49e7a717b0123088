"""Seed 003's experiment scripts cannot rot: E0 and E1 on reduced grids, checked for what their
READMEs claim (stability within Thm 3.6's bound and falling with m; every cell released, the
error at its predicted size, the exact mode below B1 at huge m and above it at m = 1)."""

from __future__ import annotations

import csv

import pytest

from tests.conftest import REPO, load_script

pytestmark = pytest.mark.slow
FOLDER = REPO / "experiments/user_level_output_perturbation"




def test_e0_on_a_reduced_grid(tmp_path, monkeypatch):
    e0 = load_script(FOLDER / "e0_stability/run.py")
    for name, value in {"HERE": tmp_path, "USERS": (250, 1000), "ITEMS": (4, 64), "DRAWS": 2, "MEAN_DIMS": (16,),
                        "RIDGES": (0.1,)}.items():
        monkeypatch.setattr(e0, name, value)
    e0.main()
    cells = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert len(cells) == 8 and all(float(c["within_bound"]) == 1.0 for c in cells)
    assert all(float(c["one_step_gap_max"]) < 1e-2 for c in cells)
    for problem in ("mean", "ridge_logistic"):
        mean_d1 = {(int(c["n"]), int(c["m"])): float(c["d1_mean"]) for c in cells if c["problem"] == problem}
        assert all(mean_d1[n, 64] < 0.5 * mean_d1[n, 4] for n in (250, 1000))       # the sqrt(m) gain
        assert all(mean_d1[1000, m] < 0.4 * mean_d1[250, m] for m in (4, 64))        # ~ 1 / n
    arranged = [c for c in cells if c["problem"] == "mean" and c["m"] == "64"]
    assert all(float(c["arranged_d1_mean"]) > 3 * float(c["d1_mean"]) for c in arranged)   # control (i)


def test_e1_on_a_reduced_grid(tmp_path, monkeypatch):
    e1 = load_script(FOLDER / "e1_mean_estimation/run.py")
    for name, value in {"HERE": tmp_path, "EPSILONS": (1.0,), "USERS": (1000,), "ITEMS": (1, 10**11),
                        "DIMS": (1,)}.items():
        monkeypatch.setattr(e1, name, value)
    e1.main()
    rows = {(r["arm"], int(r["m"])): r for r in csv.DictReader(open(tmp_path / "results.csv"))}
    assert len(rows) == 6 and all(float(r["release_rate"]) == 1.0 for r in rows.values())
    assert all(0.6 < float(r["error_mean"]) / float(r["predicted_error"]) < 1.6 for r in rows.values())
    assert float(rows["exact", 1]["error_mean"]) > 100 * float(rows["b1", 1]["error_mean"])
    assert float(rows["exact", 10**11]["error_mean"]) < 0.6 * float(rows["b1", 10**11]["error_mean"])
    assert float(rows["cert", 10**11]["error_mean"]) > float(rows["b1", 10**11]["error_mean"])
