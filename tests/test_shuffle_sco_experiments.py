"""X2 and X3 (seed 000's experiments): every arm of both scripts plans at the scripts' smallest and
largest sizes, with the trust model, released output and shared B and T the READMEs describe."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from fedray.compose import compose_plan
from fedray.plan import make_plan
from tests.conftest import REPO, compose


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / name / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


X2, X3 = _script("x2_optimization"), _script("x3_mnist_users")
TRUST = {"shuffle": "sdp", "local": "local", "central": "central", "none": "none"}


@pytest.mark.slow
@pytest.mark.parametrize("arm", list(X2.ARMS))
def test_x2_arms_plan(arm):
    problem, overrides, output, interactive, kind = X2.ARMS[arm]
    for n in (X2.GD_NS if interactive else (X2.NS[0], X2.NS[-1])):
        plan = compose_plan(["experiment=x2_sphere", f"data.spec.num_silos={n}", *overrides])
        assert plan.privacy.trust_model == TRUST[kind]
        assert type(plan.loss).__name__ in ({"smooth": ("Squared",), "nonsmooth": ("Absolute", "MoreauEnvelope")}[problem])
        assert output in {"avg", "last"} and plan.privacy.delta.max() <= 1e-6


def test_x2_baselines_share_the_private_arms_b_and_t():
    plans = {arm: make_plan(compose("experiment=x2_sphere", "data.spec.num_silos=100000", *X2.ARMS[arm][1]))
             for arm in ("P_SGD", "local SGD", "central SGD", "non-private SGD")}
    assert len({(p.protocol.algorithm.batch_size, p.num_rounds) for p in plans.values()}) == 1


@pytest.mark.slow
@pytest.mark.parametrize("arm", list(X3.ARMS))
def test_x3_arms_plan(arm, data_dir):
    overrides, output, kind = X3.ARMS[arm]
    for eps in (X3.EPSILONS[0], X3.EPSILONS[-1]):
        plan = compose_plan(["experiment=x3_mnist_users", f"privacy.epsilon={eps}", *overrides])
        assert plan.privacy.trust_model == TRUST[kind] and plan.shape.num_silos == 8000


def test_tight_twins_differ_from_their_paper_arm_only_in_the_calibration():
    for script, overrides_at in ((X2, 1), (X3, 0)):
        twins = [arm for arm in script.ARMS if arm.endswith(script.TIGHT)]
        assert twins and all(arm.removesuffix(script.TIGHT) not in script.NO_TIGHT_TWIN for arm in twins)
        for arm in twins:
            paper, tight = script.ARMS[arm.removesuffix(script.TIGHT)], script.ARMS[arm]
            assert tight[overrides_at] == paper[overrides_at] + ["privacy.calibration=tight"]
            assert tight[:overrides_at] + tight[overrides_at + 1:] == paper[:overrides_at] + paper[overrides_at + 1:]


def test_x2_kept_rows_leave_every_other_cell_as_written(tmp_path):
    # arrange: two arms, two cells each, with replicas for every cell
    lines = ["arm,n,eps,excess_mean", "P_SGD,1000,1.0,0.1", "P_SGD tight,1000,1.0,0.2",
             "P_SGD,10000,1.0,0.30000000000000004", "P_SGD tight,10000,1.0,0.4"]
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "slopes.csv").write_text("arm,eps,slope\nP_SGD,1.0,-0.5\nP_SGD tight,1.0,-0.1\n")
    np.savez(tmp_path / "excess.npz", **{X2._cell(*line.split(",")[:3]): np.full(3, float(line.split(",")[3]))
                                         for line in lines[1:]})
    # act: re-run one cell of the tight arm
    rows, slopes, samples = X2._kept(tmp_path, {X2._cell("P_SGD tight", 10000, 1.0)})
    # assert: the other three cells' rows verbatim, the untouched arm's slope, their replicas
    assert [",".join(r.values()) for r in rows] == [lines[1], lines[2], lines[3]]
    assert slopes == [{"arm": "P_SGD", "eps": "1.0", "slope": "-0.5"}]
    assert sorted(samples) == ["P_SGD tight|1000|1", "P_SGD|10000|1", "P_SGD|1000|1"]


def test_x3_kept_rows_leave_every_other_cell_as_written(tmp_path):
    lines = ["arm,eps,test_error_mean", "P_SGD,0.5,0.5331000000000001", "P_SGD tight,0.5,0.3", "P_SGD tight,1.0,0.2"]
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    np.savez(tmp_path / "errors.npz", **{"P_SGD tight|1": np.zeros(2), "P_SGD|0.5": np.ones(2)})
    rows, errors = X3._kept(tmp_path, {"P_SGD tight|1"})
    assert [",".join(r.values()) for r in rows] == lines[1:3]
    assert list(errors) == ["P_SGD|0.5"]
    assert X3._kept(tmp_path / "nothing", {"P_SGD tight|1"}) == ([], {})
