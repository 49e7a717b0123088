"""The run's algorithm section: one typed value per recipe (``ProtocolRecipe.settings``), built
and checked in one place (``fedray.plan.algorithm_settings``), which every recipe reads instead
of the config's dict."""

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from fedray.core.planning import AlgorithmSettings, Stepped, settings_of, with_algorithm
from fedray.errors import ConfigError
from fedray.plan import algorithm_settings, make_plan
from fedray.protocols.isrl_dp.accelerated import AcceleratedMinibatchSGD
from fedray.protocols.isrl_dp.minibatch_sgd import MinibatchSGD
from fedray.protocols.isrl_dp.settings import SiloSettings
from fedray.protocols.mirror_descent.planning import SmdSettings
from fedray.protocols.mirror_descent.smd import PrivateSMD
from fedray.protocols.user_level.accelerated_erm import AcceleratedPhasedERM
from fedray.protocols.user_level.sc_output_pert import SCOutputPert
from tests.conftest import REPO, compose


def _config(*overrides: str) -> dict:
    return OmegaConf.to_container(compose(*overrides), resolve=True)


def test_the_section_becomes_the_recipes_frozen_settings_with_its_defaults():
    settings = algorithm_settings(_config("experiment=smd_bilinear"), PrivateSMD.recipe)
    assert type(settings) is SmdSettings and isinstance(settings, Stepped)
    assert (settings.name, settings.regime, settings.parameters, settings.step_size) == \
        ("smd", "bilinear", "paper", None)          # step_size None: the paper rule sets it in resolve
    assert settings.draws == 1 and settings.block_steps == 4096
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.draws = 2          # type: ignore[misc]


def test_a_checked_number_takes_its_fields_kind_and_other_values_stay_as_written():
    settings = algorithm_settings(_config("experiment=smd_bilinear", "algorithm.draws=3.0",
                                          "algorithm.parameters=manual", "algorithm.step_size=[0.1,0.2]"),
                                  PrivateSMD.recipe)
    assert settings.draws == 3 and type(settings.draws) is int       # Positive int: 3.0 -> 3 (as positive() did)
    assert settings.step_size == [0.1, 0.2]                         # a grid, checked where replicas are built
    isrl = algorithm_settings(_config("experiment=isrl_dp_convex", "algorithm=isrl_dp_accelerated",
                                      "algorithm.strong_convexity=1"), AcceleratedMinibatchSGD.recipe)
    assert isrl.strong_convexity == 1 and type(isrl.strong_convexity) is int      # plain float: only checked


@pytest.mark.parametrize("overrides,recipe,message", [
    (["experiment=smd_bilinear", "algorithm.draws=0"], PrivateSMD.recipe,
     "algorithm.draws must be a positive integer; got 0"),
    (["experiment=smd_bilinear", "algorithm.block_steps=2.5"], PrivateSMD.recipe,
     "algorithm.block_steps must be a positive integer; got 2.5"),
    (["experiment=smd_bilinear", "algorithm.regime=bogus"], PrivateSMD.recipe,
     "algorithm.regime must be one of ('first_order', 'second_order', 'bilinear') (Thm 3.1 (5), (6), (7)); "
     "got 'bogus'"),
    (["experiment=smd_bilinear", "algorithm.parameters=exact"], PrivateSMD.recipe,
     "algorithm.parameters must be one of ('paper', 'bound', 'manual'); got 'exact'"),
    (["experiment=smd_bilinear", "+algorithm.drawz=2"], PrivateSMD.recipe,
     "algorithm.drawz must be a known key of algorithm (did you mean algorithm.draws?): block_steps, draws, name, "
     "parameters, regime, step_size; got 2"),
    (["experiment=isrl_dp_convex", "algorithm.average_last=abc"], MinibatchSGD.recipe,
     "algorithm.average_last must be a positive integer; got 'abc'"),
    (["experiment=isrl_dp_convex", "algorithm=isrl_dp_accelerated", "algorithm.strong_convexity=abc"],
     AcceleratedMinibatchSGD.recipe, "algorithm.strong_convexity must be a number; got 'abc'"),
    (["experiment=user_level_sphere", "algorithm.decay=1.5"], AcceleratedPhasedERM.recipe,
     "algorithm.decay must be q in (0, 1); got 1.5"),
    (["experiment=user_level_sphere", "algorithm.full_batch=1"], AcceleratedPhasedERM.recipe,
     "algorithm.full_batch must be true or false; got 1"),
    (["experiment=user_level_sphere", "algorithm.stages=bogus"], AcceleratedPhasedERM.recipe,
     "algorithm.stages must be one of ('multi', 'single') (GL13's restarts, or one AC-SA run per phase); "
     "got 'bogus'"),
    (["experiment=sc_output_pert_synthetic", "~algorithm.strong_convexity"], SCOutputPert.recipe,
     "algorithm.strong_convexity must be a positive number; got None"),      # no default: required
    (["experiment=sc_output_pert_synthetic", "algorithm.beta=1"], SCOutputPert.recipe,
     "algorithm.beta must be a failure probability in (0, 1); got 1"),
])
def test_each_bad_value_is_refused_here_in_one_line_naming_key_value_and_what_is_allowed(overrides, recipe, message):
    with pytest.raises(ConfigError) as err:
        algorithm_settings(_config(*overrides), recipe)
    assert str(err.value) == message and "\n" not in message


