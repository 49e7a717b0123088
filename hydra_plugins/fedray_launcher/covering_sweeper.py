"""``hydra/sweeper=fedray`` (the default): Hydra's basic sweeper, checking fewer compositions, and
sweeping a union of grids.

Before launching a batch, the basic sweeper composes every job's config once to catch composition
errors (an unknown group option, key or type) before anything runs; the launcher then composes
each again. A composition costs about 0.2 s, so a sweep of 40 small jobs spent 8 s checking. The
errors it catches come from single override values, so here a job is composed up front only if it
brings an override no job checked before has had: every value of every swept key is still
composed before the first job starts (a grid of a x b values takes a + b - 1 checks instead of
a b), and a composition error that only a combination of values raises still fails that job when
the launcher composes it. Checks against fedray's own rules (``ConfigError``) happen per job, at
planning, as before.

``hydra.sweeper.grids`` (a list of ``{key: sweep}`` mappings, each like ``hydra.sweeper.params``)
makes the sweep the union of grids: the jobs of the first grid (the command line's sweep times its
own), then the second's, and so on. A paper's protocol is often such a union, e.g. E2's four (N, M)
settings, each with private algorithms and with non-private baselines under ``privacy=none``; as
one multirun it pays for the interpreter, Ray's start and the checks once instead of per grid. A key
set both by a grid and on the command line is refused (which one should win is not obvious).

(No ``from __future__ import annotations``: see ``ray_jobs.py``.)
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException


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


class CoveringSweeper(BasicSweeper):
    def __init__(self, max_batch_size: Optional[int], params: Optional[Dict[str, str]] = None,
                 grids: Optional[List[Dict[str, Any]]] = None) -> None:
        super().__init__(max_batch_size, params)
        self.grids = [{str(k): _override_value(v) for k, v in grid.items()} for grid in grids or ()]
        self.checked: set = set()       # overrides some composed job had

    def split_arguments(self, overrides, max_batch_size):
        """Hydra's batches of job overrides, over the union of ``grids`` when there are any."""
        if not self.grids:
            return BasicSweeper.split_arguments(overrides, max_batch_size)
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
            jobs += BasicSweeper.split_arguments(list(overrides) + extra, None)[0]
        return list(BasicSweeper.split_overrides_to_chunks(jobs, max_batch_size))

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        for overrides in batch:
            if not self.checked.issuperset(overrides):
                super().validate_batch_is_legal([overrides])
                self.checked.update(overrides)
