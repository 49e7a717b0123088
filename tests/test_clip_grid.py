"""privacy.l2_clip as a list: clips carried as replicas of one run (no Ray)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from experiments.report import select, split_by_setting
from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.runtime.driver import run
from tests.conftest import compose

SMALL = ["data=synthetic", "data.spec.num_silos=5", "data.spec.samples_per_silo=80", "data.spec.dim=4",
         "participation.silos_per_round=3", "num_rounds=4", "algorithm.batch_size=20",
         "algorithm.step_size=[0.2,0.8]", "repetitions=2", "progress=false", "privacy.enforce_budget=false"]
CLIPS = "privacy.l2_clip=[0.05,1e32]"      # the first clips nearly every gradient, the second none


def test_clip_replicas_sit_between_budget_blocks_and_repetitions():
    plan = make_plan(compose(*SMALL, CLIPS, "privacy.epsilon_grid=[0.5,4]"))
    np.testing.assert_array_equal(plan.epsilon_levels, [0.5] * 8 + [4.0] * 8)
    np.testing.assert_array_equal(plan.l2_clips, ([0.05] * 4 + [1e32] * 4) * 2)
    np.testing.assert_array_equal(plan.repetitions, [0, 0, 1, 1] * 4)
    np.testing.assert_array_equal(plan.step_sizes, [0.2, 0.8] * 8)
    # no two replicas draw the same noise: every stream row is distinct
    assert len({tuple(row) for row in plan.replicas.streams}) == plan.num_replicas


@pytest.mark.parametrize("algorithm", ["isrl_dp_mb_sgd", "isrl_dp_local_sgd"])
def test_each_clip_block_adds_the_noise_of_its_own_clip(algorithm):
    plan = make_plan(compose(*SMALL, f"algorithm={algorithm}", "algorithm.batch_size=20", CLIPS))
    built = plan.protocol.build_algorithm(plan.protocol.l2_clip)
    alone = make_plan(compose(*SMALL, f"algorithm={algorithm}", "algorithm.batch_size=20", "privacy.l2_clip=0.05"))
    np.testing.assert_array_equal(plan.privacy.noise_multiplier[:4], alone.privacy.noise_multiplier)
    std = np.asarray(built.noise.noise_std)
    one = np.asarray(alone.protocol.build_algorithm(0.05).noise.noise_std)
    np.testing.assert_allclose(std[:4], one)
    np.testing.assert_allclose(std[4:], one * (1e32 / 0.05))
    # the clip moves the noise, never the privacy spent
    np.testing.assert_array_equal(plan.privacy.planned_epsilon[:4], plan.privacy.planned_epsilon[4:])


@pytest.mark.parametrize("extra", [(), ("privacy=none",), ("algorithm=isrl_dp_local_sgd", "algorithm.batch_size=20")])
def test_a_clip_block_of_a_run_equals_a_run_whose_grid_is_that_clip(extra):
    grid = run(make_plan(compose(*SMALL, *extra, CLIPS)), inline=True)
    for block, clip in enumerate(("0.05", "1e32")):
        alone = run(make_plan(compose(*SMALL, *extra, f"privacy.l2_clip=[{clip}]")), inline=True)
        rows = slice(4 * block, 4 * block + 4)
        # Equal up to BLAS summation order, which may differ with the replica count.
        np.testing.assert_allclose(grid.last_iterate[rows], alone.last_iterate, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(grid.final["train_loss"][rows], alone.final["train_loss"], rtol=1e-9)
    # the tight clip shrinks every step: its models differ from the unclipped block's
    assert not np.allclose(grid.last_iterate[:4], grid.last_iterate[4:])


def test_a_grid_of_one_clip_clips_and_adds_noise_like_the_number():
    """Only the streams differ (a grid keys them by the clip too): with common random numbers,
    which key them by the repetition alone, the runs are equal."""
    common = (*SMALL, "replicas.common_random_numbers=true")
    grid = run(make_plan(compose(*common, "privacy.l2_clip=[0.05]")), inline=True)
    alone = run(make_plan(compose(*common, "privacy.l2_clip=0.05")), inline=True)
    np.testing.assert_allclose(grid.last_iterate, alone.last_iterate, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("value, base", [
    ("[]", SMALL), ("[1,1]", SMALL), ("[0,2]", SMALL), ("[1,1e33]", SMALL), ("[1,true]", SMALL),
    ("[[1],[2]]", SMALL), ("[1,{a:2}]", SMALL),
    ("[1,2]", (*SMALL, "algorithm=sdp_mb_sgd", "privacy=shuffle", "algorithm.batch_size=1")),
    ("[1,2]", ("experiment=theory_mb_sgd_convex",)),
    ("[1,2]", ("experiment=p_sgd_synthetic",)),
])
def test_bad_clip_grids_are_refused_before_anything_runs(value, base):
    with pytest.raises(ConfigError, match=r"privacy\.l2_clip"):
        make_plan(compose(*base, f"privacy.l2_clip={value}"))


def test_the_report_reads_one_job_per_budget_and_clip():
    job = {"algorithm": "isrl_dp_mb_sgd", "private": True, "epsilon": float("nan"),
           "step_sizes": np.array([0.1, 1.0] * 4), "repetitions": np.zeros(8, dtype=int),
           "train_loss": np.arange(8.0), "test_error": np.arange(8.0) / 10,
           "epsilon_spent": np.array([0.4, 0.5, 0.3, 0.2, 3.0, 3.5, 2.0, 2.5]),
           "l2_clip": np.array([1.0, 1.0, 1e32, 1e32] * 2, dtype=object)}
    parts = split_by_setting(job, [0.5] * 4 + [4.0] * 4)
    assert [(p["epsilon"], p["l2_clip"]) for p in parts] == [(0.5, 1.0), (0.5, 1e32), (4.0, 1.0), (4.0, 1e32)]
    np.testing.assert_array_equal(parts[3]["train_loss"], [6.0, 7.0])
    assert [p["epsilon_accountant"] for p in parts] == [0.5, 0.3, 3.5, 2.5]


def test_a_non_private_run_with_a_clip_grid_is_selected_jointly_over_its_clips():
    """The baselines' cells have no budget (NaN): the clips of one trial still form one cell."""
    job = {"algorithm": "mb_sgd", "private": False, "epsilon": float("nan"), "num_silos": 7, "silos_per_round": 3,
           "seed": 0, "trial": 0, "step_sizes": np.array([0.1, 1.0] * 2), "repetitions": np.zeros(4, dtype=int),
           "train_loss": np.array([0.9, 0.8, 0.7, 0.95]), "test_error": np.array([0.3, 0.2, 0.1, 0.4]),
           "epsilon_spent": np.full(4, np.nan), "l2_clip": np.array([1.0, 1.0, 1e32, 1e32], dtype=object),
           "accountant": "rdp", "spec": {"_target_": "x"}, "loss": {"_target_": "y"}}
    parts = split_by_setting(job, None)
    assert [p["l2_clip"] for p in parts] == [1.0, 1e32]
    key = json.dumps({"spec": job["spec"], "loss": job["loss"], "seed": 0, "trial": 0}, sort_keys=True)
    cache = {key: {"f_star": 0.5, "upsilon2": 0.1, "task": "multiclass"}}
    selection = select(parts, cache)
    assert len(selection) == 1
    row = selection.iloc[0]
    assert row["clips_tried"] == 2 and row["l2_clip"] == 1e32 and row["step_size"] == 0.1
    assert math.isnan(row["epsilon"])


def test_stream_keys_are_each_replicas_repetition_and_setting_words():
    """Replica p's stream key is (repetition, words of its step size, budget, clip): the key every
    private draw of the replica is seeded with, so a change would change every result."""
    from fedray.rng import setting_words

    plan = make_plan(compose(*SMALL, CLIPS, "privacy.epsilon_grid=[0.5,4]"))
    expected = [[rep, *setting_words(step), *setting_words(eps), *setting_words(clip)] for rep, step, eps, clip
                in zip(plan.repetitions, plan.step_sizes, plan.epsilon_levels, plan.l2_clips)]
    np.testing.assert_array_equal(plan.replicas.streams, expected)
    plain = make_plan(compose(*SMALL, "privacy.epsilon=2"))
    expected = [[rep, *setting_words(step), *setting_words(2.0)] for rep, step in zip(plain.repetitions, plain.step_sizes)]
    np.testing.assert_array_equal(plain.replicas.streams, expected)
