"""Theory mode: each theorem's hyperparameters pinned to hand-computed numbers, its preconditions,
the hybrid silo-level budget, and the presets planned (no Ray) and one run inline."""

import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from fedray.protocols.isrl_dp import MinibatchSGD, theory
from fedray.errors import ConfigError
from fedray.losses import Logistic, Softmax, Squared
from fedray.plan import make_plan
from fedray.protocols.isrl_dp.shuffle_calibration import calibrate_shuffled_sgd
from fedray.runtime.driver import run
from fedray.protocols.isrl_dp.theory import Problem
from tests.conftest import compose


def problem(**changes) -> Problem:
    base = dict(records_per_silo=100, dim=4, num_silos=4, silos_per_round=4, epsilon=1.0, delta=1e-4,
                lipschitz=1.0, smoothness=1.0, radius=1.0)
    return Problem(**{**base, **changes})


def test_mb_sgd_convex_hand_values():
    # Thm D.1, n = 100, d = 4, M = 4, eps = 1, delta = 1e-4, L = beta = D = 1:
    # R = 1*1*2/1 * min{10, 100/2} + min{400, 1e4*4/4} = 20 + 400 = 420.
    # eta = min{1, 1/sqrt(420) * min{1, 100*2/sqrt(1680) = 4.88, sqrt(400/420)}} = sqrt(400)/420 = 20/420.
    # K_min = 100 / (4 sqrt(840 ln 2e4)) = 100 / (4 sqrt(840 * 9.903488)) = 0.27410, so K = 1 and eps' = 0.27410.
    # sigma^2 = 256 * 420 * ln(1.05e7) * ln(2e4) / 1e4 = 256 * 420 * 16.166886 * 9.903488 / 1e4 = 1721.487.
    values = theory.mb_sgd_convex(problem())
    assert values.num_rounds == 420
    assert values.step_size == pytest.approx(20 / 420, rel=1e-12)
    assert values.batch_size == 1
    assert values.derived["eps_prime"] == pytest.approx(0.274098, rel=1e-5)
    assert values.noise_std**2 == pytest.approx(1721.487, rel=1e-6)
    assert values.calibration == "theory"
    assert values.algorithm == {"average_last": 420}   # gamma_r = 1/R


def test_accelerated_erm_hand_values():
    # Thm F.1, n = 100, d = 2, M = N = 4, eps = 1, delta = e^-8 (ln(1/delta) = 8), L = beta = D = 1:
    # first term sqrt(1*1*2*1*100 / (1*sqrt(2*8))) = sqrt(50) = 7.0711; K_min at R = 8:
    # 100 / (4 sqrt(16 ln(2/delta))) = 100 / (16 sqrt(8.693147)) = 2.1198, so K = 3.
    # MK = 12 < Nn = 400: second term 1e4 / (3 * 2 * 8) = 208.33, so R = 209.
    # eps' = (100 / (4 sqrt(418 * 8.693147))) / 3 = 0.138243.
    # sigma^2 = 256 * 209 * ln(522.5 e^8) * 8.693147 / 1e4 = 256 * 209 * 14.258625 * 8.693147 / 1e4 = 663.1945.
    # V^2 = 4/(4*3) + 2 * 663.1945 / 4 = 331.9306; lambda = V / (1 * sqrt(209)) = 1.260232.
    # nu = max{2 (1 + 1.260232), sqrt(1.260232 * 331.9306 * 209*210*211 / (3 * L D = 3))} = 35934.56.
    values = theory.accelerated_erm(problem(dim=2, delta=math.exp(-8)))
    assert (values.num_rounds, values.batch_size) == (209, 3)
    assert values.derived["eps_prime"] == pytest.approx(0.138243, rel=1e-5)
    assert values.noise_std**2 == pytest.approx(663.1945, rel=1e-6)
    assert values.derived["oracle_std"] ** 2 == pytest.approx(331.9306, rel=1e-6)
    assert values.algorithm["regularization"] == pytest.approx(1.260232, rel=1e-6)
    assert values.derived["prox_scale"] == pytest.approx(35934.56, rel=1e-6)
    assert values.step_size == pytest.approx(1 / 35934.56, rel=1e-6)


