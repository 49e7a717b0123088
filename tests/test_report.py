"""fedray.report: the paper's selection rule, trial statistics and claims on hand-made runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.report import claims_obesity, claims_table, complete_trials, evaluation_metric, select, summarise

CACHE_KEY_FIELDS = {"spec": {"_target_": "x"}, "loss": {"_target_": "y"}}


def _job(algorithm, eps, trial, train_loss, test_error, steps=(0.1, 1.0), reps=2, clip=1.0):
    step_sizes = np.tile(steps, reps)
    return {"algorithm": algorithm, "epsilon": eps, "l2_clip": clip, "num_silos": 7, "silos_per_round": 3,
            "seed": trial, "trial": trial, "step_sizes": step_sizes,
            "repetitions": np.repeat(np.arange(reps), len(steps)),
            "train_loss": np.asarray(train_loss, float), "test_error": np.asarray(test_error, float),
            "epsilon_accountant": 2 * eps, "accountant": "rdp",
            **CACHE_KEY_FIELDS}


def _cache(jobs, f_star=0.5, task="multiclass"):
    import json

    cache = {}
    for job in jobs:
        key = json.dumps({"spec": job["spec"], "loss": job["loss"], "seed": job["seed"], "trial": job["trial"]},
                         sort_keys=True, default=str)
        cache[key] = {"f_star": f_star, "upsilon2": 0.1, "task": task, "test_count": 4, "test_total_ss": 16.0}
    return cache


def test_selection_minimises_mean_training_excess_loss_and_averages_test_metric():
    # Replicas: (step 0.1, rep 0), (1.0, rep 0), (0.1, rep 1), (1.0, rep 1).
    # Mean train loss: step 0.1 -> (0.9 + 0.7) / 2 = 0.8; step 1.0 -> (0.6 + 1.2) / 2 = 0.9.
    job = _job("isrl_dp_mb_sgd", 1.0, 0, [0.9, 0.6, 0.7, 1.2], [0.3, 0.1, 0.5, 0.1])

    (row,) = select([job], _cache([job])).to_dict("records")

    assert row["step_size"] == 0.1
    assert row["excess_loss"] == pytest.approx(0.3)     # 0.8 - F* (0.5)
    assert row["test_metric"] == pytest.approx(0.4)     # mean of 0.3 and 0.5, not the best test error
    assert row["step_at_grid_edge"]


def test_diverged_replicas_are_never_selected_and_clip_is_selected_across_runs():
    small_clip = _job("isrl_dp_mb_sgd", 1.0, 0, [np.nan, 0.6, 0.7, 0.6], [0.9, 0.2, 0.9, 0.2], clip=1.0)
    large_clip = _job("isrl_dp_mb_sgd", 1.0, 0, [0.55, 0.9, 0.55, 0.9], [0.1, 0.3, 0.1, 0.3], clip=100.0)

    (row,) = select([small_clip, large_clip], _cache([small_clip])).to_dict("records")

    assert (row["step_size"], row["l2_clip"], row["clips_tried"]) == (0.1, 100.0, 2)
    assert row["test_metric"] == pytest.approx(0.1)


def test_regression_metric_is_relative_rmse():
    info = {"task": "regression", "test_count": 4, "test_total_ss": 16.0}
    # mse 4 over 4 records: sum of squares 16 = the naive total -> 1.
    assert evaluation_metric(np.array([4.0, 1.0]), info) == pytest.approx([1.0, 0.5])


def test_summary_gives_mean_and_percentiles_over_trials():
    jobs = [_job("isrl_dp_mb_sgd", 1.0, t, [0.6] * 4, [0.1 * (t + 1)] * 4) for t in range(5)]

    (row,) = summarise(select(jobs, _cache(jobs))).to_dict("records")

    assert row["trials"] == 5
    assert row["metric_mean"] == pytest.approx(0.3)
    assert row["metric_p5"] == pytest.approx(np.percentile([0.1, 0.2, 0.3, 0.4, 0.5], 5))
    assert row["metric_p95"] == pytest.approx(np.percentile([0.1, 0.2, 0.3, 0.4, 0.5], 95))


@pytest.mark.parametrize("mb_sgd, local_sgd, verdict", [
    (0.4, 0.5, "holds"),              # (0.5 - 0.4) / 0.5 = +20%: inside 10-30%
    (0.48, 0.5, "does not hold"),     # +4%: too small a gain
    (0.3, 0.5, "does not hold"),      # +40%: more than the paper claims
    (0.5, 0.4, "does not hold"),      # -25%: the ratio taken the wrong way round would read +20%
])
def test_obesity_claim_verdicts(mb_sgd, local_sgd, verdict):
    """Catches a claim that compares the wrong pair, inverts the gain or holds whatever the numbers."""
    results = pd.DataFrame([
        {"num_silos": 7, "silos_per_round": 3, "algorithm": a, "private": True, "epsilon": 1.0, "metric_mean": m}
        for a, m in (("isrl_dp_mb_sgd", mb_sgd), ("isrl_dp_local_sgd", local_sgd))
    ])

    (claim,) = claims_obesity(results)
    table = claims_table([claim])

    assert claim[2] == verdict
    assert f"{100 * (local_sgd - mb_sgd) / local_sgd:+.0f}%" in claim[1]
    assert table.splitlines()[2] == f"| {claim[0]} | {claim[1]} | {verdict} |"


def test_incomplete_trials_are_left_out_of_the_summary():
    jobs = [_job("isrl_dp_mb_sgd", e, t, [0.6] * 4, [0.2] * 4) for t in range(2) for e in (1.0, 3.0)]
    jobs.append(_job("isrl_dp_mb_sgd", 1.0, 2, [0.6] * 4, [0.9] * 4))   # trial 2 lacks eps 3

    kept, dropped = complete_trials(select(jobs, _cache(jobs)))

    assert sorted(kept["trial"].unique()) == [0, 1]
    assert dropped == [(7, 3, 2, 1)]


def test_an_extra_private_curve_is_drawn_as_a_curve_and_gets_no_claim(tmp_path, monkeypatch):
    """Catches the extra algorithm (isrl_dp_accelerated) dropped from the figure, drawn as a
    non-private horizontal baseline, or entering the paper's claims."""
    import matplotlib.pyplot as plt

    from experiments.report import figure

    jobs = [_job(alg, eps, 0, [0.9, 0.6, 0.7, 1.2], [0.3, 0.1, 0.5, 0.1])
            for alg in ("isrl_dp_mb_sgd", "isrl_dp_local_sgd", "isrl_dp_accelerated") for eps in (1.0, 3.0)]
    results = summarise(select(jobs, _cache(jobs)))
    drawn = []
    monkeypatch.setattr(plt, "close", drawn.append)     # keep the figure to read its lines

    figure(results, tmp_path / "f.png", "test error", "t")

    (ax,) = drawn[0].axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    extra = lines["ISRL-DP accelerated MB-SGD (extra)"]
    assert list(extra.get_xdata()) == [1.0, 3.0]        # one point per budget, not a flat baseline
    assert extra.get_linestyle() == ":"
    assert (tmp_path / "f.png").stat().st_size > 0
    claims = claims_obesity(results)
    assert len(claims) == 2 and not any("accelerated" in claim for row in claims for claim in row)
    plt.close(drawn[0])
