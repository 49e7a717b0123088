"""The privacy vocabularies: words in the YAML, members in the code, converted in one place."""

import ast
import json
from pathlib import Path

import pytest
import yaml

from fedray.core.terms import TERMS, Accountant, Calibration, Composition, Relation, TrustModel, as_terms, member
from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.privacy import stored
from tests.conftest import REPO, compose


def test_a_member_is_its_word_in_comparisons_text_json_and_error_messages():
    assert TrustModel.NONE == "none" and hash(Calibration.PAPER) == hash("paper")
    assert str(Accountant.RDP) == "rdp" and f"{Composition.PLD}" == "pld"
    assert json.dumps({"relation": Relation.REPLACE_ONE}) == '{"relation": "replace_one"}'
    # an allowed-values tuple in a one-line error reads as the words, as before the enums
    assert f"{(Calibration.PAPER, Calibration.TIGHT)}" == "('paper', 'tight')"


def test_as_terms_converts_words_and_leaves_anything_else_for_the_check_that_knows_the_allowed_subset():
    privacy = {"trust_model": "isrl_dp", "calibration": "magic", "accountant": ["rdp"], "composition": "pld",
               "epsilon": 3.0, "delta": None}
    converted = as_terms(privacy)
    assert converted["trust_model"] is TrustModel.ISRL_DP
    assert converted["composition"] is Composition.PLD
    assert converted["calibration"] == "magic" and type(converted["calibration"]) is str
    assert converted["accountant"] == ["rdp"]
    assert converted["epsilon"] == 3.0 and converted["delta"] is None
    assert privacy["trust_model"] == "isrl_dp" and type(privacy["trust_model"]) is str     # a copy
    assert member(TrustModel, TrustModel.SDP) is TrustModel.SDP and member(Accountant, "RDP") == "RDP"   # exact words


def _privacy_words(node, found):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in TERMS and isinstance(value, str):
                found.append((key, value))
            _privacy_words(value, found)
    return found


def test_every_word_the_config_tree_and_the_examples_set_is_a_member():
    """A YAML word outside its enum would match no comparison in the code."""
    files = sorted((REPO / "fedray" / "conf").rglob("*.yaml")) + sorted((REPO / "examples").rglob("*.yaml"))
    words = [(path, key, value) for path in files for key, value in _privacy_words(yaml.safe_load(path.read_text()), [])]
    assert len(words) >= 20
    for path, key, value in words:
        assert value in set(TERMS[key]), f"{path.relative_to(REPO)}: {key}={value!r} is not a {TERMS[key].__name__}"


def test_planning_hands_the_protocols_members_and_the_plan_states_them():
    plan = make_plan(compose("experiment=isrl_dp_convex"))
    privacy = plan.config["privacy"]
    assert privacy["trust_model"] is TrustModel.ISRL_DP
    assert privacy["calibration"] is Calibration.PAPER
    assert privacy["accountant"] is Accountant.RDP
    assert plan.privacy.trust_model is TrustModel.ISRL_DP and plan.privacy.relation is Relation.REPLACE_ONE
    assert plan.privacy.statement()["trust_model"] == "isrl_dp"


@pytest.mark.parametrize("value,shown", [("centrall", "'centrall'"), ("[1,2]", "[1, 2]"), ("true", "True")])
def test_a_trust_model_outside_the_recipes_is_refused_in_one_line_naming_the_allowed_words(value, shown):
    with pytest.raises(ConfigError) as err:
        make_plan(compose("experiment=isrl_dp_convex", f"privacy.trust_model={value}"))
    assert str(err.value) == f"privacy.trust_model must be one of ('isrl_dp', 'none') for isrl_dp_mb_sgd; got {shown}"


SETTINGS = ("trust", "calibration", "accountant", "composition", "relation")


def _words(operand) -> bool:
    """A string literal, or a tuple, list or set holding one."""
    if isinstance(operand, (ast.Tuple, ast.List, ast.Set)):
        return any(_words(e) for e in operand.elts)
    return isinstance(operand, ast.Constant) and isinstance(operand.value, str)


def test_no_protocol_or_planner_compares_a_privacy_setting_with_a_string_literal():
    """E.g. ``priv["trust_model"] == "none"`` or ``calibration in ("paper", "tight")``: compare members."""
    sources = sorted((REPO / "fedray" / "protocols").rglob("*.py")) + [REPO / "fedray" / "plan.py"]
    # The stored accounting answers are keyed by their modules' source text (fedray.privacy.stored.SOURCES):
    # those keep their words, which equal the members, so that an edit there is one of the accounting.
    sources += [path for path in sorted((REPO / "fedray" / "privacy").rglob("*.py")) if path.name not in stored.SOURCES]
    sources += sorted((REPO / "examples").rglob("*.py"))
    offending = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            setting = any(not _words(o) and any(s in ast.unparse(o).lower() for s in SETTINGS) for o in operands)
            if setting and any(_words(o) for o in operands):
                offending.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert offending == []
