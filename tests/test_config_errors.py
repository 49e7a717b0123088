"""Bad input is refused in the planning step, before Ray starts, with one line naming the key."""

import os
import subprocess
import sys

import numpy as np
import pytest

from fedray.errors import ConfigError
from fedray.plan import make_plan
from tests.conftest import REPO, compose


@pytest.mark.parametrize(
    "override,message",
    [
        ("privacy.epsilon=0", "privacy.epsilon must be a positive number, a list of one per silo, or {values, fractions}; got 0"),
        ("privacy.epsilon=-1.5", "privacy.epsilon must be a positive number, a list of one per silo, or {values, fractions}; got -1.5"),
        ("privacy.delta=1.5", "privacy.delta must be in (0, 1) or null (= 1/n^2 per silo), or one such value per silo; got 1.5"),
        ("privacy.delta=0", "privacy.delta must be in (0, 1) or null (= 1/n^2 per silo), or one such value per silo; got 0"),
        ("participation.silos_per_round=30", "participation.silos_per_round must be an integer in [1, 25] (num_silos); got 30"),
        ("algorithm.batch_size=2000", "algorithm.batch_size must be at most the smallest silo's training size n = 1238; got 2000"),
        ("num_rounds=0", "num_rounds must be a positive integer; got 0"),
        ("runtime.connect_timeout=0", "runtime.connect_timeout must be a positive number; got 0"),
        ("runtime.address=5", 'runtime.address must be null (a private local Ray), "auto", or "host:port" / "ray://host:port"; got 5'),
        ("algorithm.step_size=-1", "algorithm.step_size must be a positive number; got -1"),
        ("privacy.calibration=magic", "privacy.calibration must be one of ('paper', 'theory', 'accountant') for isrl_dp_mb_sgd; got 'magic'"),
        ("runtime.num_actors=0", "runtime.num_actors must be a positive integer; got 0"),
        ("runtime.max_restarts=-1", "runtime.max_restarts must be a non-negative integer below 2^63; got -1"),
        ("runtime.max_restarts=101", "runtime.max_restarts must be an integer from 0 to 100; got 101"),
        ("algorithm=mb_sgd", "privacy.trust_model must be 'none' for algorithm=mb_sgd (privacy=none); got 'isrl_dp'"),
        ("algorithm=local_sgd", "privacy.trust_model must be 'none' for algorithm=local_sgd (privacy=none); got 'isrl_dp'"),
    ],
)
def test_bad_values_name_the_key_and_the_allowed_range(override, message):
    with pytest.raises(ConfigError) as err:
        make_plan(compose("experiment=isrl_dp_convex", override))
    assert str(err.value) == message


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["algorithm=isrl_dp_multistage", "algorithm.strong_convexity=0"],
         "algorithm.strong_convexity must be > 0 for the multi-stage method; got 0"),
        (["+algorithm.stepsize=0.3"],   # the misspelling Hydra's own hint ("use +...") leads a user to
         "algorithm.stepsize must be a known key of algorithm (did you mean algorithm.step_size?): average_last, "
         "batch_size, name, radius, step_size, trust_model; got 0.3"),
        (["+privacy.epsilon_max=2"],
         "privacy.epsilon_max must be a known key of privacy (did you mean privacy.epsilon?): accountant, "
         "calibration, delta, enforce_budget, epsilon, epsilon_grid, l2_clip, silo_level, trust_model; got 2"),
        (["+runtime.num_actor=2"],
         "runtime.num_actor must be a known key of runtime (did you mean runtime.num_actors?): address, "
         "checkpoint_every, checkpoint_path, connect_timeout, dashboard, faithful, max_restarts, num_actors, num_cpus, py_modules, resume, rounds_per_call, single_actor_work; got 2"),
        (["+num_round=10"],
         "num_round must be a known key at the top level (did you mean num_rounds?): algorithm, data, "
         "evaluate_every, grids, num_rounds, participation, privacy, progress, repetitions, replicas, runtime, "
         "seed, theory, tracking, trial; got 10"),
        (["replicas.common_random_numbers=yes"], "replicas.common_random_numbers must be true or false; got 'yes'"),
        (["+replicas.common_random=true"],
         "replicas.common_random must be a known key of replicas (did you mean replicas.common_random_numbers?): "
         "common_random_numbers; got True"),
    ],
)
def test_protocol_fields_and_unknown_keys_are_refused_at_planning(overrides, message):
    with pytest.raises(ConfigError) as err:
        make_plan(compose("experiment=isrl_dp_convex", *overrides))
    assert str(err.value) == message


