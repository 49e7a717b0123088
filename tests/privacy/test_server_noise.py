"""The trusted server's Gaussian step (``ServerGaussianNoise``) is what the central protocols add and
what their ledgers price: user-level DP-SGD (B1), item-level DP-SGD (B3) and the DP-FedAvg example
apply the value their ledger holds, each round logs the std it added, and the ledger's epsilon is
dp-accounting's for that value's event (an independent route), so a ledger handed half the noise
prices more and a protocol adding other noise than the ledger prices fails ``fedray.testing``."""

from dataclasses import replace

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp

from fedray.core.mechanism import Mechanism, Placement
from fedray.plan import make_plan
from fedray.privacy.accounting import participation_epsilon
from fedray.privacy.ledger import central_gaussian_ledger, poisson_gaussian_ledger
from fedray.privacy.mechanisms import ServerGaussianNoise
from fedray.runtime.driver import run
from fedray.testing import ProtocolCase, noise_matches_ledger
from tests.conftest import compose

# B1 on 60 users of 8 records, 20 of them a round.
B1 = ("data=synthetic", "data.spec.num_silos=60", "data.spec.samples_per_silo=8", "data.spec.dim=4",
      "data.spec.test_samples_per_silo=1", "+data.spec.noise=2.0", "algorithm=user_dp_sgd", "participation=uniform",
      "participation.silos_per_round=20", "num_rounds=8", "privacy=central_user", "privacy.calibration=accountant",
      "privacy.epsilon=1", "privacy.delta=1e-5", "progress=false")


def test_the_step_adds_noise_std_z_times_the_sum_sensitivity_over_the_divisor():
    # z = 1.5, sum sensitivity 2 L = 2, mean of K = 4: std 1.5 x 2 / 4 = 0.75; z = 0: no noise, no privacy.
    noise = ServerGaussianNoise(np.array([1.5, 0.0]), 2.0, divisor=4)
    assert isinstance(noise, Mechanism) and noise.placement is Placement.SERVER
    np.testing.assert_array_equal(noise.noise_std, [0.75, 0.0])
    assert noise.event(0, 7) == dp_accounting.GaussianDpEvent(1.5)
    assert isinstance(noise.event(1, 0), dp_accounting.NonPrivateDpEvent)
    x = np.arange(12.0).reshape(2, 3, 2)
    noisy, metrics = noise.apply(x, [np.random.default_rng(s) for s in (5, 6)])
    np.testing.assert_array_equal(noisy[0], x[0] + 0.75 * np.random.default_rng(5).standard_normal((3, 2)))
    np.testing.assert_array_equal(noisy[1], x[1])
    np.testing.assert_array_equal(metrics["noise_std"], [0.75, 0.0])
    report = noise.round_metrics(np.array([[True, False], [False, False]]))     # the server adds it regardless
    assert report["noise_std_added_min"].value.tolist() == [0.75, 0.0] and report["noise_std_added_max"].released
    with pytest.raises(ValueError, match="one noise multiplier per replica, 3; got shape"):
        noise.apply(np.zeros((3, 2)), [np.random.default_rng(0)] * 3)


@pytest.mark.same_worker("b1")      # both plan B1: one RDP calibration of seconds
def test_b1_applies_the_step_its_ledger_prices_and_the_price_is_dp_accountings():
    plan = make_plan(compose(*B1))
    accountant = plan.privacy.ledger.accountant
    applied = plan.protocol.algorithm.noise
    assert applied is accountant.noise and applied.placement is Placement.SERVER
    z = float(plan.privacy.noise_multiplier[0, 0])
    np.testing.assert_allclose(applied.noise_std, z * 2 * 2.0 / 20, rtol=1e-15)     # l2_clip 2 (the config's)
    counts = np.full(plan.privacy.ledger.shape, 8)
    charged = plan.privacy.ledger.epsilons(counts)
    # Independent route: dp-accounting's RDP of 8 rounds of the 20-of-60 subsampled Gaussian.
    route = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    route.compose(dp_accounting.SampledWithoutReplacementDpEvent(60, 20, dp_accounting.GaussianDpEvent(z)), 8)
    assert charged == pytest.approx(route.get_epsilon(1e-5), rel=1e-9)
    # The rounds accountant's scalar route (what the committed numbers were priced by): the same bits.
    assert np.all(charged == participation_epsilon(z, 20, 60, 1, 8, 1e-5, "rdp"))
    assert accountant.event(0, 3, 8).count == 8 and accountant.event(0, 3, 8).event.event == applied.event(0, 3)
    # Federation-wide: a round with anybody in it charges every user.
    ledger = plan.privacy.ledger.fresh()
    ledger.record(np.eye(1, 60, 5, dtype=bool))
    assert ledger.counts.min() == 1


