"""A calibrated Gaussian step (``CalibratedGaussianNoise``) is what the formula-priced central
protocols add and what their ledgers price (``CertifiedReleases``): the ledger reads the step's
guarantee, which is the target to the bit for the std the formula set and the formula's own
epsilon for any other std (an independent route: dp-accounting's PLD of the same Gaussian), so a
ledger handed half the noise prices more and ``fedray.testing`` measures the noise it prices.
Protocols here: seed 001's Gaussian-noise SMD baseline (``gaussian_smd``); seed 003's user-level
output perturbation (``output_perturbation``, B0/B1: the solver's output noise) and SCOutputPert
(``sc_output_pert``: DelOutputPert's Gaussian after its TDLap budget) and Phased-ERM
(``phased_output_pert``: one slot per release); seed 002's Alg. 1
(``phased_sgd``) and Alg. 3's family (``accelerated_phased_erm``, ``filtered_gd``, ``filtered_acsa``:
``OutlierRemovalStep``), whose per-phase claims are theorems' (``PhaseGaussianNoise``: covered or not)."""

from dataclasses import replace

import dp_accounting
import numpy as np
import pytest

from fedray.core.mechanism import Mechanism, Placement
from fedray.plan import make_plan
from fedray.privacy.composition import ApproxDpComposition, ParallelComposition
from fedray.privacy.gaussian import analytic_sigma, classic_sigma, gaussian_delta
from fedray.privacy.ledger import CertifiedReleases, ComposedAccountant
from fedray.privacy.mechanisms import CalibratedGaussianNoise
from fedray.runtime.driver import run
from fedray.testing import ProtocolCase, noise_matches_ledger
from tests.conftest import compose


def test_the_step_adds_its_std_and_prices_its_target_to_the_bit():
    sigma = analytic_sigma(0.7, 1e-6, 0.25)
    noise = CalibratedGaussianNoise(sigma, 0.25, 0.7, 1e-6, analytic_sigma)
    assert isinstance(noise, Mechanism) and noise.placement is Placement.SERVER
    assert noise.guarantee() == (0.7, 1e-6)
    normals = np.random.default_rng(3).standard_normal((2, 5))
    x = np.arange(10.0).reshape(2, 5)
    noisy, metrics = noise.apply(x, normals)
    np.testing.assert_array_equal(noisy, x + sigma * normals)
    np.testing.assert_array_equal(metrics["noise_std"], [sigma, sigma])
    report = noise.round_metrics(np.zeros((2, 4), dtype=bool))
    assert report["noise_std_added_max"].value.tolist() == [sigma, sigma] and report["noise_std_added_min"].released
    assert noise.event(1, 0) == dp_accounting.GaussianDpEvent(sigma / 0.25)
    with pytest.raises(ValueError, match=r"standard normals of the value's shape \(2, 5\); got \(5,\)"):
        noise.apply(x, normals[0])


def test_half_the_noise_is_priced_at_the_gaussians_own_epsilon():
    sigma = analytic_sigma(0.7, 1e-6, 0.25)
    half = CalibratedGaussianNoise(sigma / 2, 0.25, 0.7, 1e-6, analytic_sigma)
    epsilon, delta = half.guarantee()
    assert epsilon > 1.5 * 0.7 and delta == 1e-6
    # The exact profile (Balle & Wang): delta at the priced epsilon is at most the target, and a hair less
    # epsilon misses it (bisection to a relative 1e-12, rounded up).
    assert gaussian_delta(sigma / 2, 0.25, epsilon) <= 1e-6 < gaussian_delta(sigma / 2, 0.25, epsilon * (1 - 1e-9))
    # Independent route: dp-accounting's PLD of the same Gaussian (an upper bound, tight to ~1e-3 here).
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.GaussianDpEvent(sigma / 2 / 0.25))
    assert epsilon <= pld.get_epsilon(1e-6) <= epsilon * 1.01
    # A paper's formula defined below epsilon 1 only: a std that needs more certifies nothing.
    classic = CalibratedGaussianNoise(classic_sigma(0.6, 1e-5, 1.0) / 2, 1.0, 0.6, 1e-5, classic_sigma)
    assert classic.guarantee()[0] == np.inf
    assert CalibratedGaussianNoise(classic_sigma(0.3, 1e-5, 1.0) / 2, 1.0, 0.3, 1e-5, classic_sigma).guarantee()[0] \
        == pytest.approx(0.6, rel=1e-11)                  # std ~ 1 / epsilon: half the noise, twice the epsilon