def test_accelerated_erm_without_local_sampling_drops_the_second_term():
    # M K >= N n (M = N = 1, n = 1): R = max(1, ceil(sqrt(beta D sqrt(M) eps n / (L sqrt(d ln(1/delta)))))).
    p = problem(records_per_silo=1, num_silos=1, silos_per_round=1, dim=1, delta=math.exp(-4), smoothness=64.0)
    # sqrt(64 * 1 * 1 * 1 * 1 / sqrt(4)) = sqrt(32) = 5.657 -> 6; K = 1 = n.
    values = theory.accelerated_erm(p)
    assert (values.num_rounds, values.batch_size) == (6, 1)


def test_one_pass_convex_hand_values():
    # Thm E.1, n = 1024, d = 4, M = N = 32, eps = 1, delta = e^-8, L = beta = D = 1:
    # K = 1 * 1024^(3/5) * (4 * 8)^(1/5) / (1 * 32^(1/5)) = 64 * 2 / 2 = 64 (float 63.99999 must not become 65).
    # R = floor(1024 / 64) = 16. sigma^2 = 32 ln(1.25 e^8) / 64^2 = 32 * 8.223144 / 4096 = 0.0642433.
    # V^2 = 1/(32*64) + 0 (N = M) + 4 * 0.0642433 / 32 = 0.00851869.
    # nu = max{2, sqrt(2 * 0.00851869 * 16*17*18 / 3)} = 5.273047.
    values = theory.one_pass_convex(problem(records_per_silo=1024, num_silos=32, silos_per_round=32,
                                            delta=math.exp(-8)))
    assert (values.batch_size, values.num_rounds) == (64, 16)
    assert values.noise_std**2 == pytest.approx(0.0642433, rel=1e-5)
    assert values.derived["oracle_std"] ** 2 == pytest.approx(0.00851869, rel=1e-5)
    assert values.step_size == pytest.approx(1 / 5.273047, rel=1e-6)
    assert values.algorithm == {"regularization": 0.0}


def test_one_pass_batch_is_clamped_to_n_and_rounds_floor():
    # Tiny beta D makes the K formula exceed n: K = n, R = floor(n/n) = 1.
    values = theory.one_pass_convex(problem(smoothness=1e-9))
    assert (values.batch_size, values.num_rounds) == (100, 1)
    # The hand case above with n = 1000: K = 1000^(3/5) * 2 / 2 = 63.0957 -> 64, R = floor(1000/64) = 15.
    values = theory.one_pass_convex(problem(records_per_silo=1000, num_silos=32, silos_per_round=32,
                                            delta=math.exp(-8)))
    assert (values.batch_size, values.num_rounds) == (64, 15)


def test_shuffled_convex_rounds_and_step():
    # Thm G.1, n = 4, N = M = 2000, eps = 0.1, d = 3, beta = 0.25, D = 2, L = 1, delta = 1e-5:
    # R = max{16 * 4e6 * 0.01 / 2000 = 320, 1, min{4, 106.7} = 4, 0.5 * min{sqrt(8000), 461.9} = 44.7} = 320.
    p = problem(records_per_silo=4, num_silos=2000, silos_per_round=2000, epsilon=0.1, delta=1e-5, dim=3,
                smoothness=0.25, radius=2.0)
    values = theory.shuffled_convex(p)
    assert (values.num_rounds, values.batch_size, values.calibration) == (320, 1, "paper")
    chain = calibrate_shuffled_sgd(0.1, 1e-5, num_silos=2000, records_per_silo=4, num_rounds=320,
                                   silos_per_round=2000, composition="advanced")
    sigma = 2.0 * chain.noise_multiplier
    assert values.noise_std == pytest.approx(sigma, rel=1e-12)
    # eta = min{4, 2 / sqrt(320 * (320/8000 + (1 + 3 sigma^2)/2000))}
    assert values.step_size == pytest.approx(2.0 / math.sqrt(320 * (320 / 8000 + (1 + 3 * sigma**2) / 2000)), rel=1e-12)


