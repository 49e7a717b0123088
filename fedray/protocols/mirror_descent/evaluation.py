"""The metric of seed 001's games: the exact duality gap of a strategy pair on the population."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedray.core.evaluation import Metric


@dataclass(frozen=True)
class GapEvaluation:
    """The exact duality gap of packed (P, dx + dy) strategy pairs on the game's population
    (diagnostic: it reads Abar, the population)."""

    rows: int

    def shard_parts(self, models: np.ndarray, samples) -> dict:
        return {"gap": samples.game.gap(models[:, :self.rows], models[:, self.rows:])}

    def combine(self, parts: list[dict], num_units: int) -> dict:
        return {"gap": Metric(parts[0]["gap"], released=False)}
