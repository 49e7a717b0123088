"""The run's privacy settings: one typed value, built and checked in one place (``fedray.plan``),
which every recipe reads instead of the config's dict."""

import ast
import dataclasses

import numpy as np
import pytest
from omegaconf import OmegaConf

from fedray.core.planning import PrivacySettings, checked_term
from fedray.core.terms import Accountant, Calibration, Composition, TrustModel
from fedray.errors import ConfigError
from fedray.plan import make_plan, privacy_settings
from fedray.protocols.isrl_dp.minibatch_sgd import MinibatchSGD
from fedray.protocols.shuffle_sco.p_gd import PGD
from fedray.protocols.shuffle_sco.p_sgd import PSGD
from tests.conftest import REPO, compose


def _config(*overrides: str) -> dict:
    return OmegaConf.to_container(compose(*overrides), resolve=True)


def test_the_section_becomes_members_numbers_and_grids_as_written():
    settings = privacy_settings(_config("experiment=isrl_dp_convex", "privacy.l2_clip=[0.5,2]",
                                        "privacy.epsilon_grid=[1,4]", "privacy.enforce_budget=stop"),
                                MinibatchSGD.recipe)
    assert settings.trust_model is TrustModel.ISRL_DP and settings.private
    assert settings.calibration is Calibration.PAPER and settings.accountant is Accountant.RDP
    assert settings.epsilon == 3.0 and settings.delta is None
    assert settings.epsilon_grid == [1, 4] and settings.l2_clip == [0.5, 2]      # as written: errors show them so
    assert settings.enforce_budget == "stop" and settings.composition is None and settings.silo_level is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.epsilon = 9.0          # type: ignore[misc]


def test_a_protocols_own_key_is_typed_too():
    settings = privacy_settings(_config("experiment=p_gd_synthetic", "+privacy.composition=pld"), PGD.recipe)
    assert settings.composition is Composition.PLD and settings.trust_model is TrustModel.SDP


def test_without_privacy_a_budget_grid_is_not_read():
    """The grid means nothing without privacy, so it is neither checked nor handed on (as before)."""
    settings = privacy_settings(_config("experiment=isrl_dp_convex", "privacy=none", "privacy.epsilon_grid=[1,1]"),
                                MinibatchSGD.recipe)
    assert not settings.private and settings.epsilon_grid is None


@pytest.mark.parametrize("override,key,allowed", [
    ("privacy.trust_model=central", "privacy.trust_model", "one of ('isrl_dp', 'none') for isrl_dp_mb_sgd"),
    ("+privacy.composition=pld", "privacy.composition", "a known key of privacy"),
    ("privacy.epsilon=1e10", "privacy.epsilon", "budgets of at most 1e+09"),
    ("privacy.epsilon_grid=[1,1]", "privacy.epsilon_grid", "null or a non-empty list of distinct positive numbers"),
    ("privacy.l2_clip=[1,1]", "privacy.l2_clip", "a positive number, or a non-empty list of distinct ones"),
    ("privacy.enforce_budget=halt", "privacy.enforce_budget", "true (refuse a schedule"),
])
def test_each_setting_every_protocol_shares_is_refused_here_in_one_line(override, key, allowed):
    with pytest.raises(ConfigError) as err:
        privacy_settings(_config("experiment=isrl_dp_convex", override), MinibatchSGD.recipe)
    assert err.value.key == key and allowed in str(err.value) and "\n" not in str(err.value)


def test_a_budget_grid_only_for_a_recipe_that_carries_one():
    """P_SGD's schedule is built for one epsilon: its grid is refused by the planner, naming the
    algorithm, before its recipe resolves anything; an ISRL-DP recipe carries the grid as replicas."""
    assert not PSGD.recipe.budget_grid and MinibatchSGD.recipe.budget_grid
    with pytest.raises(ConfigError) as err:
        make_plan(compose("experiment=p_sgd_synthetic", "privacy.epsilon_grid=[1,2]"))
    assert str(err.value) == ("privacy.epsilon_grid must be null for p_sgd (one budget per run: its schedule, "
                              "calibration or ledger is built for one epsilon); got [1, 2]")
    plan = make_plan(compose("experiment=isrl_dp_convex", "privacy.epsilon_grid=[1,4]", "privacy.enforce_budget=false"))
    assert np.unique(plan.epsilon_levels).tolist() == [1.0, 4.0]


def test_a_theory_preset_fills_the_settings_the_recipe_then_reads():
    """The hybrid recipe's record-level budget (eps0 = 1 / n = 0.01 for n = 100), written by
    ``resolve`` where the YAML says null, is the one the theorem and the plan use: the settings
    are built again after ``resolve``, not kept from before it (epsilon was None then)."""
    plan = make_plan(compose("experiment=theory_mb_sgd_convex", "privacy=hybrid_silo_level"))
    assert plan.config["privacy"]["epsilon"] == 0.01 and np.all(plan.privacy.target_epsilon == 0.01)
    assert plan.privacy.calibration is Calibration.THEORY


def test_checked_term_types_a_checked_setting_and_names_a_missing_check():
    assert checked_term(Calibration, Calibration.TIGHT) is Calibration.TIGHT
    for unchecked in (None, "magic", "paper"):          # a plain word is no member: the planner converts words
        with pytest.raises(TypeError, match="did not check"):
            checked_term(Calibration, unchecked)


def test_no_recipe_reads_the_privacy_section_as_a_dict():
    """``priv["calibration"]``, ``priv.get("delta")`` or ``config["privacy"]`` read in a protocol
    package or the example would bypass the one place that checks them (a write, a theory preset
    filling in its calibration, is allowed)."""
    sources = sorted((REPO / "fedray" / "protocols").rglob("*.py")) + sorted((REPO / "examples").rglob("*.py"))
    offending = []
    for path in sources:
        tree = ast.parse(path.read_text())
        written = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Subscript)
                   and isinstance(node.ctx, ast.Store)}
        for node in ast.walk(tree):
            text = ast.unparse(node) if isinstance(node, (ast.Subscript, ast.Call)) else ""
            section = isinstance(node, ast.Subscript) and ast.unparse(node.slice) == "'privacy'"
            dict_read = isinstance(node, ast.Subscript) and ast.unparse(node.value) == "priv" or \
                isinstance(node, ast.Call) and ast.unparse(node.func) == "priv.get"
            if (section and id(node) not in written) or dict_read:
                offending.append(f"{path.relative_to(REPO)}:{node.lineno}: {text}")
    assert offending == []


def test_the_settings_default_to_a_run_without_privacy_words():
    bare = PrivacySettings(TrustModel.CENTRAL)
    assert bare.private and bare.calibration is None and bare.enforce_budget is True
    assert not PrivacySettings(TrustModel.NONE).private