@pytest.mark.parametrize(
    "theorem,changes,key,allowed",
    [
        # eps_0 <= 2 ln(2/delta_0): delta = 0.5 gives 2 ln 4 = 2.773.
        (theory.mb_sgd_convex, dict(epsilon=3.0, delta=0.5), "privacy.epsilon", "2 ln(2/delta)"),
        (theory.accelerated_erm, dict(epsilon=3.0, delta=0.5), "privacy.epsilon", "2 ln(2/delta)"),
        (theory.mb_sgd_convex, dict(delta=1.0), "privacy.delta", "in (0, 1)"),
        # eps' <= 1: n = 1, R = 2, K_min = 40 / (4 sqrt(4 ln 2e10)) = 1.027 > n = 1.
        (theory.mb_sgd_convex, dict(records_per_silo=1, dim=1, num_silos=1, silos_per_round=1, epsilon=40.0,
                                    delta=1e-10, smoothness=1e-3), "privacy.epsilon", "K condition"),
        # One-pass, eps_0 <= 8 ln(1/delta_0) = 8 ln 2 = 5.545.
        (theory.one_pass_convex, dict(epsilon=6.0, delta=0.5), "privacy.epsilon", "8 ln(1/delta)"),
        # Shuffle: eps <= ln(2/delta) = ln 4 = 1.386, and M >= 16 ln(2/dh0).
        (theory.shuffled_convex, dict(epsilon=1.5, delta=0.5), "privacy.epsilon", "ln(2/delta)"),
        (theory.shuffled_convex, dict(num_silos=10, silos_per_round=10), "participation.silos_per_round",
         "16 ln(2/dh0)"),
    ],
)
def test_violated_preconditions_name_the_key_and_the_bound(theorem, changes, key, allowed):
    with pytest.raises(ConfigError) as err:
        theorem(problem(**changes))
    assert err.value.key == key
    assert allowed in err.value.allowed


def test_k_condition_message_states_the_bound():
    with pytest.raises(ConfigError, match=r"K >= eps n / \(4 sqrt\(2 R ln\(2/delta\)\)\) = 1\.02"):
        theory.mb_sgd_convex(problem(records_per_silo=1, dim=1, num_silos=1, silos_per_round=1, epsilon=40.0,
                                     delta=1e-10, smoothness=1e-3))


def test_loss_smoothness():
    assert theory.loss_smoothness(Logistic(), 2.0) == 1.0      # 2^2 / 4
    assert theory.loss_smoothness(Squared(), 2.0) == 4.0       # 2^2
    with pytest.raises(ConfigError, match="theory.smoothness"):
        theory.loss_smoothness(Softmax(), 2.0)
    with pytest.raises(ConfigError, match="theory.smoothness"):
        theory.loss_smoothness(Logistic(), None)


def test_silo_level_budget_hand_values():
    # eps_0 = 1/100, delta_0 = 1e-5 / (4 * 100) = 2.5e-8.
    eps0, delta0 = theory.silo_level_budget(1.0, 1e-5, 100, 10, 10)
    assert eps0 == 0.01
    assert delta0 == pytest.approx(2.5e-8, rel=1e-12)
    # Group privacy over n records: (n eps0, n e^{(n-1) eps0} delta0) is within (eps, delta).
    assert 100 * math.exp(99 * eps0) * delta0 <= 1e-5


