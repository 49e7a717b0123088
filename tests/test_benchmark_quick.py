"""The benchmark's quick mode (numpy vs fedray, small N, few rounds), so the script cannot rot.

No timing is asserted: the benchmark prints numbers. What is checked: the runners and Ray's own
start-up floor finish, the final losses agree within the numpy loop's seed-to-seed spread, and the
table prints.
"""

import importlib.util
import sys

import numpy as np
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

BENCHMARK = REPO / "experiments" / "benchmark"


def _load_run_module():
    spec = importlib.util.spec_from_file_location("benchmark_run", BENCHMARK / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCHMARK))
    spec.loader.exec_module(module)
    return module


@pytest.mark.long
def test_quick_benchmark_runs_fedray_and_numpy_and_their_losses_agree(tmp_path, capsys):
    bench = _load_run_module()

    results = bench.main(["--quick", "--jobs", "quick-N10", "--workdir", str(tmp_path)])

    (result,) = results
    runners = result["runners"]
    assert set(runners) == {*result["job"]["fedray_variants"], "Ray floor", "numpy"}
    assert all("error" not in rep for rep in runners.values()), runners
    # Ray's own start-up (ray.init and as many empty actors as fedray started, each called once)
    floor = runners.pop("Ray floor")
    assert floor["rounds"] == 1 and floor["num_actors"] == runners[next(iter(result["job"]["fedray_variants"]))]["num_actors"]
    assert np.isfinite(floor["first_round"]) and floor["first_round"] > 0
    assert runners["numpy"]["final_train_loss"] < runners["numpy"]["train_loss"][0] - 0.005   # it trained
    # Within noise: the numpy loop's final loss over other seeds gives the mean and spread.
    tolerance = max(5.0 * result["seed_std"], 2e-3)
    for name, rep in runners.items():
        assert rep["rounds"] == result["job"]["num_rounds"]
        assert abs(rep["final_train_loss"] - result["seed_mean"]) <= tolerance, (name, rep, result["seed_mean"])
    printed = capsys.readouterr().out
    assert "| job | runner | rounds | s/round after the first (mean)" in printed
    assert (tmp_path / "table.md").read_text().count("synthetic N=10 ") == 5     # 4 runners, 1 ratio row
    assert "fedray none ÷ Ray floor" in printed


def test_protocol_trials_are_one_count_or_counts_per_protocol(capsys):
    import argparse

    run = _load_run_module()
    parser = argparse.ArgumentParser()
    assert run.protocol_trials(parser, ["3"]) == {"e1": 3, "e2": 3}
    assert run.protocol_trials(parser, ["e1=2"]) == {"e1": 2, "e2": 20}
    for bad, named in ((["e3=2"], "'e3'"), (["0"], "'0'"), (["e1=x"], "'e1=x'")):
        with pytest.raises(SystemExit):
            run.protocol_trials(parser, bad)
        assert named in capsys.readouterr().err


def test_the_targets_table_says_met_only_when_every_measured_ratio_is_within_its_limit():
    run = _load_run_module()

    def job(name, **runners):
        return {"job": {"name": name, "num_silos": 10}, "runners": runners}

    results = [job("synthetic-N10", **{"fedray, privacy=none": {"steady": 1.9, "first_round": 6.0},
                                       "Ray floor": {"first_round": 5.0}, "numpy": {"steady": 1.0}}),
               job("mnist", **{"fedray, paper (eps=3)": {"steady": 2.1, "first_round": 6.4},
                               "Ray floor": {"first_round": 5.0}, "numpy": {"steady": 1.0}})]
    protocols = [{"protocol": "e1", "trials": 2, "fedray": [{"seconds": 100.0}, {"seconds": 40.0}],
                  "numpy": {"seconds": 100.0}}]
    rows = {line.split(" |")[0]: line for line in run.targets_table(results, protocols).splitlines()[2:]}
    assert rows["| 1. command to first round ÷ Ray's floor (jobs without data generation)"].endswith("| yes |")
    small = rows["| 2. s/round ÷ the numpy loop, N = 10 and E1's N = 25"]
    assert "synthetic-N10 privacy=none 1.90x" in small and "mnist paper 2.10x" in small and small.endswith("| no |")
    assert rows["| 3. whole tuning protocol ÷ its numpy limit"].endswith("E1 (2 trials) 1.40x | yes |")


