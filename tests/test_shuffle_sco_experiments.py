"""X2 and X3 (seed 000's experiments): every arm of both scripts plans at the scripts' smallest and
largest sizes, with the trust model, released output and shared B and T the READMEs describe."""

from __future__ import annotations

import importlib.util

import pytest

from fedray.compose import compose_plan
from tests.conftest import REPO


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / name / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


X2, X3 = _script("x2_optimization"), _script("x3_mnist_users")
TRUST = {"shuffle": "sdp", "local": "local", "central": "central", "none": "none"}


@pytest.mark.parametrize("arm", [a if i == 0 else pytest.param(a, marks=pytest.mark.slow) for i, a in enumerate(X2.ARMS)])  # fast tier: the first arm
def test_x2_arms_plan(arm):
    problem, overrides, output, interactive, kind = X2.ARMS[arm]
    for n in (X2.GD_NS if interactive else (X2.NS[0], X2.NS[-1])):
        plan = compose_plan(["experiment=x2_sphere", f"data.spec.num_silos={n}", *overrides])
        assert plan.privacy.trust_model == TRUST[kind]
        assert type(plan.loss).__name__ in ({"smooth": ("Squared",), "nonsmooth": ("Absolute", "MoreauEnvelope")}[problem])
        assert output in {"avg", "last"} and plan.privacy.delta.max() <= 1e-6


def test_x2_baselines_share_the_private_arms_b_and_t():
    plans = {arm: compose_plan(["experiment=x2_sphere", "data.spec.num_silos=100000", *X2.ARMS[arm][1]])
             for arm in ("P_SGD", "local SGD", "central SGD", "non-private SGD")}
    assert len({(p.protocol.algorithm.batch_size, p.num_rounds) for p in plans.values()}) == 1


@pytest.mark.parametrize("arm", list(X3.ARMS))
def test_x3_arms_plan(arm, data_dir):
    overrides, output, kind = X3.ARMS[arm]
    for eps in (X3.EPSILONS[0], X3.EPSILONS[-1]):
        plan = compose_plan(["experiment=x3_mnist_users", f"privacy.epsilon={eps}", *overrides])
        assert plan.privacy.trust_model == TRUST[kind] and plan.shape.num_silos == 8000