PRIVACY_KEYS = "accountant, calibration, delta, enforce_budget, epsilon, epsilon_grid, l2_clip, trust_model"
EXPERIMENTS = ", ".join(sorted(p.stem for p in (REPO / "fedray" / "conf" / "experiment").glob("*.yaml")))


@pytest.mark.parametrize(
    "override,message",
    [   # Hydra refuses these while composing ("Key 'epsilonn' is not in struct"; a 32-line option list)
        ("privacy.epsilonn=3", f"privacy.epsilonn must be a known key of privacy (did you mean privacy.epsilon?): "
                               f"{PRIVACY_KEYS}; got 3"),
        ("algorithm.stepsize=0.3", "algorithm.stepsize must be a known key of algorithm (did you mean "
                                   "algorithm.step_size?): average_last, batch_size, name, radius, step_size; got 0.3"),
        ("data.spec.pca_dimm=20", "data.spec.pca_dimm must be a known key of data.spec (did you mean data.spec.pca_dim?): "
                                  "cache, directory, download, heterogeneity, images_per_digit, pca_dim, train_fraction; "
                                  "got 20"),
        ("algoritm=mb_sgd", "algoritm must be a known key at the top level (did you mean algorithm?): algorithm, data, "
                            "evaluate_every, num_rounds, participation, privacy, progress, repetitions, replicas, "
                            "runtime, seed, tracking, trial; got 'mb_sgd'"),
        ("experiment=isrl_dp_convx", "experiment must be one of the options of experiment (did you mean "
                                     f"experiment=isrl_dp_convex?): {EXPERIMENTS}; got 'isrl_dp_convx'"),
        ("privacy=acountant", "privacy must be one of the options of privacy (did you mean privacy=accountant?): "
                              "accountant, central_gaussian, central_sampling, central_user, hybrid_silo_level, "
                              "local_gaussian, none, pan_private, paper, shuffle, shuffle_vector_sum; got 'acountant'"),
    ],
)
def test_misspelt_keys_and_options_hydra_refuses_get_a_did_you_mean(override, message):
    from fedray.compose import compose_plan

    with pytest.raises(ConfigError) as err:
        compose_plan([override] if override.startswith("experiment=") else ["experiment=isrl_dp_convex", override])
    assert str(err.value) == message


