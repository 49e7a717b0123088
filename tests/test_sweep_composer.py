"""The sweep launchers' job configs (``fedray.compose.SweepComposer``: one composition per list of
group choices, each job's values set on a copy) are the configs Hydra's ``load_sweep_config``
composes for the same jobs, hydra node included. A composer that took a group choice for a value,
set values in another order or with other types, kept one job's values for the next, or left the
base's ``hydra.overrides.task`` / ``override_dirname`` would hand a job another config or file
its outputs under another job's name."""

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import OmegaConf

from fedray.compose import CONFIG_DIR, SweepComposer
from fedray.resolvers import register

# E2's protocol as its covering sweeper launches it (two jobs of each list of group choices, every
# value changed from one to the next), then lists with every kind of value override: types Hydra
# parses, +, ++ with a dict, an interpolation, a value set twice, a group after values, a key
# excluded from override_dirname.
JOBS = [
    [f"experiment=e2_insurance_all", f"trial={trial}", f"data.spec.num_silos={n}",
     f"participation.silos_per_round={m}", f"algorithm={algorithm}"] + extra
    for trial, (n, m) in ((0, (10, 5)), (1, (3, 3)))
    for algorithm, extra in (("isrl_dp_mb_sgd", []), ("local_sgd", ["privacy=none"]))
] + [
    ["experiment=isrl_dp_convex", "num_rounds=6", "privacy.delta=1e-5", "progress=false", "trial=null",
     "seed=nan", "privacy.epsilon_grid=[1,2]", "data.spec.directory=abc"],
    ["data=synthetic", "data.spec.num_silos=60", "+data.spec.noise=2.0", "algorithm=user_dp_sgd",
     "participation=uniform", "participation.silos_per_round=20", "privacy=central_user", "num_rounds=8",
     "num_rounds=9", "privacy.epsilon=${num_rounds}"],
    ["data=synthetic", "algorithm=user_dp_sgd", "participation=uniform", "privacy=central_user"],  # no +noise now
    ["experiment=phased_erm_synthetic", "algorithm=item_dp_sgd", "algorithm.batch_size=100",
     "++algorithm.extra={a: 1}", "+privacy.epsilon_grid=[3]", "tracking.uri=sqlite:///x.db"],
    ["experiment=isrl_dp_convex", "~privacy.l2_clip"],                # composed whole (a deletion)
]


@pytest.fixture(scope="module")
def loader():
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", overrides=["hydra.job.config.override_dirname.exclude_keys=[tracking.uri]"],
                                           run_mode=RunMode.MULTIRUN)
        yield loader, master


def test_every_job_gets_the_config_hydra_composes_for_it(loader):
    config_loader, master = loader
    composer = SweepComposer(config_loader, master)
    for overrides in JOBS + JOBS[:2]:              # repeated jobs too: a copy each time, values not kept
        ours, hydras = composer.compose(overrides), config_loader.load_sweep_config(master, overrides)
        assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(hydras), overrides      # the hydra node too
        assert OmegaConf.is_struct(ours) and OmegaConf.is_struct(hydras)
    # E2's 4 jobs above share 2 lists of group choices; the other lists are one each
    assert len(composer.bases) == 2 + 3


@pytest.mark.parametrize("overrides, message", [
    (["experiment=isrl_dp_convex", "num_round=3"], "Could not override 'num_round'"),
    (["experiment=isrl_dp_convex", "+num_rounds=3"], "Could not append to config"),
])
def test_a_value_hydra_refuses_fails_with_hydras_message(loader, overrides, message):
    config_loader, master = loader
    with pytest.raises(ConfigCompositionException, match=message):
        SweepComposer(config_loader, master).compose(overrides)