def test_a_certified_ledger_handed_half_the_noise_prices_more():
    noise = CalibratedGaussianNoise(analytic_sigma(1.0, 1e-6, 0.1), 0.1, 1.0, 1e-6, analytic_sigma)
    counts = np.array([[0, 1, 3, 40]])
    for parallel in (False, True):
        full = ComposedAccountant(CertifiedReleases(noise, parallel), "certified")
        half = replace(full, rule=replace(full.rule, noise=replace(noise, noise_std=noise.noise_std / 2)))
        priced, higher = full.epsilons(counts), half.epsilons(counts)
        assert priced.tolist() == [[0.0, 1.0, 1.0, 1.0] if parallel else [0.0, 1.0, 3.0, 40.0]]
        assert np.all(higher[:, 1:] > 1.5 * priced[:, 1:]) and higher[0, 0] == 0.0
        assert full.priced_noise() is noise


# Gaussian-noise SMD on a small padded game: 4 steps of 100 samples (tests/protocols/mirror_descent/test_smd.py).
SMD = ("data=padded_game", "data.spec.num_samples=3000", "data.spec.dim=5", "participation=sequential",
       "evaluate_every=100000", "algorithm=gaussian_smd", "privacy=central_gaussian", "privacy.l2_clip=null",
       "privacy.epsilon=1", "privacy.delta=1e-6", "algorithm.parameters=manual", "num_rounds=4",
       "participation.batch_size=100", "algorithm.step_size=[0.1,0.2]")


def test_gaussian_smd_applies_the_step_its_ledger_prices_at_the_same_bits():
    from fedray.protocols.mirror_descent.calibration import gaussian_sensitivity

    plan = make_plan(compose(*SMD))
    applied = plan.protocol.algorithm.noise
    assert applied is plan.privacy.ledger.accountant.priced_noise() and applied.placement is Placement.SERVER
    sensitivity = gaussian_sensitivity(plan.protocol.constants["lipschitz"], 5, 5, 100)
    assert applied.noise_std == analytic_sigma(1.0, 1e-6, sensitivity) and applied.sensitivity == sensitivity
    counts = np.array([[0], [4]])
    # The rule the ledger priced by before it held the step: the same bits.
    before = ParallelComposition(ApproxDpComposition(1.0, 1e-6, 0.0, route="basic"))
    assert np.array_equal(plan.privacy.ledger.epsilons(counts), before.epsilons(counts))
    assert np.array_equal(plan.privacy.ledger.deltas(counts), np.broadcast_to(before.deltas(counts), (2, 1)))
    accountant = plan.privacy.ledger.accountant
    half = replace(accountant, rule=replace(accountant.rule, noise=replace(applied, noise_std=applied.noise_std / 2)))
    assert half.epsilons(counts)[1, 0] > 1.5


def test_each_gaussian_smd_round_logs_the_std_the_server_added_and_a_baseline_none():
    plan = make_plan(compose(*SMD, "progress=false"))
    result = run(plan, inline=True)
    std = plan.protocol.algorithm.noise.noise_std
    assert len(result.history) >= 1
    for metrics in result.history:
        np.testing.assert_array_equal(metrics["noise_std_added_min"], [std, std])
        np.testing.assert_array_equal(metrics["noise_std_added_max"], [std, std])
    assert not {"noise_std_added_min", "noise_std_added_max"} & result.diagnostics
    baseline = run(make_plan(compose(*SMD, "privacy=none", "progress=false")), inline=True)
    assert "noise_std_added_max" not in baseline.history[-1]