@pytest.mark.parametrize("args,line", [
    (["experiment=isrl_dp_convex", "privacy.epsilonn=3"],
     f"error: privacy.epsilonn must be a known key of privacy (did you mean privacy.epsilon?): {PRIVACY_KEYS}; got 3"),
    (["experiment=isrl_dp_convx"], "error: experiment must be one of the options of experiment (did you mean "
                                   f"experiment=isrl_dp_convex?): {EXPERIMENTS}; got 'isrl_dp_convx'"),
    pytest.param(["-m", "experiment=isrl_dp_convex", "privacy.epsilon=1,3", "algorithm.stepsize=0.3,1"],  # a sweep
                 "error: algorithm.stepsize must be a known key of algorithm (did you mean algorithm.step_size?): "
                 "average_last, batch_size, name, radius, step_size; got '0.3,1'",
                 marks=pytest.mark.slow),    # opens the sweep's MLflow parent run first: 15-40 s
])
def test_the_cli_prints_hydras_refusals_in_one_line(tmp_path, args, line):
    proc = subprocess.run([sys.executable, "-m", "fedray", *args, f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                           f"hydra.sweep.dir={tmp_path}/multirun"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert [text for text in proc.stdout.splitlines() if text.strip()] == [line]
    assert "Traceback" not in proc.stderr and "Set the environment variable HYDRA_FULL_ERROR" not in proc.stderr
    assert args[0] == "-m" or not (tmp_path / "mlflow.db").exists()    # a sweep's parent run is already open


def test_missing_data_directory_is_named(tmp_path):
    with pytest.raises(ConfigError, match=str(tmp_path / "nowhere")):
        make_plan(compose("experiment=isrl_dp_convex", f"data.spec.directory={tmp_path / 'nowhere'}", "data.spec.download=false"))


def test_cli_prints_one_line_and_starts_nothing(tmp_path):
    env = dict(os.environ, RAY_ADDRESS="")
    proc = subprocess.run(
        [sys.executable, "-m", "fedray", "experiment=isrl_dp_convex", "privacy.epsilon=-1",
         f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"hydra.run.dir={tmp_path}/out"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines == ["error: privacy.epsilon must be a positive number, a list of one per silo, or {values, fractions}; got -1"]
    assert not (tmp_path / "mlflow.db").exists()  # nothing half-written
    assert "Started a local Ray instance" not in proc.stderr


def test_one_pass_rounds_must_fit_the_silo():
    with pytest.raises(ConfigError, match=r"num_rounds must be at most floor\(n / K\) = 61 for isrl_dp_one_pass"):
        make_plan(compose("experiment=isrl_dp_convex", "algorithm=isrl_dp_one_pass", "algorithm.batch_size=20",
                          "num_rounds=62"))


@pytest.mark.parametrize("override, key", [
    ("seed=-1", "seed"), ("seed=nan", "seed"), ("trial=abc", "trial"), ("trial=null", "trial"),
    ("repetitions=10000000000000", "repetitions"), ("num_rounds=100000000", "num_rounds"),
    ("privacy.epsilon=1e10", "privacy.epsilon"), ("privacy.epsilon_grid=[{}]", "privacy.epsilon_grid"),
    ("data.spec.directory=0", "data.spec.directory"), ("algorithm.step_size=1e13", "algorithm.step_size"),
])
def test_values_past_what_a_run_can_hold_are_refused_naming_the_key(override, key):
    """Found by the hostile-config fuzz (tests/test_config_fuzz.py): each raised something other
    than a ConfigError before."""
    with pytest.raises(ConfigError) as err:
        make_plan(compose("experiment=isrl_dp_convex", override))
    assert err.value.key == key


def test_a_federation_too_large_to_hold_names_its_largest_factor():
    with pytest.raises(ConfigError) as err:
        make_plan(compose("experiment=p_sgd_synthetic", "data.spec.samples_per_silo=10000000"))
    assert err.value.key == "data.samples_per_silo" and "values exceed" in str(err.value)
    with pytest.raises(ConfigError) as err:
        make_plan(compose("experiment=user_level_sphere", "data.spec.num_silos=10000000000000"))
    assert err.value.key == "data.num_silos"
    with pytest.raises(ConfigError) as err:
        make_plan(compose("experiment=user_level_sphere", "data.loss=abc"))
    assert err.value.key == "data.loss"


@pytest.mark.slow
def test_e2s_clip_grid_is_planned_and_one_past_it_refused(data_dir):
    """E2 carries the authors' clip grid as replicas; its last value 1e32 means "no clipping": the
    grid must plan, private and not, and what lies past it is refused."""
    for privacy, algorithm in (("paper", "isrl_dp_mb_sgd"), ("none", "local_sgd")):
        plan = make_plan(compose("experiment=e2_insurance", f"privacy={privacy}", f"algorithm={algorithm}"))
        clips = np.unique(plan.l2_clips)
        np.testing.assert_array_equal(clips, [1e2, 1e4, 1e6, 1e8, 1e32])
        np.testing.assert_array_equal(plan.protocol.l2_clip, plan.l2_clips)
    with pytest.raises(ConfigError, match=r"privacy.l2_clip must be a positive number at most 1e\+32; got 1e\+33"):
        make_plan(compose("experiment=e2_insurance", "privacy.l2_clip=1e33"))
