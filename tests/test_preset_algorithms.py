"""Defaults that run: the bare command plans within its budget, a preset's algorithm values reach
its own algorithms only (fedray/conf/tuning/<preset>/<algorithm>.yaml), and every preset with every
algorithm of its family either plans or is refused in one line naming why."""

import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from fedray.errors import BudgetError, ConfigError
from fedray.plan import make_plan
from fedray.runtime.driver import run
from tests.conftest import REPO, compose

CONF = REPO / "fedray" / "conf"
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
ALGORITHMS = sorted(p.stem for p in (CONF / "algorithm").glob("*.yaml"))
START_LOSS = math.log(2)        # the logistic loss of the starting model w = 0


def _family(algorithm: str) -> str:
    """The protocol package an algorithm belongs to (isrl_dp, shuffle_sco, mirror_descent, user_level):
    the ``_target_`` its file sets, or else the one of the file its defaults list extends (a
    baseline extends its private twin), read from the YAML files (a composition per algorithm
    cost 28 of them, about 6 s; the test's own check is that each preset's algorithm lands in the
    preset's family)."""
    node = OmegaConf.load(CONF / "algorithm" / f"{algorithm}.yaml")
    while "_target_" not in node:
        (parent,) = [entry for entry in node.defaults if entry != "_self_"]
        node = OmegaConf.load(CONF / "algorithm" / f"{parent}.yaml")
    return node["_target_"].split(".")[2]


def _parents(preset: str) -> list[str]:
    """The other presets ``preset`` extends (entries of its defaults list naming an experiment)."""
    defaults = OmegaConf.load(CONF / "experiment" / f"{preset}.yaml").get("defaults") or []
    return [entry for entry in defaults if isinstance(entry, str) and entry in PRESETS]


@pytest.mark.parametrize("preset", [p for p in PRESETS if _parents(p)])
def test_a_preset_that_extends_another_keeps_its_values_for_every_algorithm(preset):
    """Catches a derived preset (e2_insurance_all, E2's whole protocol) whose jobs silently lose the
    parent's algorithm values: the tuning lookup is by the preset's own name, so without
    tuning/<preset>/ its baselines ran with the algorithm's default batch size (182, refused at
    N = 15) and its private runs with another K."""
    for parent in _parents(preset):
        for path in sorted((CONF / "tuning" / parent).glob("*.yaml")):
            derived = compose(f"experiment={preset}", f"algorithm={path.stem}").algorithm
            assert OmegaConf.to_container(derived) == OmegaConf.to_container(
                compose(f"experiment={parent}", f"algorithm={path.stem}").algorithm), (preset, path.stem)


def test_switching_the_algorithm_in_a_preset_keeps_that_algorithms_own_defaults():
    def step(*overrides):
        return compose(*overrides).algorithm.step_size

    assert step("experiment=isrl_dp_convex") == 0.3                  # the main job's step
    assert step("experiment=isrl_dp_convex", "algorithm=mb_sgd") == 0.3    # and its non-private twin
    own = step("algorithm=isrl_dp_local_sgd")
    assert own == 0.05 and step("experiment=isrl_dp_convex", "algorithm=isrl_dp_local_sgd") == own
    assert step("experiment=isrl_dp_convex", "algorithm=isrl_dp_local_sgd", "algorithm.step_size=0.2") == 0.2
    assert step("experiment=isrl_dp_convex", "algorithm.step_size=0.1") == 0.1
    e1 = OmegaConf.to_container(compose("experiment=e1_mnist", "algorithm=isrl_dp_local_sgd").algorithm, resolve=True)
    assert e1["batch_size"] == 444 and len(e1["step_size"]) == 10 and e1["step_size"][-1] == pytest.approx(math.exp(-1), rel=1e-5)
    one_pass = OmegaConf.to_container(compose("experiment=e1_mnist", "algorithm=isrl_dp_one_pass").algorithm)
    assert one_pass == OmegaConf.to_container(compose("algorithm=isrl_dp_one_pass").algorithm)
    assert step("experiment=p_sgd_synthetic") == 0.5 and step("experiment=p_sgd_synthetic", "algorithm=p_agd") == 0.1


def test_the_bare_command_plans_within_its_budget_and_lowers_the_loss(ray_local):
    plan = make_plan(compose("progress=false"))
    assert float(plan.privacy.planned_epsilon.max()) <= 3.0
    result = run(plan)
    assert float(np.max(result.final["train_loss"])) < START_LOSS


@pytest.mark.slow  # two accountant searches (the advice, then privacy.calibration=accountant): 15-30 s
@pytest.mark.same_worker("convex_local_sgd")   # the refusal's search, 9 s: the other test reads it stored
def test_local_sgd_in_the_main_jobs_preset_is_refused_in_one_line_naming_the_way_out():
    """The issue's case: the paper's noise formula for local SGD overspends the preset's budget."""
    with pytest.raises(BudgetError) as err:
        make_plan(compose("experiment=isrl_dp_convex", "algorithm=isrl_dp_local_sgd"))
    assert "\n" not in str(err.value) and "privacy.calibration=accountant" in str(err.value)
    plan = make_plan(compose("experiment=isrl_dp_convex", "algorithm=isrl_dp_local_sgd", "privacy.calibration=accountant"))
    assert plan.step_sizes.tolist() == [0.05] and float(np.max(plan.privacy.planned_epsilon)) <= 3.0


@pytest.mark.slow
@pytest.mark.same_worker("convex_local_sgd")   # plans isrl_dp_convex with local SGD too (refused)
def test_every_preset_with_every_algorithm_of_its_family_plans_or_is_refused_in_one_line():
    family = {algorithm: _family(algorithm) for algorithm in ALGORITHMS}
    outcomes = {}
    for preset in PRESETS:
        cfg = compose(f"experiment={preset}")
        shrink = ["privacy.epsilon_grid=null"] if cfg.privacy.get("epsilon_grid") is not None else []
        for algorithm in (a for a in ALGORITHMS if family[a] == family[cfg.algorithm.name]):
            # the preset's own algorithm: the bare preset, the same composition as with algorithm= (checked
            # for all 23 presets when this was written) and the one a user runs first; one composition fewer
            chosen = [] if algorithm == cfg.algorithm.name else [f"algorithm={algorithm}"]
            try:
                plan = make_plan(compose(f"experiment={preset}", *chosen, *shrink))
            except (ConfigError, BudgetError) as err:
                assert "\n" not in str(err) and str(err), (preset, algorithm, str(err))
                outcomes[preset, algorithm] = "refused"
                continue
            privacy = plan.privacy
            if privacy.private and plan.config["privacy"].get("enforce_budget") is True:
                assert privacy.planned_epsilon is not None, (preset, algorithm)
                assert float(np.max(privacy.planned_epsilon)) <= float(np.max(privacy.target_epsilon)) * (1 + 1e-9)
            outcomes[preset, algorithm] = "planned"
    own = {preset: compose(f"experiment={preset}").algorithm.name for preset in PRESETS}
    assert all(outcomes[preset, algorithm] == "planned" for preset, algorithm in own.items())
    assert len(outcomes) > 150 and sum(v == "planned" for v in outcomes.values()) > 50
