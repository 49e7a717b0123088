"""The metric of seed 001's games: the exact duality gap of a strategy pair on the population."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedray.core.evaluation import Metric


@dataclass(frozen=True)
class GapEvaluation:
    """The exact duality gap of packed (P, dx + dy) strategy pairs on the game's population
    (diagnostic: it reads the population). The gap needs no sample, so only the actor holding
    sample 0 computes it (a certified gap costs many passes over the population)."""

    rows: int

    def shard_parts(self, models: np.ndarray, samples) -> dict:
        if samples.ids.size == 0 or samples.ids[0] != 0:
            return {}
        return {"gap": samples.game.gap(models[:, :self.rows], models[:, self.rows:])}

    def combine(self, parts: list[dict], num_units: int) -> dict:
        return {"gap": Metric(next(part["gap"] for part in parts if part), released=False)}