def test_a_ledger_handed_half_the_noise_prices_more():
    noise = ServerGaussianNoise(np.full(2, 3.0), 2.0, divisor=10)
    half = replace(noise, noise_multiplier=noise.noise_multiplier / 2)
    counts = np.full((2, 40), 25)
    for make in (lambda n: central_gaussian_ledger(n, 10, 40, 1e-5, "user"),
                 lambda n: poisson_gaussian_ledger(n, 0.25, 40, 1e-5, "client")):
        full_price, half_price = make(noise).epsilons(counts), make(half).epsilons(counts)
        assert np.all(half_price > 1.5 * full_price)


def test_the_poisson_ledger_is_dp_accountings_add_remove_rdp_of_its_event():
    noise = ServerGaussianNoise(np.array([1.2, 2.5]), 1.0)
    ledger = poisson_gaussian_ledger(noise, 0.3, 5, 1e-6, "client")
    counts = np.array([[0, 4, 4, 30, 30], [30, 30, 1, 1, 0]])
    got = ledger.epsilons(counts)
    routes = {}         # dp-accounting's epsilon per (replica, count): each of the 4 pairs computed once
    for (r, u), c in np.ndenumerate(counts):
        if c == 0:
            assert got[r, u] == 0.0
            continue
        if (r, c) not in routes:
            route = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
            route.compose(dp_accounting.PoissonSampledDpEvent(0.3, dp_accounting.GaussianDpEvent([1.2, 2.5][r])), int(c))
            routes[r, c] = route.get_epsilon(1e-6)
        assert got[r, u] == routes[r, c]        # one round's curve times c: the same bits
    assert ledger.accountant.event(1, 0, 3) == dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.3, dp_accounting.GaussianDpEvent(2.5)), 3)


@pytest.mark.same_worker("b1")      # both plan B1: one RDP calibration of seconds
def test_each_b1_round_logs_the_std_the_server_added_and_a_baseline_none():
    plan = make_plan(compose(*B1))
    result = run(plan, inline=True)
    std = plan.protocol.algorithm.noise.noise_std
    for metrics in result.history:
        np.testing.assert_array_equal(metrics["noise_std_added_min"], std)
        np.testing.assert_array_equal(metrics["noise_std_added_max"], std)
    assert not {"noise_std_added_min", "noise_std_added_max"} & result.diagnostics
    baseline = run(make_plan(compose(*B1, "privacy=none")), inline=True)
    assert "noise_std_added_max" not in baseline.history[-1]


def _b1_pair(plan):
    """Worst case for one user: its mean gradient is +L e_1 on D and -L e_1 on D' (the others send
    0), inside the clip: the mean of K moves by 2 L / K."""
    d = np.zeros((plan.shape.num_silos, plan.shape.dim, plan.loss.num_outputs))
    d_prime = d.copy()
    clip = plan.protocol.resolved["l2_clip"]
    d[0, 0, 0], d_prime[0, 0, 0] = clip, -clip
    return d, d_prime


# One round of every user (K = N: no sampling), so each replica's release moves by the same shift.
B1_CASE = ProtocolCase(B1, privacy_round=("num_rounds=1", "participation.silos_per_round=60"), neighbours=_b1_pair,
                       noise_replicas=1000)


