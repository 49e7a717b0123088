"""The tests' ``compose`` (tests/conftest.py) gives the config Hydra composes for the same
overrides: it composes the group choices once and sets the value overrides on a copy, and would
hand every test a wrong config if it took a group choice for a value, set a value Hydra refuses, or
set values in another order or with other types than Hydra parses."""

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from tests import conftest
from tests.conftest import _composed, _hydra_compose, _split, compose

SPLIT = [
    # values of every type Hydra parses (int, float, 1e-5, bool, null, nan, string, list, dict)
    ("experiment=isrl_dp_convex", "num_rounds=6", "privacy.delta=1e-5", "progress=false", "trial=null",
     "seed=nan", "privacy.epsilon_grid=[1,2]", "data.spec.directory=abc"),
    # an addition (+), groups after values, a value a later one overrides, an interpolation
    ("data=synthetic", "data.spec.num_silos=60", "+data.spec.noise=2.0", "algorithm=user_dp_sgd",
     "participation=uniform", "participation.silos_per_round=20", "privacy=central_user", "num_rounds=8",
     "num_rounds=9", "privacy.epsilon=${num_rounds}"),
    # a preset with its tuning file for another algorithm, and a dict merged into a node
    ("experiment=phased_erm_synthetic", "algorithm=item_dp_sgd", "algorithm.batch_size=100",
     "++algorithm.extra={a: 1}", "+privacy.epsilon_grid=[3]"),
]


@pytest.mark.parametrize("overrides", SPLIT)
def test_setting_values_on_the_groups_composition_gives_hydras_config(overrides):
    groups, values = _split(overrides)
    assert values and len(groups) + len(values) == len(overrides)        # this list takes the split route
    helper, hydra = compose(*overrides), _composed(overrides)
    assert OmegaConf.to_yaml(helper) == OmegaConf.to_yaml(hydra)         # keys, order, values, types
    assert OmegaConf.is_struct(helper) and OmegaConf.is_struct(hydra)
    assert helper is not compose(*overrides)                            # a copy each call


@pytest.mark.parametrize("overrides, message", [
    (("experiment=isrl_dp_convex", "num_round=3"), "Could not override 'num_round'"),        # a change needs a key
    (("experiment=isrl_dp_convex", "+num_rounds=3"), "Could not append to config"),         # an addition must not
])
def test_a_value_hydra_refuses_is_refused_with_hydras_message(overrides, message):
    with pytest.raises(ConfigCompositionException, match=message):
        compose(*overrides)


def test_sweeps_deletions_and_hydra_keys_are_composed_whole():
    assert _split(("experiment=isrl_dp_convex", "~privacy.l2_clip")) is None
    assert _split(("experiment=isrl_dp_convex", "hydra.run.dir=x")) is None
    assert _split(("experiment=isrl_dp_convex", "num_rounds=1,2")) is None


def test_a_composition_another_worker_stored_reads_back_as_hydras(tmp_path, monkeypatch):
    """Catches a store of compositions (shared by a test run's workers) that loses a type, an order
    or the struct flag on its way through the disk, or hands one list of group choices another's."""
    monkeypatch.setattr(conftest, "_COMPOSITIONS", [tmp_path])
    lists = [("experiment=phased_erm_synthetic", "algorithm=item_dp_sgd"), ("experiment=isrl_dp_convex",)]
    made = [_composed.__wrapped__(groups) for groups in lists]          # composed and stored
    assert len(list(tmp_path.glob("*.pickle"))) == 2
    for groups, first in zip(lists, made):
        read = _composed.__wrapped__(groups)                            # read back, as another worker would
        assert read is not first
        assert OmegaConf.to_yaml(read) == OmegaConf.to_yaml(_hydra_compose(groups)) == OmegaConf.to_yaml(first)
        assert OmegaConf.is_struct(read)