def _smd_pair(plan):
    """Worst case for one sample: every coordinate of its gradient at +L0 on D, -L0 on D' (the
    others 0), so step 0's batch mean moves by 2 L0 sqrt(dx + dy) / B, the step's sensitivity."""
    lipschitz = plan.protocol.constants["lipschitz"]
    d = np.zeros((plan.shape.num_silos, 10))
    d_prime = d.copy()
    d[0], d_prime[0] = lipschitz, -lipschitz
    return d, d_prime


def _smd_gradient(protocol, state):
    """What step 0 released, seen in the scores it moved: s_x -= tau g_x, s_y += tau g_y."""
    return np.concatenate([-state.score_x, state.score_y], axis=1) / protocol.algorithm.step_size[:, None]


SMD_CASE = ProtocolCase(SMD, privacy_round=("algorithm.step_size=0.1",), neighbours=_smd_pair, noise_replicas=1000,
                        released=_smd_gradient)


def test_gaussian_smd_adds_the_noise_its_ledger_prices():
    found = noise_matches_ledger(SMD_CASE)
    assert found["interval"][0] <= found["priced"] <= found["interval"][1]


def test_the_kit_fails_gaussian_smd_with_a_ledger_pricing_half_its_noise(monkeypatch):
    from fedray import testing

    original = testing._plan

    def ledger_half(case, *extra):
        plan = original(case, *extra)
        accountant = plan.privacy.ledger.accountant
        noise = accountant.rule.noise
        plan.privacy.ledger.accountant = replace(accountant, rule=replace(
            accountant.rule, noise=replace(noise, noise_std=noise.noise_std / 2)))
        return plan

    monkeypatch.setattr(testing, "_plan", ledger_half)
    with pytest.raises(AssertionError, match="the ledger prices a noise multiplier"):
        noise_matches_ledger(SMD_CASE)


# Alg. 1 on 1,000 users (tests/protocols/user_level/test_phased_sgd.py): exploratory constants, eps = 1,
# two step multipliers (sigma_i scales with eta_i) x 2 repetitions.
PHASED = ("experiment=user_level_sphere", "algorithm=phased_sgd", "data.spec.num_silos=1000",
          "data.spec.samples_per_silo=8", "data.spec.dim=5", "repetitions=2", "progress=false",
          "algorithm.profile=exploratory", "algorithm.kappa=0.01", "algorithm.step_size=[1.0,0.5]")


def test_phased_sgd_applies_the_step_its_ledger_prices_at_the_same_bits():
    from fedray.privacy.mechanisms import PhaseGaussianNoise

    plan = make_plan(compose(*PHASED))
    applied = plan.protocol.algorithm.noise
    assert isinstance(applied, PhaseGaussianNoise) and applied is plan.privacy.ledger.accountant.priced_noise()
    layout_sigma = np.asarray(plan.protocol.resolved["noise_std"])
    assert sorted(plan.replicas.step_sizes.tolist()) == [0.5, 0.5, 1.0, 1.0]
    np.testing.assert_allclose(applied.noise_std, np.outer(plan.replicas.step_sizes, layout_sigma), rtol=1e-15)
    counts = (np.arange(4 * 1000).reshape(4, 1000) % 2).astype(np.int64)
    # The rule the ledger priced by before it held the step (each phase (eps, delta), basic): the same bits.
    before = ApproxDpComposition(1.0, float(plan.privacy.delta[0]), 0.0, route="basic")
    assert np.array_equal(plan.privacy.ledger.epsilons(counts), before.epsilons(counts))
    assert np.array_equal(plan.privacy.ledger.deltas(counts), before.deltas(counts))
    # Half the noise in one phase of replica 2: the theorem no longer covers that replica, the others keep eps.
    weaker = np.array(applied.noise_std)
    weaker[2, 1] /= 2
    accountant = plan.privacy.ledger.accountant
    half = replace(accountant, rule=replace(accountant.rule, noise=replace(applied, noise_std=weaker)))
    priced = half.epsilons(counts)
    assert np.all(priced[2, counts[2] > 0] == np.inf) and np.all(priced[2, counts[2] == 0] == 0.0)
    assert np.array_equal(priced[[0, 1, 3]], before.epsilons(counts)[[0, 1, 3]])
    # More noise than the theorem asks is post-processing: the same price.
    more = replace(accountant, rule=replace(accountant.rule, noise=replace(applied, noise_std=2 * applied.noise_std)))
    assert np.array_equal(more.epsilons(counts), before.epsilons(counts))