@pytest.mark.parametrize(
    "args,key",
    [
        ((1.5, 1e-5, 100, 10, 10), "privacy.silo_level.epsilon"),
        ((0.0, 1e-5, 100, 10, 10), "privacy.silo_level.epsilon"),
        ((1.0, 1.0, 100, 10, 10), "privacy.silo_level.delta"),
        ((1.0, 1e-5, 100, 10, 5), "participation.silos_per_round"),
        ((1.0, 1e-5, 100, 10, None), "participation.silos_per_round"),
    ],
)
def test_silo_level_budget_refuses(args, key):
    with pytest.raises(ConfigError) as err:
        theory.silo_level_budget(*args)
    assert err.value.key == key


def test_resolve_leaves_other_configs_untouched():
    cfg = OmegaConf.to_container(compose("data=synthetic"), resolve=True)
    assert theory.resolve(cfg, MinibatchSGD, None, None, None, None) is cfg


@pytest.mark.parametrize(
    "preset,rounds,batch",
    [
        ("theory_mb_sgd_convex", 1016, 1),
        ("theory_accelerated_erm", 839, 8),
        ("theory_one_pass", 9, 111),
        ("theory_shuffled", 320, 1),
    ],
)
def test_presets_compose_and_plan(preset, rounds, batch):
    plan = make_plan(compose(f"experiment={preset}"))
    assert (plan.num_rounds, plan.protocol.batch_size) == (rounds, batch)
    resolved = plan.config["theory"]["resolved"]
    assert resolved["lipschitz"] == plan.protocol.l2_clip == 1.0
    assert resolved["smoothness"] == 0.25                      # logistic, feature_norm 1
    assert plan.privacy.calibration == ("paper" if preset == "theory_shuffled" else "theory")
    assert plan.step_sizes.shape == (1,) and plan.step_sizes[0] > 0
    assert float(plan.privacy.planned_epsilon.max()) <= plan.config["privacy"]["epsilon"] + 1e-9


def test_preset_noise_is_the_theorems_sigma():
    plan = make_plan(compose("experiment=theory_mb_sgd_convex"))
    # noise_std = multiplier * replace-one sensitivity 2 L / K; L = l2_clip = 1.
    sigma = float(plan.privacy.noise_multiplier[0, 0]) * 2 * plan.protocol.l2_clip / plan.protocol.batch_size
    assert sigma == pytest.approx(plan.config["theory"]["resolved"]["noise_std"], rel=1e-12)


@pytest.mark.parametrize(
    "override,key",
    [
        ("num_rounds=35", "num_rounds"),
        ("algorithm.step_size=0.1", "algorithm.step_size"),
        ("algorithm.average_last=8", "algorithm.average_last"),
        ("privacy.l2_clip=null", "privacy.l2_clip"),
        ("algorithm.radius=null", "algorithm.radius"),
        ("participation=poisson", "participation"),   # with ~participation.silos_per_round, below
        ("algorithm=isrl_dp_one_pass", "algorithm"),
        ("privacy=none", "privacy.trust_model"),
        ("theory._target_=fedray.protocols.isrl_dp.theory.nothing", "theory._target_"),
        ("privacy.epsilon=[1,1,1,1,1,1,1,1,1,1]", "privacy.epsilon"),
    ],
)
def test_theory_presets_refuse_conflicting_config(override, key):
    with pytest.raises(ConfigError) as err:
        extra = ("~participation.silos_per_round",) if override == "participation=poisson" else ()
        make_plan(compose("experiment=theory_mb_sgd_convex", override, *extra))
    assert err.value.key == key


def test_theory_owned_key_message():
    message = r"num_rounds must be null under theory \(Thm D.1\), which sets it \(1016\); got 35"
    with pytest.raises(ConfigError, match=message):
        make_plan(compose("experiment=theory_mb_sgd_convex", "num_rounds=35"))


