"""Alg. 4 (boosting Alg. 3 to high probability): Thm 3.20's counts, the plan's parallel-composition
charge and its per-part checks, refusals, the range runner against the driver, the selection's
exponential mechanism, and the score's sensitivity on a worst-case neighbour."""

from __future__ import annotations

import numpy as np
import pytest

from fedray.core.protocol import RoundKeys
from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.protocols.mirror_descent.boosting import run_on_ranges, selection_probabilities, value_sums
from fedray.protocols.mirror_descent.calibration import boosting_counts, boosting_split
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

GAME = ["experiment=smd_max_loss", "data.spec.pool=2000", "data.spec.dim=16", "data.spec.tasks=4",
        "data.spec.num_samples=20000", "progress=false"]
BOOSTED = [*GAME, "algorithm=boosted_smd", "participation=all", "num_rounds=1",
           "algorithm.failure_probability=0.5", "privacy.epsilon=10", "repetitions=2"]


def test_thm_3_20_counts_and_the_split():
    assert boosting_counts(0.1) == (6, 9)          # ceil(log2 40), ceil(log2 480)
    assert boosting_counts(0.5) == (3, 6)          # ceil(log2 8), ceil(log2 48)
    assert boosting_split(1_000_000, 6, 9) == (250_000, 41_666, 4_629)


def test_the_plan_charges_one_parallel_release_and_every_part_fits_the_budget():
    plan = make_plan(compose(*BOOSTED))
    details = plan.privacy.details
    assert (details["runs"], details["checks"], details["alg3_part"], details["sco_part"]) == (3, 6, 1666, 277)
    for part in ("epsilon_alg3", "epsilon_frank_wolfe", "epsilon_selection"):
        assert 0 < details[part] <= 10.0
    assert details["epsilon_selection"] == 10.0 and "Frank-Wolfe" in details["deviation"]
    ledger = plan.privacy.ledger.fresh()
    ledger.record(np.ones((2, 1), dtype=np.int64))
    np.testing.assert_allclose(ledger.epsilons(), 10.0)


@pytest.mark.parametrize("override, key", [
    (["num_rounds=2"], "num_rounds"),
    (["participation=sequential"], "participation"),
    (["algorithm.failure_probability=1.5"], "algorithm.failure_probability"),
    (["privacy.epsilon=0.1"], "data.spec.num_samples"),
    (["data.spec.link=squared_hinge"], "data.spec.link"),
    (["privacy=none"], "privacy.trust_model"),
])
def test_what_alg4_cannot_run_is_refused(override, key):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*BOOSTED, *override))
    assert err.value.key == key


@pytest.mark.slow
def test_the_range_runner_reproduces_frank_wolfe_through_the_driver():
    plan = make_plan(compose(*GAME, "data.spec.tasks=1", "algorithm=frank_wolfe",
                             "participation=all", "repetitions=2", "privacy.epsilon=1.0"))
    algorithm = plan.protocol.algorithm
    driven = run(plan, inline=True, groups=InlineGroups(plan, 2)).outputs["output"][:, :algorithm.rows]
    spans = np.tile([0, plan.shape.num_silos], (2, 1))
    keys = RoundKeys(plan.seed, plan.repetitions, 0, plan.replicas.streams)
    state, released = run_on_ranges(InlineGroups(plan, 2), algorithm, algorithm.init(np.zeros((2, 1)), keys),
                                    lambda *_: spans, keys)
    np.testing.assert_allclose(state.theta, driven, rtol=0, atol=1e-12)
    assert released.tolist() == [plan.num_rounds] * 2          # one vertex per round and replica


