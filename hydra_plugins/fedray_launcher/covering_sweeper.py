"""``hydra/sweeper=fedray`` (the default): Hydra's basic sweeper, checking fewer compositions, and
sweeping a union of grids.

Before launching a batch, the basic sweeper composes every job's config once to catch composition
errors (an unknown group option, key or type) before anything runs; the launcher then composes
each again. A composition costs about 0.2 s, so a sweep of 40 small jobs spent 8 s checking. The
errors it catches come from single override values, so here a job is composed up front only if it
brings an override no job checked before has had: every value of every swept key is still
composed before the first job starts (a grid of a x b values takes a + b - 1 checks instead of
a b), and a composition error that only a combination of values raises still fails that job when
the launcher composes it. Each check composes through ``fedray.compose.SweepComposer``: Hydra
composes each list of group choices once, and a job's values are set on a copy (a value Hydra
refuses is composed whole, failing with Hydra's message). Checks against fedray's own rules
(``ConfigError``) happen per job, at planning, as before.

``hydra.sweeper.grids`` (a list of ``{key: sweep}`` mappings, each like ``hydra.sweeper.params``)
makes the sweep the union of grids: the jobs of the first grid (the command line's sweep times its
own), then the second's, and so on. A paper's protocol is often such a union, e.g. E2's four (N, M)
settings, each with private algorithms and with non-private baselines under ``privacy=none``; as
one multirun it pays for the interpreter, Ray's start and the checks once instead of per grid. A key
set both by a grid and on the command line is refused (which one should win is not obvious).

Only Hydra's public plugin API is used (``hydra.plugins.sweeper.Sweeper``, the overrides parser).

(No ``from __future__ import annotations``: see ``ray_jobs.py``.)
"""

import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.errors import HydraException
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

log = logging.getLogger(__name__)


@dataclass
class CoveringSweeperConf:
    _target_: str = "hydra_plugins.fedray_launcher.covering_sweeper.CoveringSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None
    grids: Optional[List[Dict[str, Any]]] = None      # values: sweep strings or single values


ConfigStore.instance().store(group="hydra/sweeper", name="fedray", node=CoveringSweeperConf, provider="fedray")


def _override_value(value: Any) -> str:
    """A grid's YAML value as override text (YAML's true / null read back as Python's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def jobs_of(overrides) -> List[List[str]]:
    """The cartesian product of parsed overrides, each job a list of ``key=value`` strings, the
    first key varying slowest (as Hydra's basic sweeper orders them); a key given twice keeps its
    last value."""
    choices: Dict[str, List[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise HydraException(f"the fedray sweeper does not support sweep type {override.value_type.name} "
                                 f"({key}); give a list of values or range(...)")
    return [list(job) for job in itertools.product(*choices.values())]


def batches(jobs: List[List[str]], size: Optional[int]) -> List[List[List[str]]]:
    """``jobs`` in consecutive batches of at most ``size`` (all in one batch for None or -1)."""
    if size is None or size == -1:
        size = max(len(jobs), 1)
    if size <= 0:
        raise HydraException(f"hydra.sweeper.max_batch_size must be positive or -1; got {size}")
    return [jobs[i:i + size] for i in range(0, len(jobs), size)]


class CoveringSweeper(Sweeper):
    """Built on Hydra's public ``Sweeper`` interface: the cartesian product of the swept values (as
    the basic sweeper forms it), the union of ``grids``, and the covering checks described above."""

    def __init__(self, max_batch_size: Optional[int], params: Optional[Dict[str, str]] = None,
                 grids: Optional[List[Dict[str, Any]]] = None) -> None:
        super().__init__()
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.grids = [{str(k): _override_value(v) for k, v in grid.items()} for grid in grids or ()]
        self.checked: set = set()       # overrides some composed job had
        self.composer = None
        self.hydra_context = self.config = self.launcher = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def split_arguments(self, overrides, max_batch_size):
        """The batches of job overrides: the command line's sweep, or its union over ``grids``."""
        if not self.grids:
            return batches(jobs_of(overrides), max_batch_size)
        loader = None if self.hydra_context is None else self.hydra_context.config_loader   # None: outside a sweep
        parser = OverridesParser.create(config_loader=loader)
        given = {o.get_key_element() for o in overrides}
        jobs = []
        for i, grid in enumerate(self.grids):
            extra = parser.parse_overrides([f"{key}={value}" for key, value in grid.items()])
            clash = sorted(given & {o.get_key_element() for o in extra})
            if clash:
                raise HydraException(f"hydra.sweeper.grids[{i}] sets {', '.join(clash)}, which the command line "
                                     f"sets too; set each key in one place")
            jobs += jobs_of(list(overrides) + extra)
        return batches(jobs, max_batch_size)

    def sweep(self, arguments: List[str]) -> Any:
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([f"{k}={v}" for k, v in self.params.items()] + list(arguments))
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")     # the record of the sweep's overrides
        returns, first = [], 0
        for batch in self.split_arguments(overrides, self.max_batch_size):
            self.validate_batch_is_legal(batch)
            results = self.launcher.launch(batch, initial_job_idx=first)
            for result in results:
                _ = result.return_value          # re-raises a job's exception, as Hydra's sweepers do
            first += len(batch)
            returns.append(results)
        return returns

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from fedray.compose import SweepComposer

        if self.composer is None:       # Hydra's check (load_sweep_config), once per list of group choices
            self.composer = SweepComposer(self.hydra_context.config_loader, self.config)
        for overrides in batch:
            if not self.checked.issuperset(overrides):
                self.composer.compose(overrides)
                self.checked.update(overrides)
