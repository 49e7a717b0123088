"""Errors a user can act on: each names the offending config key, its value and what is allowed."""

from __future__ import annotations


def _line(key: str, value: object, allowed: str) -> str:
    return f"{key} must be {allowed}; got {value!r}"


def invalid_argument(key: str, value: object, allowed: str) -> ValueError:
    """A bad argument to a fedray function at run time (a caller's mistake, not a configuration
    value): the same one-line form as ``ConfigError``."""
    return ValueError(_line(key, value, allowed))


class ConfigError(ValueError):
    """A configuration value is outside what fedray can run; raised before any actor starts."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        super().__init__(_line(key, value, allowed))

    def __reduce__(self):
        # Rebuild from the three fields, so the error survives pickling across Ray processes.
        return (ConfigError, (self.key, self.value, self.allowed))


class BudgetError(ValueError):
    """A planned schedule would spend more privacy than its target."""
