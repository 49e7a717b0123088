"""One family of config checks: each raises ``ConfigError`` naming the key, the value and what is
allowed, so every bad value reads the same way, before any actor starts."""

from __future__ import annotations

import difflib
import math
from typing import Iterable, Mapping

import numpy as np

from fedray.errors import ConfigError


MAX_SETTING = 1e12      # no count or constant of a run is larger; beyond it formulas overflow
# The largest clip: the authors' "no clipping" in seed-004's E2 grid. Squared, or times K R, it
# stays far inside float64.
MAX_CLIP = 1e32


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_bool(key: str, value: object) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(key, value, "true or false")


def positive(key: str, value, kind=float, allow_none: bool = False, largest: float = MAX_SETTING):
    """``value`` as a positive ``kind`` (int or float) at most ``largest``; None passes with ``allow_none``."""
    if value is None and allow_none:
        return None
    try:
        ok = value is not None and not isinstance(value, bool) and kind(value) == value and 0 < value < math.inf
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ConfigError(key, value, f"a positive {'integer' if kind is int else 'number'}")
    if value > largest:
        raise ConfigError(key, value, f"a positive {'integer' if kind is int else 'number'} at most {largest:g}")
    return kind(value)


def natural(key: str, value) -> int:
    """``value`` as a non-negative integer below 2^63 (a seed or trial number)."""
    if not (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value < 2**63):
        raise ConfigError(key, value, "a non-negative integer below 2^63")
    return int(value)


def number_in(key: str, value, low: float, high: float, allowed: str, closed_high: bool = False) -> float:
    """A finite number in (low, high), or (low, high] with ``closed_high``."""
    inside = _real(value) and low < value and (value <= high if closed_high else value < high) and math.isfinite(value)
    if not inside:
        raise ConfigError(key, value, allowed)
    return float(value)


def known_keys(section: str, given: Mapping, allowed: Iterable[str]) -> None:
    """Refuse keys of ``section`` ("" for the top level) outside ``allowed``, listing the valid keys
    with a did-you-mean."""
    allowed = sorted(set(allowed))
    prefix, where = (f"{section}.", f"of {section}") if section else ("", "at the top level")
    for key, value in given.items():
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            raise ConfigError(f"{prefix}{key}", value, f"a known key {where}{hint}: {', '.join(allowed)}")
