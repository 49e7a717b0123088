"""``hydra/sweeper=fedray`` (the default): Hydra's basic sweeper, checking fewer compositions.

Before launching a batch, the basic sweeper composes every job's config once to catch composition
errors (an unknown group option, key or type) before anything runs; the launcher then composes
each again. A composition costs about 0.2 s, so a sweep of 40 small jobs spent 8 s checking. The
errors it catches come from single override values, so here a job is composed up front only if it
brings an override no job checked before has had: every value of every swept key is still
composed before the first job starts (a grid of a x b values takes a + b - 1 checks instead of
a b), and a composition error that only a combination of values raises still fails that job when
the launcher composes it. Checks against fedray's own rules (``ConfigError``) happen per job, at
planning, as before.

(No ``from __future__ import annotations``: see ``ray_jobs.py``.)
"""

from dataclasses import dataclass
from typing import Dict, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore


@dataclass
class CoveringSweeperConf:
    _target_: str = "hydra_plugins.fedray_launcher.covering_sweeper.CoveringSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="fedray", node=CoveringSweeperConf, provider="fedray")


class CoveringSweeper(BasicSweeper):
    def __init__(self, max_batch_size: Optional[int], params: Optional[Dict[str, str]] = None) -> None:
        super().__init__(max_batch_size, params)
        self.checked: set = set()       # overrides some composed job had

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        for overrides in batch:
            if not self.checked.issuperset(overrides):
                super().validate_batch_is_legal([overrides])
                self.checked.update(overrides)
