"""The ``algorithm`` config sections of the seed-004 algorithms, as typed values (the recipes'
``settings``; ``fedray.core.planning.AlgorithmSettings``): built and checked by the planner
(``fedray.plan.algorithm_settings``), read by ``planning`` and the theory presets (``theory``).
Besides ``name``, ``step_size``, ``batch_size`` and ``trust_model``, each field is a constructor
field of the algorithm class, with its default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fedray.core.planning import Positive, Stepped


@dataclass(frozen=True, kw_only=True)
class LocalSettings(Stepped):
    """The ``algorithm`` section of a seed-004 silo algorithm (Local SGD's; the others' add to it).
    The fields besides ``name``, ``step_size`` and ``trust_model`` are the algorithm class's own."""

    batch_size: Annotated[int | None, Positive()] = None   # K; None: the paper's n sqrt(eps / (4R)) (private runs)
    average_last: Annotated[int | None, Positive()] = 8    # None: a theory preset sets it
    # Pins the privacy group a preset is meant for: the non-private baselines say none, so a
    # baseline run with a private preset is refused, not mislabelled.
    trust_model: str | None = None


@dataclass(frozen=True, kw_only=True)
class SiloSettings(LocalSettings):
    """MB-SGD's section (and shuffled MB-SGD's): W an l2 ball of ``radius``, None for R^d."""

    radius: Annotated[float | None, Positive()] = None


@dataclass(frozen=True, kw_only=True)
class AcSaSettings(SiloSettings):
    """The accelerated algorithms' section (AC-SA, seed-004 §3.2)."""

    average_last: Annotated[int | None, Positive()] = 1
    strong_convexity: float = 0.0
    regularization: float | None = 0.0      # None: a theory preset sets it


@dataclass(frozen=True, kw_only=True)
class StageSettings(AcSaSettings):
    """The multi-stage methods' section; the class checks its constants (``check_stage_fields``)."""

    smoothness: float | None = None
    oracle_std: float | None = None
    initial_gap: float | None = None


@dataclass(frozen=True, kw_only=True)
class VectorSumSettings(AcSaSettings):
    """P_vec's silos calibrate themselves from these (``ShuffledVectorSum.check_fields`` holds
    them to what the ledger accounts)."""

    target_epsilon: Any = None
    target_delta: Any = None
    silos_per_round: Any = None
