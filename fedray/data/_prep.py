"""Small helpers shared by the dataset specs: field checks, split sizes, encoding, scaling."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from fedray.errors import ConfigError


def check_int(key: str, value: object, low: int, high: int | None = None) -> None:
    """Require an integer (not a bool) in [low, high]."""
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(key, value, allowed)
    if value < low or (high is not None and value > high):
        raise ConfigError(key, value, allowed)


MAX_UNITS = 10**7                # users or samples in one federation
MAX_VALUES = 2 * 10**9           # float64 values a generated federation may hold (16 GiB)


def check_units(key: str, value: object) -> None:
    check_int(key, value, 1, MAX_UNITS)


def check_volume(factors: dict) -> None:
    """The generated federation's values (the product of ``factors``, key -> count) at most
    MAX_VALUES; the largest factor is named."""
    total = math.prod(int(v) for v in factors.values())
    if total > MAX_VALUES:
        key = max(factors, key=factors.get)
        raise ConfigError(key, factors[key], f"a smaller value: {' x '.join(factors)} = {total:.3g} values exceed the "
                          f"{MAX_VALUES:.0e} a federation may hold")


def check_real(
    key: str, value: object, low: float, high: float, low_open: bool = False, high_open: bool = False
) -> None:
    """Require a finite real number in the interval given by the bounds and openness."""
    allowed = f"a number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ConfigError(key, value, allowed)
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if too_low or too_high:
        raise ConfigError(key, value, allowed)


def check_held(sample_id: int, ids: np.ndarray) -> None:
    """A neighbour replaces a sample these ids hold; any other id would silently change nothing."""
    if int(sample_id) not in set(np.asarray(ids).tolist()):
        raise ConfigError("sample_id", sample_id, "one of these samples' ids (a neighbour replaces a sample "
                          "held here)")


def check_choice(key: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(key, value, "one of " + ", ".join(repr(c) for c in choices))


def split_sizes(n: int, train_fraction: float) -> tuple[int, int]:
    """(n_train, n_test) of an n-record split: n_train = floor(n * train_fraction).

    This matches scikit-learn's ``train_test_split(test_size=1 - train_fraction)`` for the
    paper's sizes (1548 -> 1238 / 310). The 1e-9 guards against 0.8 * 10 = 7.999...
    """
    n_train = int(math.floor(n * train_fraction + 1e-9))
    return n_train, n - n_train


def random_split(n: int, train_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly random (train, test) partition of range(n), sizes from ``split_sizes``."""
    n_train, _ = split_sizes(n, train_fraction)
    order = rng.permutation(n)
    return order[:n_train], order[n_train:]


def label_encode(values: np.ndarray) -> np.ndarray:
    """Codes 0..k-1 for the sorted distinct values (as scikit-learn's LabelEncoder)."""
    _, codes = np.unique(np.asarray(values).astype(str), return_inverse=True)
    return codes.astype(np.float64)


def standardize(columns: list[int], reference: np.ndarray, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Scale ``columns`` of each array by the mean and (population) std of ``reference``.

    ``reference`` is the training data the statistics come from; a constant column keeps std 1
    rather than dividing by 0. Returns new arrays, in the order given.
    """
    mean = reference[:, columns].mean(axis=0)
    std = reference[:, columns].std(axis=0)
    std = np.where(std > 0, std, 1.0)
    scaled = []
    for block in arrays:
        block = block.copy()
        block[:, columns] = (block[:, columns] - mean) / std
        scaled.append(block)
    return tuple(scaled)


def with_intercept(x: np.ndarray) -> np.ndarray:
    """Append a column of ones."""
    return np.hstack([x, np.ones((x.shape[0], 1))])