def test_e2s_protocol_is_one_multirun_over_the_settings_all_sh_ran_as_eight():
    _load_run_module()                       # puts the benchmark's folder on the path
    import tuning_protocol

    (sweep,) = tuning_protocol.sweeps("e2", 2)
    jobs = tuning_protocol.launched(sweep)
    settings = [(n, m) for n, m in ((10, 5), (3, 3), (5, 5), (15, 15)) for _ in ("private", "baseline")]
    assert [group for group, _ in jobs] == [g for g in range(8) for _ in range(4)]   # 2 trials x 2 algorithms
    for group, overrides in jobs:
        n, m = settings[group]
        private = group % 2 == 0
        assert f"data.spec.num_silos={n}" in overrides and f"participation.silos_per_round={m}" in overrides
        assert ("privacy=none" in overrides) == (not private)
        algorithm = next(o for o in overrides if o.startswith("algorithm=")).split("=")[1]
        assert algorithm in (("isrl_dp_mb_sgd", "isrl_dp_local_sgd") if private else ("mb_sgd", "local_sgd"))
    trials = [next(o for o in overrides if o.startswith("trial=")) for _, overrides in jobs[:4]]
    assert trials == ["trial=0", "trial=0", "trial=1", "trial=1"]        # trial slowest within a grid


def test_sweep_scaling_tries_1_2_4_workers_and_so_on_up_to_the_cpus():
    _load_run_module()
    import sweep_scaling

    assert [sweep_scaling.worker_counts(c, None) for c in (1, 2, 6, 8)] == [[1], [1, 2], [1, 2, 4, 6], [1, 2, 4, 8]]
    assert sweep_scaling.worker_counts(64, [3, 1, 3]) == [1, 3]
    with pytest.raises(SystemExit, match=r"\[0\]"):
        sweep_scaling.worker_counts(2, [0, 2])


def test_the_sweep_scaling_table_and_target_compare_each_mode_with_one_worker_sequential_and_numpy():
    run = _load_run_module()
    import sweep_scaling

    def mode(workers, seconds, same=True):
        return {"mode": str(workers), "workers": workers, "seconds": seconds, "peak_rss": 0.0, "background_cores": 0.0,
                "same_as_sequential": same, "finished_runs": 8}

    result = {"sweep": "E2 quick", "jobs": 8, "cpus": 2, "address": None, "numpy": {"seconds": 50.0, "peak_rss": 0.0,
                                                                                      "background_cores": 0.0},
              "modes": [mode(None, 100.0), mode(1, 120.0), mode(2, 60.0, same=False)]}
    rows = sweep_scaling.table(result).splitlines()[4:]
    # sequential 100 s: 100 / 50 = 2.00x numpy; 1 worker 120 s: 100 / 120 = 0.83x sequential, 2.40x numpy;
    # 2 workers 60 s: 120 / 60 = 2.00x one worker, 100 / 60 = 1.67x sequential, 60 / 50 = 1.20x numpy
    assert rows[0].startswith("| fedray (one after another) | - | 100.0 | - | 1.00x | 2.00x |")
    assert rows[1].startswith("| ray_jobs | 1 | 120.0 | 1.00x | 0.83x | 2.40x |") and rows[1].endswith("| yes (8 runs) |")
    assert rows[2].startswith("| ray_jobs | 2 | 60.0 | 2.00x | 1.67x | 1.20x |") and rows[2].endswith("| no (8 runs) |")
    assert rows[3].startswith("| numpy limit (one process, one core) | - | 50.0 |")
    target = run.targets_table([], [], result).splitlines()[-1]
    assert target.startswith("| 5. sweep (E2 quick) on 2 warm job workers") and "0.60x" in target and target.endswith("| yes |")
    result["modes"][2]["seconds"] = 100.0       # a tie does not beat the sequential sweep
    assert run.targets_table([], [], result).splitlines()[-1].endswith("| no |")


