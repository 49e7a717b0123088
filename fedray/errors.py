"""Errors a user can act on: each names the offending config key, its value and what is allowed."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is outside what fedray can run; raised before any actor starts."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        self.key = key
        self.value = value
        self.allowed = allowed
        super().__init__(f"{key} must be {allowed}; got {value!r}")

    def __reduce__(self):
        # Rebuild from the three fields, so the error survives pickling across Ray processes.
        return (ConfigError, (self.key, self.value, self.allowed))


class BudgetError(ValueError):
    """A planned schedule would spend more privacy than its target."""
