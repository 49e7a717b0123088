"""E1 and E6 (seed 001's experiments): every E1 cell plans at the script's full sizes, and E6's
quick run writes its table with every ratio within its bound."""

from __future__ import annotations

import csv
import importlib.util
import sys

import numpy as np
import pytest

from fedray.compose import compose_plan
from fedray.plan import make_plan
from tests.conftest import REPO, compose


def _script(name: str, script: str = "run.py"):
    spec = importlib.util.spec_from_file_location(f"{name}/{script}".replace("/", "_").removesuffix(".py"),
                                                  REPO / "experiments" / name / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


E1, E6 = _script("mirror_descent/e1_bilinear"), _script("mirror_descent/e6_audit")
TRUST = {"vertex": "central", "vertex_bound": "central", "vertex_tight": "central", "gaussian": "central",
         "non_private": "none"}


@pytest.mark.slow
@pytest.mark.parametrize("quick", [True, False])
def test_e1_cells_plan_with_their_arms_privacy(quick):
    for cell in E1.cells(quick):
        plan = compose_plan(E1.overrides(cell, 2))
        assert plan.privacy.trust_model == TRUST[cell["arm"]]
        assert plan.num_rounds * plan.sampler.batch_size <= cell["n"]
        if cell["arm"] != "non_private":
            assert plan.privacy.target_epsilon.max() == cell["eps"]
        if cell["K"] != 1:
            assert plan.protocol.algorithm.vertices.draws == cell["K"]
        assert (plan.privacy.calibration == "tight") == (cell["arm"] == "vertex_tight")


@pytest.mark.slow
def test_e6_quick_run_stays_within_every_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["run.py", "--quick", "--out", str(tmp_path)])
    E6.main()
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert len(rows) == 8 and (tmp_path / "figure.png").exists()
    for row in rows:
        assert float(row["score_gap_over_bound_max"]) <= 1 + 1e-9
        assert float(row["draw_loss_over_bound_max"]) <= 1 + 1e-9
        assert float(row["composed_realised_max"]) <= float(row["composed_planned"]) <= float(row["target_eps"])


E5 = _script("mirror_descent/e5_sco")


@pytest.mark.parametrize("arm", list(E5.ARMS))
def test_e5_arms_plan_as_the_readme_describes(arm):
    plan = make_plan(compose(*E5.overrides(arm, 100_000, 64, 2)))
    assert plan.dataset.tasks == 1 and plan.dataset.pool == 10_000
    assert plan.privacy.trust_model == ("none" if arm == "non_private_smd" else "central")
    if arm != "non_private_smd":
        assert plan.privacy.target_epsilon.max() == 1.0 and plan.privacy.delta.max() == E5.DELTA


E3 = _script("mirror_descent/e3_max_loss")


@pytest.mark.parametrize("arm", list(E3.ARMS))
@pytest.mark.parametrize("epsilon", [1.0, 10.0])
def test_e3_arms_plan_as_the_readme_describes(arm, epsilon):
    plan = make_plan(compose(*E3.overrides(arm, 1_000_000, epsilon, 64, 2)))
    spec = plan.dataset
    assert (spec.tasks, spec.pool, spec.sparsity, spec.shared_support) == (8, 10_000, 1, True)
    np.testing.assert_allclose(spec.flip_probabilities, 0.3 * np.arange(8) / 7)
    assert plan.privacy.trust_model == ("none" if arm == "non_private_smd" else "central")
    if arm != "non_private_smd":
        assert plan.privacy.target_epsilon.max() == epsilon
    assert type(plan.protocol.algorithm).__name__ == ("BiasReducedSMD" if arm.startswith("alg3") else "PrivateSMD")


E3_BOOSTED = _script("mirror_descent/e3_max_loss", "boosted.py")


@pytest.mark.parametrize("n, epsilon", E3_BOOSTED.CELLS)
def test_e3_alg4_cells_plan_as_the_readme_describes(n, epsilon):
    base = E3.overrides("alg3_bias_reduced", n, epsilon, 64, 2)
    plan = make_plan(compose(*[o for o in base if o not in E3.ARMS["alg3_bias_reduced"]], *E3_BOOSTED.BOOSTED))
    assert type(plan.protocol.program).__name__ == "Boosting"
    assert (plan.privacy.details["runs"], plan.privacy.details["checks"]) == (6, 9)
    assert plan.privacy.target_epsilon.max() == epsilon