def test_phased_sgd_draws_its_gaussian_through_the_step_and_logs_the_std_it_added():
    plan = make_plan(compose(*PHASED))
    program = plan.protocol.build(None)
    from fedray.core.protocol import RoundKeys
    from fedray.rng import Stream

    keys = RoundKeys(plan.seed, plan.repetitions, 0, plan.replicas.streams)
    same = np.zeros((4, program.groups, 5, 1))
    replicas = np.arange(4)
    _, released, _, _ = program.curator(same, np.zeros((4, 5, 1)), replicas, 1, keys)
    # The step continues each replica's SERVER generator after the test's Laplace and the filter's uniforms.
    expected = []
    for r in replicas:
        rng = keys.at(1).generator(Stream.SERVER, r)
        rng.laplace(0.0, 1.0), rng.random(program.groups)
        expected.append(program.noise.noise_std[r, 1] * rng.standard_normal(5))
    np.testing.assert_array_equal(released.reshape(4, 5), np.stack(expected))
    result = run(plan, inline=True)
    final = result.history[-1]
    reached = final["phases_run"].astype(int)
    assert reached.min() >= 1
    for r in range(4):
        ran = program.noise.noise_std[r, :reached[r]]
        assert final["noise_std_added_min"][r] == ran.min() and final["noise_std_added_max"][r] == ran.max()
    baseline = run(make_plan(compose(*PHASED, "privacy=none", "privacy.epsilon=1", "privacy.delta=1e-6")), inline=True)
    assert "noise_std_added_max" not in baseline.history[-1]


# B2 (filtered gradient descent, one phase of every user) on 1,000 users (tests/protocols/user_level/test_accelerated_erm.py).
B2 = ("experiment=user_level_sphere", "data.spec.num_silos=1000", "data.spec.samples_per_silo=16", "data.spec.dim=5",
      "repetitions=2", "progress=false", "algorithm=filtered_gd", "participation=all", "num_rounds=10",
      "algorithm.profile=exploratory", "algorithm.kappa=1e-5", "privacy.epsilon=100", "privacy.delta=1e-7")


@pytest.mark.parametrize("algorithm", ["filtered_gd", "accelerated_phased_erm"])
def test_the_filtered_protocols_apply_the_step_their_ledger_prices_at_the_same_bits(algorithm):
    from fedray.privacy.ledger import PhaseAccountant
    from fedray.privacy.mechanisms import PhaseGaussianNoise

    overrides = B2 if algorithm == "filtered_gd" else (*B2[:6], "algorithm=accelerated_phased_erm", *B2[9:])
    plan = make_plan(compose(*overrides))
    applied, accountant = plan.protocol.algorithm.noise, plan.privacy.ledger.accountant
    assert isinstance(applied, PhaseGaussianNoise) and applied is accountant.priced_noise()
    np.testing.assert_array_equal(applied.noise_std, np.tile(plan.protocol.resolved["noise_std"], (2, 1)))
    counts = (np.arange(2 * 1000).reshape(2, 1000) % 3 == 0).astype(np.int64)
    before = PhaseAccountant(ApproxDpComposition(100.0, 1e-7, 0.0, route="basic"), "phases",
                             unit_phase=accountant.unit_phase, phase_starts=accountant.phase_starts)
    assert np.array_equal(accountant.epsilons(counts), before.epsilons(counts))
    assert np.array_equal(accountant.deltas(counts), before.deltas(counts))
    weaker = np.array(applied.noise_std)
    weaker[1, -1] /= 2
    half = replace(accountant, rule=replace(accountant.rule, noise=replace(applied, noise_std=weaker)))
    assert np.array_equal(half.epsilons(counts)[0], before.epsilons(counts)[0])
    assert np.all(half.epsilons(counts)[1] == np.where(counts[1] > 0, np.inf, 0.0))


