"""Phased-ERM / Phased-SCO (seed-003 Alg. 3 and 4, spec §6 T2, T11, T12, T15): the phase counts
and per-phase constants, lambda_i = lambda 4^i and the balanced lambda's closed form, the ledger
(basic composition over ERM's phases, disjoint batches for SCO), the diagnostic's statement, the
float64 settling rule, refusals."""

import math

import numpy as np
import pytest

from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.protocols.user_level.phased_output_pert import settled
from fedray.protocols.user_level.phased_output_pert_planning import certificate_constant
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

# 2,000 users of one record: T = 11 phases at eps / 11, each needing 4 kappa + 2 = 1,346 users (N0 2,690)
SMALL = ["experiment=phased_erm_synthetic", "data.spec.num_silos=2000", "data.spec.samples_per_silo=1",
         "data.spec.dim=3", "algorithm.allow_few_users=true", "progress=false"]


def test_worked_phase_constants():
    # T2: eps = 1, delta = 1e-5, n = 1e4, m = 100 -> T = 20 phases, per-phase kappa = 626, N0 = 5010
    plan = make_plan(compose("experiment=phased_erm_synthetic", "data.spec.samples_per_silo=100"))
    program = plan.protocol.build(None)
    assert len(program.phases) == 20 and plan.protocol.resolved["min_users"] == 5010
    assert {phase.mechanisms[0].kappa for phase in program.phases} == {626}
    lam = plan.protocol.resolved["regularization"]
    assert [p.regularization for p in program.phases] == pytest.approx([lam * 4.0**i for i in range(1, 21)])


def test_balanced_regularization_has_the_closed_form_for_erm():
    # B(lambda) = 2 lambda R^2 + Q / lambda, Q = (8/3)(1 - 4^{1-T}) c'^2 G^2 d / (n^2 m) + 2 c' G^2 sqrt(d) / (4^T n sqrt(m))
    plan = make_plan(compose(*SMALL, "algorithm.regularization=balanced"))
    resolved = plan.protocol.resolved
    n, m, d, big_t, g, r = 2000, 1, 3, resolved["phases"], 1.0, 10.0
    c = certificate_constant(1.0 / big_t, 1e-5 / big_t, resolved["beta"] / big_t, 2 * g, n, m)
    q = 8 / 3 * (1 - 4.0 ** (1 - big_t)) * c**2 * g**2 * d / (n**2 * m) + 2 * c * g**2 * math.sqrt(d) / (4**big_t * n * math.sqrt(m))
    assert big_t == math.ceil(math.log2(n * m))
    assert resolved["regularization"] == pytest.approx(math.sqrt(q / (2 * r**2)), rel=1e-6)
    assert resolved["oracle_bound"] == pytest.approx(2 * math.sqrt(2) * r * math.sqrt(q), rel=1e-6)
    paper = make_plan(compose(*SMALL, "algorithm.regularization=paper")).protocol.resolved["regularization"]
    assert paper == pytest.approx(g * math.sqrt(d) / (r * n * math.sqrt(m)))


def test_erm_charges_every_user_each_phase_at_eps_over_t():
    plan = make_plan(compose(*SMALL, "repetitions=2"))
    phases = plan.protocol.resolved["phases"]
    result = run(plan, inline=True, groups=InlineGroups(plan, 3))
    assert np.allclose(result.epsilon_spent, 1.0)          # T charges of eps / T each (basic composition)
    assert plan.privacy.planned_epsilon.max() == pytest.approx(1.0)
    history = result.history[-1]
    assert np.all(history["phases_without_release"] + history["phases_settled"] <= phases)
    assert np.all(np.linalg.norm(result.model[:, :, 0], axis=1) <= 5.0 + 1e-12)


def test_sco_uses_disjoint_halving_batches_and_charges_each_user_at_most_once():
    plan = make_plan(compose(*SMALL, "algorithm.variant=sco", "data.spec.num_silos=1000", "data.spec.samples_per_silo=4",
                             "algorithm.allow_few_users=false"))
    program = plan.protocol.build(None)
    assert len(program.phases) == math.floor(math.log2(1000 / 226)) == 2
    assert [list(p.users[[0, -1]]) for p in program.phases] == [[500, 999], [250, 499]]
    result = run(plan, inline=True)
    assert np.allclose(result.epsilon_spent[0, 250:], 1.0) and np.all(result.epsilon_spent[0, :250] == 0.0)


def test_a_diagnostic_noise_scale_is_planned_as_not_private():
    plan = make_plan(compose(*SMALL, "algorithm.noise_scale=1e-6"))
    statement = plan.privacy.statement()
    assert statement["trust_model"] == "none" and "guarantee" in statement
    assert "not DP" in plan.privacy.details["diagnostic"]
    private = make_plan(compose(*SMALL)).protocol.resolved["regularization"]
    assert plan.protocol.resolved["regularization"] == pytest.approx(1e-6 * private, rel=1e-6)   # balanced for s sigma
    assert any("whether each release happened" in t for t in make_plan(compose(*SMALL)).privacy.non_private_inputs)


def test_float64_settles_a_phase_only_when_the_regularizer_outruns_its_resolution():
    assert settled(np.array([1.0, -0.5]), 1e18, 0.08) and not settled(np.array([1.0, -0.5]), 1e10, 0.08)
    assert not settled(np.zeros(3), 1e30, 1e-12)              # at 0 the spacing is the smallest subnormal


@pytest.mark.parametrize("override, key", [
    ("algorithm.allow_few_users=false", "data.spec.num_silos"),     # each phase needs N0 = 2,690 users
    ("data.spec.num_silos=1300", "data.spec.num_silos"),            # below 4 kappa + 2 = 1,346: refused whatever
    ("algorithm.variant=sgd", "algorithm.variant"),
    ("privacy.epsilon=2", "privacy.epsilon"),
    ("algorithm.regularization=tuned", "algorithm.regularization"),
    ("algorithm.noise_scale=1.5", "algorithm.noise_scale"),
])
def test_bad_settings_are_refused_at_planning(override, key):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*SMALL, override))
    assert err.value.key == key


def test_a_noise_scale_without_a_budget_is_refused():
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*SMALL, "privacy=none", "algorithm.noise_scale=0.5"))
    assert err.value.key == "algorithm.noise_scale"


def test_without_noise_the_phases_reach_the_erm():
    """T12: with every sigma_i scaled towards 0 (the non-private diagnostic) the localization ends
    at theta*(x); each phase's minimiser stays within G / lambda_i of its centre."""
    from scipy.special import expit

    plan = make_plan(compose(*SMALL, "algorithm.noise_scale=1e-12", "data.spec.noise=1.0"))
    result = run(plan, inline=True)
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train.reshape(-1, 3), fed.y_train.reshape(-1)
    theta = np.zeros(3)
    for _ in range(50):
        p = expit(x @ theta)
        theta -= np.linalg.solve((x * (p * (1 - p))[:, None]).T @ x / len(y), x.T @ (p - y) / len(y))
    def risk(w):
        z = x @ w
        return np.mean(np.logaddexp(0.0, z) - y * z)

    assert np.linalg.norm(result.model[0, :, 0] - theta) < 1e-2 * np.linalg.norm(theta)
    assert risk(result.model[0, :, 0]) - risk(theta) < 1e-5 < risk(np.zeros(3)) - risk(theta)