def test_the_planner_refuses_them_before_the_recipe_resolves_anything():
    """A bad value of the section fails the plan with the same line (the recipes no longer check it)."""
    with pytest.raises(ConfigError, match=r"^algorithm.draws must be a positive integer; got 0$"):
        make_plan(compose("experiment=smd_bilinear", "algorithm.draws=0"))


def test_the_settings_are_built_again_after_resolve():
    """The paper rule writes tau into the section (None before ``resolve``); the replicas' step
    sizes, built from the settings, are that tau: the settings were rebuilt from the resolved
    section, not kept from before it (a Stepped setting of None is refused there)."""
    plan = make_plan(compose("experiment=smd_bilinear"))
    assert plan.config["algorithm"]["step_size"] is not None
    assert np.all(plan.step_sizes == plan.config["algorithm"]["step_size"]) and plan.num_replicas == 20
    with pytest.raises(ConfigError, match=r"^algorithm.step_size must be a positive number; got None$"):
        make_plan(compose("experiment=smd_bilinear", "algorithm.parameters=manual"))


def test_settings_of_types_a_recipes_own_settings_and_names_a_mismatch():
    settings = algorithm_settings(_config("experiment=isrl_dp_convex"), MinibatchSGD.recipe)
    assert settings_of(SiloSettings, settings) is settings
    with pytest.raises(TypeError, match="does not declare"):
        settings_of(SmdSettings, settings)


def test_with_algorithm_writes_a_copy():
    config = {"algorithm": {"name": "smd", "step_size": None}, "num_rounds": 3}
    written = with_algorithm(config, step_size=0.5, draws=2)
    assert written == {"algorithm": {"name": "smd", "step_size": 0.5, "draws": 2}, "num_rounds": 3}
    assert config["algorithm"] == {"name": "smd", "step_size": None}


def test_every_recipe_declares_its_settings_as_a_frozen_dataclass():
    from hydra.utils import get_class

    paths = sorted((REPO / "fedray" / "conf" / "algorithm").glob("*.yaml")) + \
        sorted((REPO / "examples").rglob("conf/algorithm/*.yaml"))
    targets = {OmegaConf.load(path).get("_target_") for path in paths} - {None}       # a child preset inherits it
    assert len(targets) >= 20
    for target in targets:
        kind = get_class(target).recipe.settings
        assert issubclass(kind, AlgorithmSettings) and kind.__dataclass_params__.frozen, target


def dict_reads(root: Path) -> list[str]:
    """Reads of the algorithm section as a dict in the protocol packages and the example:
    ``config["algorithm"]``, ``x.get("algorithm")``, and the old ``alg[...]`` / ``alg.get(...)``."""
    sources = sorted((root / "fedray" / "protocols").rglob("*.py")) + sorted((root / "examples").rglob("*.py"))
    found = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            section = isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                ast.unparse(node.slice) == "'algorithm'"
            got = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and \
                (ast.unparse(node.func.value) == "alg" or node.args and ast.unparse(node.args[0]) == "'algorithm'")
            old = isinstance(node, ast.Subscript) and ast.unparse(node.value) == "alg"
            if section or got or old:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_recipe_reads_the_algorithm_section_as_a_dict():
    """Such a read would bypass the one place that checks the section (``with_algorithm`` writes)."""
    assert dict_reads(REPO) == []


def test_the_settings_a_recipe_passes_on_are_constructor_fields_with_the_same_defaults():
    """The ISRL-DP and P_vec recipes hand their settings (but the planner's own) to the algorithm
    class, where a key the config leaves out used to take the class's default: the settings'
    default must be that default, or a run without the key would change."""
    import fedray.protocols.isrl_dp as isrl_dp
    import fedray.protocols.shuffle_sco as shuffle_sco
    from fedray.protocols.isrl_dp.planning import RESOLVED_SETTINGS
    from fedray.protocols.shuffle_sco.planning import OWN_FIELDS

    classes = [getattr(isrl_dp, name) for name in ("MinibatchSGD", "LocalSGD", "ShuffledSGD", "AcceleratedMinibatchSGD",
                                                   "OnePassAcceleratedSGD", "MultiStageAcceleratedSGD",
                                                   "MultiStageOnePassSGD", "ShuffledOnePassAcceleratedSGD")]
    classes += [shuffle_sco.PSGD, shuffle_sco.PAGD, shuffle_sco.PGD]
    for algorithm in classes:
        own = {f.name: f.default for f in dataclasses.fields(algorithm)}
        passed = [f for f in dataclasses.fields(algorithm.recipe.settings)
                  if f.name not in RESOLVED_SETTINGS and (algorithm not in classes[-3:] or f.name in OWN_FIELDS)]
        assert passed, algorithm
        for setting in passed:
            assert setting.name in own and own[setting.name] == setting.default, (algorithm.__name__, setting.name)
