"""User-level output perturbation: the solver's certificate, the noise, the sensitivity claim on
replace-one-user neighbours, and the planning refusals."""

import numpy as np
import pytest
from scipy.optimize import minimize

from fedray.core.objective import DataObjective
from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.protocols.user_level.planning import sensitivity
from fedray.protocols.user_level.solver import minimize_ridge
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

USERS = ["experiment=output_perturbation_synthetic", "data.spec.num_silos=300", "data.spec.samples_per_silo=8",
         "data.spec.dim=4", "+data.spec.noise=1.0", "progress=false"]


def _ridge_optimum(plan, regularization):
    """min over W of the mean over users of each user's mean logistic loss + lambda/2 ||W||^2."""
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y, n = fed.x_train, fed.y_train, fed.n_train
    mask = fed.train_mask() / n[:, None]

    def objective(w):
        z = x @ w
        loss = (np.logaddexp(0.0, z) - y * z) * mask
        residual = (1 / (1 + np.exp(-z)) - y) * mask
        grad = np.einsum("un,und->d", residual, x) / n.size
        return loss.sum() / n.size + 0.5 * regularization * w @ w, grad + regularization * w

    return minimize(objective, np.zeros(x.shape[2]), jac=True, method="L-BFGS-B",
                    options={"gtol": 1e-13, "ftol": 1e-15}).x


def test_release_is_the_certified_minimiser_plus_independent_gaussian_noise():
    plan = make_plan(compose(*USERS, "repetitions=200", "privacy.epsilon=2.0"))
    result = run(plan, inline=True)
    sigma = result.history[0]["noise_std"]
    assert np.all(sigma == sigma[0]) and sigma[0] > 0
    assert sigma[0] == pytest.approx(plan.protocol.resolved["noise_std_max"])
    optimum = _ridge_optimum(plan, 0.1)
    certified = result.history[0]["certificate_gradient_norm"][0]
    assert certified <= 1e-9
    released = result.outputs["released"][:, :, 0]                          # (P, d)
    noise = (released - optimum) / sigma[0]
    # ||W^ - W*|| <= tau / lambda = 1e-8: invisible next to noise of std 1 (in units of sigma)
    assert abs(noise.std() - 1.0) < 0.08 and abs(noise.mean()) < 0.08        # 800 draws: 4 s.e. bands
    assert np.unique(noise[:, 0]).size == noise.shape[0]                      # no two replicas share noise
    assert np.all(result.epsilon_spent == 2.0)


def test_a_replaced_user_moves_the_certified_minimiser_within_the_sensitivity():
    """Neighbours of n - 1 users: the first n - 1 users, and the same with user u replaced by the
    spare user n - 1 (weights 0/1 over the same shards), one record each. Every shift stays under
    2 G / (lambda (n - 1)) + 2 tau / lambda, and the largest reaches a fair part of it (a bound
    off by a factor would show)."""
    plan = make_plan(compose(*USERS, "privacy=none", "data.spec.num_silos=60", "data.spec.samples_per_silo=1",
                          "algorithm.regularization=1.0"))
    op = plan.protocol
    data = DataObjective(InlineGroups(plan, 2), op.objective, plan.shape.num_silos)
    n = plan.shape.num_silos
    solve = lambda w: minimize_ridge(data, (4, 1), op.regularization, op.objective.smoothness,
                                     op.gradient_tolerance, w).params
    base_weights = np.ones(n)
    base_weights[-1] = 0.0
    base = solve(base_weights)
    bound = sensitivity(op.objective.lipschitz, op.regularization, n - 1, op.gradient_tolerance)
    shifts = []
    for user in range(n - 1):
        weights = base_weights.copy()
        weights[user], weights[-1] = 0.0, 1.0
        shifts.append(np.linalg.norm(solve(weights) - base))
    assert max(shifts) <= bound
    assert max(shifts) > 0.2 * bound           # measured: 0.30 of the bound


def test_one_and_three_groups_find_the_same_bits():
    plan = make_plan(compose(*USERS, "repetitions=3"))
    one, three = (run(plan, inline=True, groups=InlineGroups(plan, k)) for k in (1, 3))
    assert np.array_equal(one.outputs["released"], three.outputs["released"])


@pytest.mark.parametrize("override, key", [
    ("participation=uniform", "participation"),
    ("num_rounds=3", "num_rounds"),
    ("data.loss._target_=fedray.losses.Squared", "data.loss"),
    ("privacy.calibration=paper", "privacy.epsilon"),          # eps = 1 is outside the classic range
    ("privacy.calibration=theory", "privacy.calibration"),
    ("algorithm.regularization=0", "algorithm.regularization"),
    ("+algorithm.step_size=0.1", "algorithm.step_size"),
])
def test_bad_settings_are_refused_at_planning(override, key):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, override))
    assert err.value.key == key
