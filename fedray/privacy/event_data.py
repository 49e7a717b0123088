"""dp-accounting events as data, built and read without importing dp-accounting.

An event's data is its JSON form (``fedray.privacy.events.event_to_json``: dp-accounting's
``to_named_tuple`` as nested dicts). Mechanisms describe themselves in this form, so the ledger
can price what a mechanism says it is while the stored accountant answers
(``fedray.privacy.stored``) keep a planning process from importing dp-accounting (a second of
scipy imports); ``fedray.privacy.events.event_from_json`` makes the ``DpEvent`` itself when one
is needed. The data here is exactly what ``event_to_json`` writes for the same event (tested).

``sampled_gaussian_epsilon`` prices one such release event, ``releases`` times per participation
and ``count`` participations: it reads the event's parameters (noise multiplier, sample and
dataset sizes), refuses any event the sampled-Gaussian accountant was not written for, and asks
``fedray.privacy.accounting.participation_epsilon``, whose answers are keyed by those parameters.
"""

from __future__ import annotations

import numpy as np

from fedray.privacy.accounting import participation_epsilon

_MODULE = "dp_accounting.dp_event"


def gaussian(noise_multiplier: float) -> dict:
    """``GaussianDpEvent(noise_multiplier)``."""
    return {"module_name": _MODULE, "class_name": "GaussianDpEvent", "noise_multiplier": float(noise_multiplier)}


def non_private() -> dict:
    """``NonPrivateDpEvent()``."""
    return {"module_name": _MODULE, "class_name": "NonPrivateDpEvent"}


def gaussian_step(noise_multiplier: float | np.ndarray, replica: int, unit: int) -> dict:
    """One application of a Gaussian step to the (replica, unit) cell: ``gaussian`` of the cell's
    noise multiplier (noise std over the message's l2 sensitivity), or ``non_private`` where the
    multiplier is 0 (no noise added: a non-private baseline). ``noise_multiplier`` is a number,
    (P,) one per replica or (P, N) one per cell, left-aligned on (replica, unit) as the steps
    broadcast it against their messages; an axis of length 1 holds for every replica (unit)."""
    z = np.asarray(noise_multiplier, dtype=np.float64)
    z = z.reshape(z.shape + (1,) * (2 - z.ndim))
    z_cell = float(z[replica if z.shape[0] > 1 else 0, unit if z.shape[1] > 1 else 0])
    return gaussian(z_cell) if z_cell > 0 else non_private()


def sampled_without_replacement(dataset_size: int, sample_size: int, event: dict) -> dict:
    """``SampledWithoutReplacementDpEvent(dataset_size, sample_size, event)``; ``event`` itself when
    the sample is the whole dataset (no sampling, no amplification)."""
    if sample_size >= dataset_size:
        return event
    return {"module_name": _MODULE, "class_name": "SampledWithoutReplacementDpEvent",
            "source_dataset_size": int(dataset_size), "sample_size": int(sample_size), "event": event}


def poisson_sampled(sampling_probability: float, event: dict) -> dict:
    """``PoissonSampledDpEvent(sampling_probability, event)``; ``event`` itself at probability 1."""
    if sampling_probability >= 1:
        return event
    return {"module_name": _MODULE, "class_name": "PoissonSampledDpEvent",
            "sampling_probability": float(sampling_probability), "event": event}


def self_composed(event: dict, count: int) -> dict:
    """``SelfComposedDpEvent(event, count)``; ``event`` itself for a count of 1."""
    if count == 1:
        return event
    return {"module_name": _MODULE, "class_name": "SelfComposedDpEvent", "event": event, "count": int(count)}


def _release_parameters(release: dict) -> tuple[float, int, int]:
    """(noise multiplier, sample size, dataset size) of a Gaussian release, sampled or not; a
    non-private release has multiplier 0 (priced infinite)."""
    inner, sample_size, dataset_size = release, 1, 1
    if release.get("class_name") == "SampledWithoutReplacementDpEvent" and release.get("module_name") == _MODULE:
        inner, sample_size, dataset_size = release["event"], release["sample_size"], release["source_dataset_size"]
    if inner.get("module_name") == _MODULE and inner.get("class_name") == "GaussianDpEvent":
        return float(inner["noise_multiplier"]), int(sample_size), int(dataset_size)
    if inner.get("module_name") == _MODULE and inner.get("class_name") == "NonPrivateDpEvent":
        return 0.0, int(sample_size), int(dataset_size)
    raise ValueError(f"the sampled Gaussian accountant prices a GaussianDpEvent or NonPrivateDpEvent, optionally "
                     f"inside SampledWithoutReplacementDpEvent; got {release}")


def sampled_gaussian_epsilon(release: dict, releases: int, count: int, delta: float, accountant: str) -> float:
    """epsilon at ``delta`` of ``count`` participations of ``releases`` applications of ``release``."""
    z, sample_size, dataset_size = _release_parameters(release)
    return participation_epsilon(z, sample_size, dataset_size, int(releases), int(count), float(delta), accountant)
