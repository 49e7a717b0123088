"""Hostile configs (issue 17 item 4): 1,000 random override sets over the config trees of eight
presets (at small sizes), each value wrong in type, extreme, NaN or infinite, empty, huge or an
unknown key. Every one either plans and then runs its first rounds as a tiny job (in this process,
without Ray), or is refused with a ``ConfigError`` whose key names a config entry and whose message
is one line, never another exception: the CLI turns exactly that error into its one-line exit 2,
and planning runs before any actor or MLflow run exists. The examples are derandomized, so a
failure reproduces."""

from __future__ import annotations

import collections
import functools
import math
import warnings

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fedray.data import DownloadError
from fedray.errors import BudgetError, ConfigError
from fedray.plan import TOP_LEVEL_KEYS, make_plan
from fedray.runtime.driver import run
from tests.conftest import compose

pytestmark = pytest.mark.slow

# The presets at sizes where a planned set runs as a tiny job (the hostile values then act on these).
EXPERIMENTS = {
    "isrl_dp_convex": [],
    "user_level_sphere": ["data.spec.num_silos=1000", "data.spec.samples_per_silo=8", "repetitions=2"],
    "smd_bilinear": ["data.spec.num_samples=3000", "data.spec.dim=8", "repetitions=2"],
    "p_sgd_synthetic": ["data.spec.num_silos=4000", "participation.batch_size=200", "num_rounds=20"],
    "p_gd_synthetic": ["data.spec.num_silos=2000"],
    "output_perturbation_synthetic": ["data.spec.num_silos=300", "data.spec.samples_per_silo=10"],
    "sc_output_pert_synthetic": ["data.spec.num_silos=500", "data.spec.samples_per_silo=10"],
    "sco_logistic": ["data.spec.num_samples=20000", "data.spec.pool=2000", "data.spec.dim=5", "repetitions=2"],
}
TINY_ROUNDS = 2         # a planned set runs this many rounds (a driver-side program: its one release)
OUTCOMES = collections.Counter()
HOSTILE = ("abc", "", [], {}, [1, 2], 0, -1, 0.5, True, None, math.nan, math.inf, -math.inf, 1e308, -1e308, 10**13)


def _leaves(node, prefix: str = "") -> list[str]:
    out = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _leaves(value, path + ".")
        elif not key.startswith("_"):
            out.append(path)
    return out


@functools.cache
def _preset(experiment: str) -> tuple[dict, tuple[str, ...]]:
    config = OmegaConf.to_container(compose(f"experiment={experiment}", *EXPERIMENTS[experiment], "progress=false"),
                                    resolve=True)
    config.pop("hydra", None)
    return config, tuple(_leaves(config))


# The seed derandomize derived from this test's source before its draws were moved ahead of the
# config (a digest of the source): the same 1,000 examples, whatever the body's wording.
@seed(26064858558419871128299598158345527153642969547983760313364493140885037598849203424801901849842313191229758806201505)
@settings(max_examples=1000, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_hostile_overrides_plan_or_are_refused_in_one_line_naming_a_key(data):
    experiment = data.draw(st.sampled_from(sorted(EXPERIMENTS)), label="experiment")
    base, keys = _preset(experiment)
    # Every draw first, in the order that defines the examples, then the config: most of the
    # engine's calls end inside a draw (about 1,500 of 2,500), and those need no config built.
    chosen = data.draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3, unique=True), label="keys")
    values = [data.draw(st.sampled_from(HOSTILE), label=key) for key in chosen]
    section = None
    if data.draw(st.integers(0, 9), label="unknown key") == 0:
        section = data.draw(st.sampled_from(("algorithm", "privacy", "runtime", "tracking", "data")), label="section")
    config = OmegaConf.create(base)
    for key, value in zip(chosen, values):
        OmegaConf.update(config, key, value, merge=False, force_add=True)
    if section is not None:
        OmegaConf.update(config, f"{section}.bogus_key", 1, force_add=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # numpy's overflow warnings on the way to a refusal
        try:
            plan = make_plan(config)
            prepare = getattr(plan.dataset, "prepare", None)      # as the command line: public files first
            if prepare is not None:
                prepare()
        except ConfigError as err:
            OUTCOMES[err.key.split(".")[0]] += 1
            assert "\n" not in str(err)
            assert err.key.split(".")[0] in TOP_LEVEL_KEYS, err.key
            return
        except (BudgetError, DownloadError) as err:   # a schedule over budget; no network: one line too
            OUTCOMES[type(err).__name__] += 1
            assert "\n" not in str(err)
            return
    OUTCOMES["planned"] += 1
    _run_tiny(plan)


class _Enough(Exception):
    pass


def _run_tiny(plan) -> None:
    """The first ``TINY_ROUNDS`` rounds of a planned set, in this process: it runs, no traceback."""
    def stop_after_tiny_rounds(r, metrics):
        if r + 1 >= TINY_ROUNDS:
            raise _Enough
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            run(plan, progress=stop_after_tiny_rounds, inline=True)
        except _Enough:
            pass
    OUTCOMES["ran"] += 1


def test_the_hostile_overrides_reached_every_section():
    """After the fuzz: some sets planned, and refusals came from every section of the tree (the
    examples are not all stopped by one early check)."""
    if not OUTCOMES:
        pytest.skip("run with the fuzz test")
    assert OUTCOMES["planned"] >= 50 and OUTCOMES["ran"] == OUTCOMES["planned"]
    assert {"data", "algorithm", "privacy", "participation", "runtime", "tracking"} <= set(OUTCOMES), OUTCOMES