def test_b1_adds_the_noise_its_ledger_prices():
    found = noise_matches_ledger(B1_CASE)
    print(found)
    assert found["interval"][0] <= found["priced"] <= found["interval"][1]


def test_the_kit_reads_the_ledgers_event_not_the_plans_multiplier(monkeypatch):
    """A ledger that prices half the noise the server adds (the plan's stated multiplier unchanged)
    fails ``noise_matches_ledger``: the kit compares the noise with the event the ledger prices."""
    from fedray import testing

    original = testing._plan

    def ledger_half(case, *extra):
        plan = original(case, *extra)
        ledger = plan.privacy.ledger                 # a fresh plan's own ledger: changed in place
        noise = ledger.accountant.noise
        ledger.accountant = replace(ledger.accountant, noise=replace(noise, noise_multiplier=noise.noise_multiplier / 2),
                                    _groups=None)
        return plan

    monkeypatch.setattr(testing, "_plan", ledger_half)
    with pytest.raises(AssertionError, match="the ledger prices a noise multiplier"):
        noise_matches_ledger(B1_CASE)



@pytest.mark.same_worker("dp_fedavg_small")      # K = 3 of 6 plans the RDP calibration of SMALL's contract check
@pytest.mark.parametrize("sampling", [("participation.silos_per_round=3",),
                                      ("participation=poisson", "participation.probability=0.5")])
def test_the_dp_fedavg_example_applies_the_step_its_ledger_prices(sampling):
    from tests.test_examples_dp_fedavg import SMALL

    plan = make_plan(compose(*[o for o in SMALL if not o.startswith("participation.")], *sampling))
    applied, priced = plan.protocol.algorithm.noise, plan.privacy.ledger.accountant.noise
    assert applied is priced and applied.placement is Placement.SERVER
    assert plan.privacy.ledger.accountant.event(0, 2, 30).count == 30


# B3 on 300 users of 4 items, B = 100 of the 1,200 items a round (tests/protocols/user_level/test_item_dp_sgd.py).
B3 = ("experiment=phased_erm_synthetic", "data.spec.num_silos=300", "data.spec.samples_per_silo=4", "data.spec.dim=3",
      "data.spec.noise=1.0", "algorithm=item_dp_sgd", "algorithm.batch_size=100", "algorithm.l2_clip=0.5",
      "num_rounds=20", "privacy.calibration=accountant", "progress=false", f"evaluate_every={10**9}")


def test_b3_applies_the_step_its_ledger_prices_per_item_times_m():
    from fedray.protocols.user_level.item_dp_sgd import item_level_budget

    plan = make_plan(compose(*B3))
    accountant = plan.privacy.ledger.accountant
    applied = plan.protocol.algorithm.noise
    assert applied is accountant.per_item.noise and applied.placement is Placement.SERVER
    z = plan.protocol.resolved["noise_multiplier"]
    np.testing.assert_allclose(applied.noise_std, z * 2 * 0.5 / 100, rtol=1e-15)
    _, item_delta = item_level_budget(1.0, float(plan.privacy.delta[0]), 4)
    counts = np.full(plan.privacy.ledger.shape, 20)
    charged = plan.privacy.ledger.epsilons(counts)
    # The scalar route the rounds ledger used: m x the item-level PLD epsilon, the same bits.
    assert np.all(charged == 4 * participation_epsilon(z, 100, 1200, 1, 20, item_delta, "pld"))
    assert accountant.per_item.event(0, 7, 20) == dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(1200, 100, dp_accounting.GaussianDpEvent(z)), 20)
    assert np.all(plan.privacy.ledger.deltas(counts) == plan.privacy.delta[0])
    assert plan.privacy.planned_event()["event"] is None          # the user-level claim is group privacy's
    half = replace(accountant, per_item=replace(accountant.per_item, noise=replace(
        applied, noise_multiplier=applied.noise_multiplier / 2), _groups=None))
    assert np.all(half.epsilons(counts) > 1.5 * charged)