def test_the_page_gets_the_tables_between_its_markers_and_keeps_its_prose(tmp_path, capsys):
    """``--page`` replaces what is between the two markers only; a page without them is refused
    before anything is written (an hour of measuring would otherwise end in a lost table)."""
    run = _load_run_module()
    page = tmp_path / "performance.md"
    page.write_text(f"# Performance\n\nintro\n\n{run.PAGE_BEGIN}\nold table\n{run.PAGE_END}\n\nwhat remains\n")
    run.write_page(page, "machine X", "| a |\n|---|")
    assert page.read_text() == (f"# Performance\n\nintro\n\n{run.PAGE_BEGIN}\n\nMachine and software: machine X.\n\n"
                                f"| a |\n|---|\n\n{run.PAGE_END}\n\nwhat remains\n")
    run.write_page(page, "machine Y", "| b |")        # again: the same markers, the new block
    assert "machine X" not in page.read_text() and page.read_text().count(run.PAGE_BEGIN) == 1
    unmarked = tmp_path / "other.md"
    unmarked.write_text("no markers\n")
    with pytest.raises(SystemExit, match="needs the lines"):
        run.write_page(unmarked, "machine", "| t |")
    assert unmarked.read_text() == "no markers\n"
    with pytest.raises(SystemExit):            # before any job runs
        run.main(["--jobs", "synthetic-N10", "--page", str(unmarked)])
    assert f"--page {unmarked}: needs the lines" in capsys.readouterr().err


def test_e2s_protocol_target_takes_the_faster_launcher_when_the_scaling_sweep_reused_its_runs():
    """Issue 45 asks E2's whole protocol within 1.5x of its numpy limit with whichever launcher is
    faster here: when the scaling table reused E2's protocol runs, target 3 uses its fastest mode
    whose metrics equal the sequential sweep's, and shows the sequential ratio beside it."""
    run = _load_run_module()
    e2 = {"protocol": "e2", "trials": 20, "fedray": [{"seconds": 600.0}], "numpy": {"seconds": 300.0}}

    def scaling(reused, same=True):
        return {"sweep": "E2 protocol, 20 trials", "reused": reused, "modes": [
            {"workers": None, "seconds": 600.0, "same_as_sequential": True},
            {"workers": 1, "seconds": 620.0, "same_as_sequential": True},
            {"workers": 2, "seconds": 420.0, "same_as_sequential": same}]}

    row = [line for line in run.targets_table([], [e2], scaling(True)).splitlines() if line.startswith("| 3.")][0]
    assert "E2 (20 trials), one after another 2.00x, on 2 warm job workers 1.40x" in row and row.endswith("| yes |")
    for other in (scaling(False), scaling(True, same=False)):      # another sweep, or different results
        row = [line for line in run.targets_table([], [e2], other).splitlines() if line.startswith("| 3.")][0]
        assert "E2 (20 trials) 2.00x" in row and row.endswith("| no |")


def test_the_performance_page_is_the_committed_invocations_output():
    """The tables on docs/performance.md are what ``--tables-from`` prints for the committed JSON
    of the invocation that made them: a hand edit of a number, or a page left behind by a change
    to the tables' code, fails here."""
    run = _load_run_module()
    import json

    saved = json.loads((BENCHMARK / "results" / "benchmark.json").read_text())
    text = run.tables(saved["results"], saved["protocols"], saved.get("scaling"))
    page = (REPO / "docs" / "performance.md").read_text()
    block = page.split(run.PAGE_BEGIN)[1].split(run.PAGE_END)[0]
    assert block == f"\n\n{run.page_header(saved['header'])}\n\n{text}\n\n"