def test_each_filtered_round_adds_the_steps_noise_and_logs_its_std():
    from fedray.core.protocol import Messages, RoundKeys
    from fedray.runtime.driver import InlineGroups

    plan = make_plan(compose(*B2))
    noise = plan.protocol.algorithm.noise
    sigma = noise.noise_std[:, 0]

    def one_round(step):
        """Round 0 with every user's gradient 0 (the test passes, the filter keeps all): the model's change."""
        planned = replace(plan.protocol, algorithm=replace(plan.protocol.algorithm, noise=step))
        protocol = planned.build(InlineGroups(plan))
        keys = RoundKeys(plan.seed, plan.replicas.repetitions, 0, plan.replicas.streams)
        state = protocol.init(keys)
        spec = protocol.configure(state, keys)
        after = protocol.aggregate(state, spec, Messages(np.zeros((2, 1000, 5, 1)), spec.participation), keys)
        change = next(iter(protocol.output(after.state).values())) - next(iter(protocol.output(state).values()))
        return after.metrics, change

    metrics, change = one_round(noise)
    doubled_metrics, doubled = one_round(replace(noise, noise_std=2 * noise.noise_std))
    assert np.abs(change).min() > 0
    np.testing.assert_allclose(doubled, 2 * change, rtol=1e-12)        # the release is the step's noise, no other
    assert metrics["noise_std_added_min"].value.tolist() == sigma.tolist()
    assert doubled_metrics["noise_std_added_max"].value.tolist() == (2 * sigma).tolist()
    result = run(plan, inline=True)
    for metrics in result.history:
        running = metrics["halted"] == 0
        np.testing.assert_array_equal(metrics["noise_std_added_max"], np.where(running, sigma, 0.0))
    assert not {"noise_std_added_min", "noise_std_added_max"} & result.diagnostics
    baseline = run(make_plan(compose(*B2, "privacy=none")), inline=True)
    assert "noise_std_added_max" not in baseline.history[-1]


# B1 on 300 users of 8 records (tests/protocols/user_level/test_output_perturbation.py).
OUTPUT = ("experiment=output_perturbation_synthetic", "data.spec.num_silos=300", "data.spec.samples_per_silo=8",
          "data.spec.dim=4", "+data.spec.noise=1.0", "progress=false")


@pytest.mark.parametrize("calibration, budget, formula", [
    ("accountant", "privacy.epsilon_grid=[0.5,2.0]", analytic_sigma), ("paper", "privacy.epsilon=0.5", classic_sigma)])
def test_output_perturbation_applies_the_step_its_ledger_prices_at_the_same_bits(calibration, budget, formula):
    plan = make_plan(compose(*OUTPUT, f"privacy.calibration={calibration}", budget, "repetitions=2"))
    applied, accountant = plan.protocol.noise, plan.privacy.ledger.accountant
    assert applied is accountant.priced_noise() and applied.calibration is formula
    levels = plan.privacy.target_epsilon[:, 0]
    sensitivity = plan.protocol.resolved["sensitivity"]
    assert applied.noise_std.tolist() == [formula(float(e), 1e-5, sensitivity) for e in levels]
    counts = (np.arange(plan.privacy.ledger.shape[0] * 300).reshape(-1, 300) % 2).astype(np.int64)
    before = ApproxDpComposition(levels[:, None], float(plan.privacy.delta[0]), 0.0, route="basic")
    assert np.array_equal(accountant.epsilons(counts), before.epsilons(counts))
    half = replace(accountant, rule=replace(accountant.rule, noise=replace(applied, noise_std=applied.noise_std / 2)))
    higher = half.epsilons(counts)[counts > 0]
    assert np.all(higher > 1.5 * before.epsilons(counts)[counts > 0])
    if formula is classic_sigma:            # twice eps = 0.5 is outside the classic formula's range: no claim
        assert np.all(higher == np.inf)