def test_the_selection_is_the_exponential_mechanism_for_the_score_sensitivity():
    size, bound, eps = 5000, 1.3, 0.7
    sensitivity = 4 * bound / size
    scores = np.array([[0.0, sensitivity, 3 * sensitivity, 0.5]])
    probabilities = selection_probabilities(scores, eps, size, bound)[0]
    # One sensitivity more score costs exactly a factor exp(-eps / 2): neighbours' laws differ by at most e^eps.
    assert probabilities[0] / probabilities[1] == pytest.approx(np.exp(eps / 2), rel=1e-12)
    assert probabilities[0] / probabilities[2] == pytest.approx(np.exp(3 * eps / 2), rel=1e-12)
    assert np.log(probabilities[3] / probabilities[0]) == pytest.approx(-eps * 0.5 / (2 * sensitivity), rel=1e-9)
    assert probabilities.sum() == pytest.approx(1.0)


def test_one_replaced_sample_of_s4_moves_every_score_by_at_most_4_bf_over_s4():
    plan = make_plan(compose(*BOOSTED))
    program = plan.protocol.build(None)
    quarter = program.sizes[0]
    rng = np.random.default_rng(3)
    runs, checks = program.runs, program.checks
    x = rng.dirichlet(np.ones(program.rows), size=(1, runs))
    y = rng.dirichlet(np.ones(program.columns), size=(1, runs))
    x_checks = rng.dirichlet(np.ones(program.rows), size=(1, runs, checks))
    y_checks = rng.dirichlet(np.ones(program.columns), size=(1, runs, checks))
    groups = InlineGroups(plan, 2)
    base = program.scores(groups, x, y, x_checks, y_checks)
    victim = 3 * quarter + 17                           # a sample of S4, in the second group
    holder = groups.groups[1]
    largest = 0.0
    for sign in (1.0, -1.0):
        # Worst cases for the logistic loss: a record whose margins are all -1 or all +1 at x = e_0.
        a = np.full(program.rows, sign)
        b = np.full(program.columns, 1.0)
        holder._fed = holder._fed.replace(victim, a, b)
        moved = program.scores(groups, x, y, x_checks, y_checks)
        largest = max(largest, float(np.abs(moved - base).max()))
    assert 0 < largest <= 4 * program.value_bound / quarter
    assert value_sums(holder._fed, 0, 1, x[0], program.columns) is None   # no sample of [0, 1) here


@pytest.mark.slow
def test_alg4_runs_end_to_end_and_releases_one_of_its_candidates(ray_local):
    plan = make_plan(compose(*BOOSTED))
    result = run(plan)
    chosen = result.history[-1]["chosen_run"].astype(int)
    assert result.outputs["output"].shape == (2, 16 + 4)
    np.testing.assert_allclose(result.outputs["output"][:, :16].sum(axis=1), 1.0)
    assert set(chosen) <= {0, 1, 2} and np.all(result.final["gap"] >= -1e-9)
    np.testing.assert_allclose(result.epsilon_spent, 10.0)
    assert "score_chosen" in result.diagnostics and "chosen_run" not in result.diagnostics
    again = run(plan, inline=True, groups=InlineGroups(plan, 3))
    np.testing.assert_allclose(again.outputs["output"], result.outputs["output"], rtol=0, atol=1e-9)


def test_the_alg3_draws_are_counted_per_replica_from_the_public_levels():
    plan = make_plan(compose(*BOOSTED, "repetitions=3"))
    program = plan.protocol.build(None)
    _, _, released = program.candidates(InlineGroups(plan, 2), RoundKeys(plan.seed, plan.repetitions, 0,
                                                                          plan.replicas.streams))
    assert released.shape == (3,) and len(set(released.tolist())) > 1      # each replica its own levels
    for p, rep in enumerate(plan.replicas.repetitions):
        expected = 0
        for i in range(program.runs):
            levels, _ = program.ssp_sampler.schedule(plan.seed, int(rep) * program.runs + i)
            steps = min(levels.size, int(program.ssp_sampler.stop))
            expected += int((2 * (2 ** (levels[:steps] + 1) + 1)).sum())
        assert released[p] == expected