def test_a_chosen_calibration_is_kept():
    plan = make_plan(compose("experiment=theory_one_pass", "privacy.calibration=accountant"))
    assert plan.privacy.calibration == "accountant"
    assert (plan.num_rounds, plan.protocol.batch_size) == (9, 111)


def test_hybrid_preset_records_the_record_level_budget():
    # n = 100 per silo, user level (1, 1e-5): eps0 = 0.01, delta0 = 1e-5 / 400 = 2.5e-8.
    plan = make_plan(compose("experiment=theory_mb_sgd_convex", "privacy=hybrid_silo_level"))
    priv = plan.config["privacy"]
    assert priv["epsilon"] == 0.01
    assert priv["delta"] == pytest.approx(2.5e-8, rel=1e-12)
    assert priv["silo_level"] == {"epsilon": 1.0, "delta": 1e-5}
    assert plan.privacy.trust_model == "isrl_dp" and plan.privacy.calibration == "theory"
    assert float(plan.privacy.planned_epsilon.max()) <= 0.01
    # The theorem ran at the record-level budget: Thm D.1's R with eps0 = 0.01, n = 100, d = 3, M = 10:
    # 0.25 * 2 * sqrt(10) * min{10, 1/sqrt(3)} + min{1000, 1e-4 * 1e4 * 10 / 3} = 0.9129 + 3.3333 -> 5.
    assert plan.num_rounds == 5


def test_hybrid_preset_states_the_silo_level_guarantee_by_group_privacy():
    plan = make_plan(compose("experiment=theory_mb_sgd_convex", "privacy=hybrid_silo_level"))
    # At the full record-level budget eps0 = 0.01, delta0 = 2.5e-8, silos of n = 100 records: group
    # privacy gives eps = 100 * 0.01 = 1 and delta = 100 e^{99 * 0.01} 2.5e-8 = 2.5e-6 * 2.6912345
    # = 6.7280862e-6, within the preset's silo-level target (1, 1e-5).
    spent = np.full((plan.num_replicas, plan.shape.num_silos), 0.01)
    record = plan.privacy.statement(spent)
    assert (record["unit"], record["epsilon_per_unit_max"]) == ("record of one silo", 0.01)
    silo = record["group_level"]
    assert (silo["unit"], silo["neighbouring_relation"], silo["group_size_max"]) == (
        "silo (all of its records)", "replace one silo's whole dataset", 100)
    assert silo["epsilon_per_unit_max"] == pytest.approx(1.0, rel=1e-12)
    assert silo["delta_max"] == pytest.approx(6.7280862e-6, rel=1e-7)
    # The planned spend states a silo-level guarantee within the target too.
    planned = plan.privacy.statement()["group_level"]
    assert planned["epsilon_per_unit_max"] <= 1.0 and planned["delta_max"] <= 1e-5
    assert "by group privacy also unit = silo" in plan.privacy.summary()
    # A plain record-level run states no silo-level guarantee.
    assert "group_level" not in make_plan(compose("experiment=theory_mb_sgd_convex")).privacy.statement()


@pytest.mark.parametrize(
    "override,key",
    [
        ("participation.silos_per_round=5", "participation.silos_per_round"),
        ("privacy.silo_level.epsilon=2", "privacy.silo_level.epsilon"),
        ("privacy.epsilon=3", "privacy.epsilon"),
    ],
)
def test_hybrid_preset_refuses(override, key):
    with pytest.raises(ConfigError) as err:
        make_plan(compose("experiment=theory_mb_sgd_convex", "privacy=hybrid_silo_level", override))
    assert err.value.key == key


def test_theory_preset_run_inline_decreases_the_training_loss():
    plan = make_plan(compose("experiment=theory_one_pass", "progress=false"))
    result = run(plan, inline=True)
    assert result.history[0]["train_loss"][0] == pytest.approx(math.log(2))   # w_0 = 0
    assert result.final["train_loss"][0] < result.history[0]["train_loss"][0] - 0.1