def test_output_perturbation_releases_the_steps_noise_and_logs_its_std():
    plan = make_plan(compose(*OUTPUT, "privacy.calibration=accountant", "privacy.epsilon_grid=[0.5,2.0]"))
    noise = plan.protocol.noise
    result = run(plan, inline=True)
    baseline = run(make_plan(compose(*OUTPUT, "privacy=none")), inline=True)
    # Both release the same certified minimiser; the difference is the step's noise, at its std.
    released = result.outputs["released"] - baseline.outputs["released"][:1]
    keys_noise = released.reshape(2, -1) / noise.noise_std[:, None]
    assert np.abs(keys_noise).max() < 6 and np.abs(released[0]).max() > 0
    final = result.history[-1]
    assert final["noise_std_added_min"].tolist() == final["noise_std_added_max"].tolist() == noise.noise_std.tolist()
    assert "noise_std_added_max" not in baseline.history[-1]


# SCOutputPert's exact mode on 500 users' 1-D means (tests/protocols/user_level/test_sc_output_pert.py), two budgets.
MEANS = ("experiment=sc_output_pert_means", "data.spec.num_silos=500", "data.spec.items_per_user=1000000",
         "progress=false", "privacy.epsilon_grid=[0.5,1.0]")


def test_sc_output_pert_applies_the_step_its_ledger_prices_at_the_same_bits():
    from fedray.privacy.ledger import UnboundedAccountant
    from fedray.privacy.mechanisms import PhaseGaussianNoise

    plan = make_plan(compose(*MEANS))
    applied, accountant = plan.protocol.noise, plan.privacy.ledger.accountant
    assert isinstance(applied, PhaseGaussianNoise) and applied is accountant.priced_noise()
    assert applied.noise_std[:, 0].tolist() == [mech.noise_std for mech in plan.protocol.mechanisms]   # Thm 3.3's sigma
    counts = (np.arange(2 * 500).reshape(2, 500) % 2).astype(np.int64)
    before = ApproxDpComposition(np.array([[0.5], [1.0]]), float(plan.privacy.delta[0]), 0.0, route="basic")
    assert np.array_equal(accountant.epsilons(counts), before.epsilons(counts))
    assert np.array_equal(accountant.deltas(counts), before.deltas(counts))
    half = replace(accountant, rule=replace(accountant.rule, noise=replace(
        applied, noise_std=applied.noise_std * np.array([[0.5], [1.0]]))))
    assert np.all(half.epsilons(counts)[0] == np.where(counts[0] > 0, np.inf, 0.0))
    assert np.array_equal(half.epsilons(counts)[1], before.epsilons(counts)[1])
    # The abort variant adds the same step but is not DP: its ledger stays unbounded.
    abort = make_plan(compose(*MEANS, "algorithm.on_unstable=abort_not_private"))
    assert isinstance(abort.privacy.ledger.accountant, UnboundedAccountant) and abort.protocol.noise is not None


def test_sc_output_pert_releases_through_the_step_and_logs_the_std_it_added():
    plan = make_plan(compose(*MEANS))
    sigma = plan.protocol.noise.noise_std[:, 0]
    result = run(plan, inline=True)
    final = result.history[-1]
    assert final["released"].tolist() == [1.0, 1.0]
    assert final["noise_std_added_min"].tolist() == final["noise_std_added_max"].tolist() == sigma.tolist()
    # Twice the step's std: the same draws, so the release moves twice as far from the exact mean.
    program = plan.protocol.build(None)
    doubled = replace(plan.protocol, noise=replace(plan.protocol.noise, noise_std=2 * plan.protocol.noise.noise_std))
    other = run(replace(plan, protocol=doubled), inline=True)
    exact = run(make_plan(compose(*MEANS[:-1], "privacy=none")), inline=True).outputs["released"][0]
    np.testing.assert_allclose(other.outputs["released"] - exact, 2 * (result.outputs["released"] - exact), rtol=1e-9)
    assert program.noise is plan.protocol.noise
    baseline = run(make_plan(compose(*MEANS[:-1], "privacy=none")), inline=True)
    assert "noise_std_added_max" not in baseline.history[-1]


