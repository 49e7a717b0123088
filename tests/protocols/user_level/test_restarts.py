"""Seed 002's Remark 3.6: Alg. 3 restarted for a strongly convex risk (FKT20 Sec. 5.1's
reduction): the distance bounds by hand, the fewest runs, disjoint users charged once each
(parallel composition across runs and phases), and the restarts' accuracy on P1."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.protocols.user_level.phased_parameters import Problem, restarts
from fedray.runtime.driver import run
from tests.conftest import compose

SMALL = ["experiment=user_level_sphere", "data.spec.num_silos=1000", "data.spec.samples_per_silo=16",
         "data.spec.dim=5", "repetitions=2", "progress=false"]
QUIET = ["algorithm.profile=exploratory", "algorithm.kappa=1e-5", "privacy.epsilon=100", "privacy.delta=1e-7"]
STRONG = "algorithm.strong_convexity=0.2"        # P1 at d = 5: F(x) - F* = ||x - w*||^2 / (2 d)


def test_the_distance_bounds_follow_the_square_root_recursion_by_hand():
    # n = 8,000 users of m = 64, d = 10, eps = 1, L = 2, R = 2, mu = 0.1. With k = 4 runs of 2,000 users:
    # rho = 1 / sqrt(2000 * 64) + sqrt(10) / (2000 * 8) = 0.0027951 + 0.00019764 = 0.0029927,
    # D* = 2 L rho / mu = 0.11971; D_2 = sqrt(2 * 0.11971) = 0.48930, D_3 = sqrt(0.48930 * 0.11971)
    # = 0.24202, D_4 = sqrt(0.24202 * 0.11971) = 0.17021 <= 2 D* = 0.23942.
    # With k = 3 (2,666 users): rho = 0.0025692, D* = 0.10277, D_3 = 0.21585 > 0.20554: too few.
    runs, fixed_point = restarts(Problem(8000, 64, 10, 1.0, 1e-6, lipschitz=2.0, diameter=2.0), 0.1)
    assert fixed_point == pytest.approx(0.11971, rel=1e-4)
    assert [p.users for p in runs] == [2000] * 4
    assert [p.diameter for p in runs] == pytest.approx([2.0, 0.48930, 0.24202, 0.17021], rel=1e-4)
    assert all((p.epsilon, p.items, p.dim) == (1.0, 64, 10) for p in runs)


def test_a_weak_mu_needs_one_run_and_a_strong_one_stops_at_the_cap_or_the_smallest_run():
    problem = Problem(8000, 64, 10, 1.0, 1e-6, lipschitz=2.0, diameter=2.0)
    assert restarts(problem, 1e-3)[0] == (problem,)           # R <= 2 D* = 4 L rho / mu: Alg. 3 as it is
    strong, fixed_point = restarts(problem, 1e6, most=3)
    assert len(strong) == 3 and strong[0].users == 2666 and strong[-1].diameter > 2 * fixed_point
    assert all(b < a for a, b in zip([p.diameter for p in strong], [p.diameter for p in strong][1:]))
    # 60 users: a fourth run of 15 would leave its last phase empty (0.94 users), so k stops at 3 of 20
    few, _ = restarts(dataclasses.replace(problem, users=60), 1e6)
    assert all(np.floor(p.phase_users()).min() >= 1 for p in few) and [p.users for p in few] == [20, 20, 20]


def test_restarts_charge_every_user_of_every_run_once_and_count_their_gradients():
    plan = make_plan(compose(*SMALL, *QUIET, STRONG))
    resolved = plan.protocol.resolved
    assert resolved["runs"] > 1 and sum(resolved["run_phases"]) == resolved["phases"]
    assert resolved["run_users"] == 1000 // resolved["runs"]
    # each run's phases take at most its n / k users: the runs are disjoint
    bounds = np.cumsum([0, *resolved["run_phases"]])
    assert all(sum(resolved["phase_users"][a:b]) <= resolved["run_users"] for a, b in zip(bounds, bounds[1:]))
    result = run(plan, inline=True)
    assert not result.history[-1]["halted"].any()
    members = plan.sampler.members(plan.seed, 1000)
    assert np.bincount(members[members >= 0]).tolist() == resolved["phase_users"]
    assert np.all(result.epsilon_spent[:, members >= 0] == 100.0) and np.all(result.epsilon_spent[:, members < 0] == 0)
    expected = sum(t * k for t, k in zip(resolved["phase_steps"], resolved["phase_batch"])) * 16
    assert np.all(result.history[-1]["gradient_evaluations"] == expected)
    # a later run's phases test with its own n_j: tau = L ln(n_j d m) / sqrt(m)
    assert resolved["phase_thresholds"][-1] == pytest.approx(2.0 * math.log(resolved["run_users"] * 5 * 16) / 4)


def test_without_noise_the_restarts_beat_one_run_of_alg3_on_p1():
    plain, strong = make_plan(compose(*SMALL, "privacy=none")), make_plan(compose(*SMALL, "privacy=none", STRONG))
    w_star = plain.dataset.optimum(plain.seed, plain.trial)
    excess = [((run(p, inline=True).model[:, :, 0] - w_star) ** 2).sum(axis=1) / 10 for p in (plain, strong)]
    assert np.all(excess[1] < excess[0]) and strong.protocol.resolved["gradients_no_halt"] < \
        plain.protocol.resolved["gradients_no_halt"]


def test_the_plan_names_the_restarts_and_a_target_out_of_reach():
    plan = make_plan(compose(*SMALL, *QUIET, STRONG))
    assert plan.protocol.resolved["restart_target_reached"]
    assert "restarts" in plan.privacy.details
    note = plan.protocol.resolved["notes"][-1]
    assert note.startswith("Remark 3.6") and "D_k > 2 D*" not in note
    # 30 users: two runs of 15 would leave a phase empty, so one run from D_1 = 2 > 2 D* = 0.37
    tight = make_plan(compose(*SMALL, *QUIET, "algorithm.strong_convexity=1.0", "data.spec.num_silos=30"))
    assert not tight.protocol.resolved["restart_target_reached"]
    assert "D_k > 2 D*" in tight.protocol.resolved["notes"][-1]


@pytest.mark.parametrize("override, key", [
    (["algorithm.strong_convexity=-1"], "algorithm.strong_convexity"),
    (["algorithm.strong_convexity=1.5"], "algorithm.strong_convexity"),   # above smoothness 1 (P1)
    (["algorithm.strong_convexity=abc"], "algorithm.strong_convexity"),
    (["algorithm.strong_convexity=0.2", "algorithm.smoothing=true"], "algorithm.strong_convexity"),
])
def test_bad_strong_convexity_is_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*SMALL, *override))
    assert err.value.key == key
