"""Hydra's composition errors as fedray's one-line ``ConfigError`` with a did-you-mean.

Hydra refuses a misspelt key (``privacy.epsilonn=3``: "Key 'epsilonn' is not in struct") and a
misspelt option (``experiment=isrl_dp_convx``: the whole option list and search path, 30+ lines)
before fedray sees the config. ``as_config_error`` turns either into the line the planner gives for
``+key=`` misspellings (``fedray.checks.known_keys``), naming the key, the closest allowed name and
every allowed one; ``one_line`` joins any other error of Hydra's into one line.
"""

from __future__ import annotations

import difflib
from typing import Sequence

from fedray.checks import known_keys
from fedray.errors import ConfigError


def _given(key: str, overrides: Sequence[str]) -> object:
    """The value the command line gave ``key`` (typed as Hydra parses it; a sweep as written)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for text in overrides:
        name, _, value = text.partition("=")
        if name.lstrip("+~") != key:
            continue
        try:
            parsed = OverridesParser.create().parse_override(text).value()
        except Exception:           # unparsable text: Hydra would have said so first
            return value
        return parsed if isinstance(parsed, (str, int, float, bool, list, dict, type(None))) else value
    return None


def _unknown_key(cause, overrides: Sequence[str]) -> ConfigError | None:
    parent = getattr(cause, "parent_node", None)
    full_key = getattr(cause, "full_key", None)
    if parent is None or not full_key or not hasattr(parent, "keys"):
        return None
    section, _, key = str(full_key).rpartition(".")
    allowed = [str(k) for k in parent.keys() if not str(k).startswith("_") and (section or k != "hydra")]
    try:
        known_keys(section, {key: _given(str(full_key), overrides)}, allowed)
    except ConfigError as err:
        return err
    return None


def _unknown_option(err, overrides: Sequence[str]) -> ConfigError | None:
    missing, options = getattr(err, "missing_cfg_file", None), getattr(err, "options", None)
    if not missing or options is None:
        return None
    group, _, name = str(missing).rpartition("/")
    options = sorted(options)
    close = difflib.get_close_matches(name, options, n=1)
    hint = f" (did you mean {group}={close[0]}?)" if close else ""
    return ConfigError(group, name, f"one of the options of {group}{hint}: {', '.join(options)}")


def as_config_error(err: BaseException, overrides: Sequence[str]) -> ConfigError | None:
    """The one-line ``ConfigError`` for Hydra's refusal of an unknown key or option in the command
    line ``overrides``, or None if ``err`` is not one."""
    from hydra.errors import ConfigCompositionException, MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    if isinstance(err, MissingConfigException):
        return _unknown_option(err, overrides)
    if isinstance(err, ConfigCompositionException) and isinstance(err.__cause__, (ConfigAttributeError,
                                                                                  ConfigKeyError)):
        return _unknown_key(err.__cause__, overrides)
    return None


def one_line(err: BaseException) -> str | None:
    """Any other composition or override-syntax error of Hydra's, its lines joined into one; None
    for an error that is not Hydra's."""
    from hydra.errors import HydraException

    if not isinstance(err, HydraException):
        return None
    return "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