# Phased-ERM with a localizing release (Alg. 5) on 4,000 users (tests/protocols/user_level/test_phased_output_pert.py).
STRONG = ("experiment=phased_erm_synthetic", "data.spec.num_silos=4000", "data.spec.samples_per_silo=5",
          "data.spec.dim=3", "data.spec.noise=1.0", "algorithm.strong_convexity=0.1", "algorithm.radius=10",
          "progress=false", "algorithm.allow_few_users=true", "privacy.epsilon_grid=[0.7,1.0]")


def test_phased_output_pert_holds_one_step_per_release_and_prices_it_at_the_same_bits():
    from fedray.privacy.mechanisms import PhaseGaussianNoise

    plan = make_plan(compose(*STRONG, "data.spec.num_silos=6000"))      # eps 0.7's 4 kappa + 2 = 5,502 users
    program, noise = plan.protocol, plan.protocol.noise
    slots = (*program.phases, *program.fallback, program.localization)
    assert isinstance(noise, PhaseGaussianNoise) and noise.noise_std.shape == (2, len(slots))
    for j, phase in enumerate(slots):
        assert noise.noise_std[:, j].tolist() == noise.required_std[:, j].tolist() == \
            [mech.noise_std for mech in phase.mechanisms]
    # The DP run (on_unstable=search) refuses at any size a test can enumerate, so its ledger is built
    # here as the planner builds it: the releases' step against the rule it replaced, bit for bit.
    stages, share = 2, len(program.phases)            # a localization, then basic composition over the phases
    accountant = ComposedAccountant(CertifiedReleases(noise), "basic", releases_per_participation=stages * share)
    before = ComposedAccountant(ApproxDpComposition(np.array([[0.7], [1.0]]) / (stages * share),
                                                    float(plan.privacy.delta[0]) / (stages * share), 0.0,
                                                    route="basic"), "basic", releases_per_participation=stages * share)
    assert noise.epsilon.tolist() == (np.array([0.7, 1.0]) / (stages * share)).tolist()
    assert noise.delta == float(plan.privacy.delta[0]) / (stages * share)
    counts = np.array([[0, 1, stages * share, 7], [3, 0, 1, 2]])
    assert np.array_equal(accountant.epsilons(counts), before.epsilons(counts))
    assert np.array_equal(accountant.deltas(counts), before.deltas(counts))
    weaker = np.array(noise.noise_std)
    weaker[0, -1] /= 2                                   # replica 0's localizing release at half its sigma
    half = replace(accountant, rule=CertifiedReleases(replace(noise, noise_std=weaker)))
    assert np.all(half.epsilons(counts)[0] == np.where(counts[0] > 0, np.inf, 0.0))
    assert np.array_equal(half.epsilons(counts)[1], before.epsilons(counts)[1])


def test_phased_output_pert_logs_the_std_each_replica_added():
    plan = make_plan(compose(*STRONG[:-1], "repetitions=2"))
    noise = plan.protocol.noise
    result = run(plan, inline=True)
    final = result.history[-1]
    released_any = final["phases_without_release"] < len(plan.protocol.phases) + 1
    assert released_any.all()
    for r in range(2):
        assert noise.noise_std[r].min() <= final["noise_std_added_min"][r] <= final["noise_std_added_max"][r] \
            <= noise.noise_std[r].max()
        assert final["noise_std_added_max"][r] in noise.noise_std[r]
    baseline = run(make_plan(compose(*STRONG[:-1], "privacy=none")), inline=True)
    assert "noise_std_added_max" not in baseline.history[-1]
