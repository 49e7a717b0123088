"""Sweeps and their jobs are named by what they vary, within what the MLflow UI's name column shows."""

from omegaconf import OmegaConf

from fedray.sweep import job_label, sweep_name, swept_keys


def _config(task, params=None, experiment="isrl_dp_convex"):
    return OmegaConf.create({"hydra": {"overrides": {"task": task}, "sweeper": {"params": params},
                                       "runtime": {"choices": {"experiment": experiment, "algorithm": "p_sgd"}}}})


def test_a_sweep_is_named_by_its_preset_and_what_it_sweeps():
    config = _config(["experiment=isrl_dp_convex", "privacy.epsilon=1,3", "num_rounds=5", "seed=range(0,2)"])

    assert sweep_name(config) == "isrl_dp_convex: privacy.epsilon=1,3 seed=range(0,2)"
    assert sweep_name(config, "e1_mnist") == "e1_mnist: privacy.epsilon=1,3 seed=range(0,2)"
    assert sweep_name(_config(["algorithm.step_size=0.1,0.2"], experiment=None)) == "p_sgd: algorithm.step_size=0.1,0.2"
    assert swept_keys(config) == ["privacy.epsilon", "seed"]


def test_a_sweepers_own_grid_is_named_by_its_keys():
    config = _config(["experiment=e1_mnist"], params={"trial": "0,1", "privacy.epsilon": "1,3"})

    assert sweep_name(config) == "isrl_dp_convex: trial privacy.epsilon"
    assert swept_keys(config) == ["trial", "privacy.epsilon"]


def test_a_union_of_grids_is_named_by_the_keys_of_every_grid():
    config = _config(["experiment=e2_insurance_all", "trial=0,1"], params=None)
    config.hydra.sweeper.grids = [{"data.spec.num_silos": "3,5"}, {"data.spec.num_silos": "10", "privacy": "none"}]

    assert sweep_name(config) == "isrl_dp_convex: trial=0,1 data.spec.num_silos privacy"
    assert swept_keys(config) == ["trial", "data.spec.num_silos", "privacy"]


def test_a_long_sweep_name_is_cut_with_an_ellipsis():
    name = sweep_name(_config([f"+k{i}=1,2" for i in range(40)]))
    assert len(name) == 120 and name.endswith("…")


def test_a_jobs_label_holds_the_swept_values_first_and_short():
    label = job_label(["experiment=isrl_dp_convex", "algorithm.step_size=0.3", "privacy.epsilon=1"],
                      ("privacy.epsilon", "algorithm.step_size"))
    assert label == "epsilon=1 step_size=0.3"
    assert job_label(["privacy.epsilon=1"], ()) == ""
