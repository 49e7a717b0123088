"""The plan ``python -m fedray <overrides>`` would run, and a Ray session to run many such plans in,
for scripts and experiments that run many jobs in one process (the resolvers name paper packages,
so this lives outside ``fedray.plan``)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path

from fedray.plan import Plan, make_plan
from fedray.preflight import shadowed_configs

CONFIG_DIR = Path(__file__).resolve().parent / "conf"


def compose_config(overrides: list[str]):
    """The config the command line composes for ``overrides``; an unknown key or option is a
    ``ConfigError`` with a did-you-mean, as on the command line."""
    from hydra import compose, initialize_config_dir

    from fedray.override_errors import as_config_error
    from fedray.resolvers import register

    register()
    shadowed_configs(_searchpath(overrides), CONFIG_DIR)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            return compose("config", overrides=list(overrides))
        except Exception as err:
            error = as_config_error(err, list(overrides))
            if error is None:
                raise
            raise error from err


def _searchpath(overrides: list[str]) -> list[str]:
    """The ``hydra.searchpath`` entries ``overrides`` set (none when they do not set it)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    found = [o for o in OverridesParser.create().parse_overrides([x for x in overrides if "searchpath" in x])
             if o.key_or_group == "hydra.searchpath"]
    value = found[-1].value() if found else []
    return list(value) if isinstance(value, list) else [value]


def split_overrides(overrides: Sequence[str], groups: Iterable[str]):
    """(the group overrides, the parsed value overrides) of ``overrides``, or None if the list is
    not only those two kinds (a sweep, a deletion, a ``hydra.`` key, a package, a nested group).

    Hydra composes in two steps: the config groups chosen (``algorithm=``, ``privacy=``, ...)
    select and merge the files, then the value overrides (``trial=3``, ``+data.spec.noise=2``) are
    set on the merged config, in order. Value overrides never choose a file, so one composition of
    the group overrides serves every list of values on it (``set_values``)."""
    return _split_parsed(_parsed(overrides), frozenset(groups))


def _split_parsed(parsed, groups: frozenset):
    """``split_overrides`` of overrides parsed already."""
    chosen, values = [], []
    for override in parsed:
        key = override.key_or_group
        if override.is_sweep_override() or override.is_delete() or key.split(".")[0] == "hydra":
            return None
        if key in groups:
            chosen.append(override.input_line)
        elif override.package is not None or "/" in key:
            return None
        else:
            values.append(override)
    return tuple(chosen), tuple(values)


def set_values(config, values) -> None:
    """Set parsed value overrides on a composed (struct) config as Hydra's composition does: a
    change must find its key; an addition (``+``) must not find one, unless it merges a dict or a
    list; ``++`` adds or changes. A refused value raises (any exception: the caller composes the
    list whole, so that Hydra raises its own message)."""
    from omegaconf import OmegaConf

    for override in values:
        key, value = override.key_or_group, override.value()
        if override.is_add():
            if not (OmegaConf.select(config, key, throw_on_missing=False) is None or isinstance(value, (dict, list))):
                raise ValueError(f"{key} is already in the config")
            OmegaConf.update(config, key, value, merge=True, force_add=True)
        elif override.is_force_add():
            OmegaConf.update(config, key, value, merge=True, force_add=True)
        else:
            OmegaConf.update(config, key, value, merge=True)


class SweepComposer:
    """A launcher's job configs: what ``config_loader.load_sweep_config(master, overrides)`` gives,
    composing once per list of group choices.

    Hydra's composition takes 0.2-0.4 s of CPU a job; a sweep's jobs mostly differ in values
    (``trial``, a clip, a step size) on a few lists of group choices (E2's 320 jobs on 4), and a
    copy of a composed config takes a few milliseconds. The sweep's record of its job is rebuilt
    as Hydra writes it: ``hydra.overrides.task`` (every override, in order) and
    ``hydra.job.override_dirname`` (sorted, less the excluded keys). A list ``split_overrides``
    does not split, or whose values fail to apply, is composed whole by Hydra (and fails with
    Hydra's message). One composer serves one launch: nothing is kept across sweeps."""

    def __init__(self, config_loader, master_config) -> None:
        self.loader, self.master = config_loader, master_config
        self.groups = frozenset(config_loader.list_groups(""))
        self.bases: dict[tuple[str, ...], object] = {}

    def compose(self, overrides: Sequence[str]):
        overrides, parsed = list(overrides), _parsed(overrides)
        split = _split_parsed(parsed, self.groups)
        if split is None:
            return self.loader.load_sweep_config(self.master, overrides)
        chosen, values = split
        if chosen not in self.bases:
            self.bases[chosen] = self.loader.load_sweep_config(self.master, list(chosen))
        config = copy.deepcopy(self.bases[chosen])
        try:
            set_values(config, values)
        except Exception:
            return self.loader.load_sweep_config(self.master, overrides)
        self._record(config, parsed)
        return config

    @staticmethod
    def _record(config, parsed) -> None:
        """``hydra.overrides.task`` and ``hydra.job.override_dirname`` for the job's own overrides."""
        from omegaconf import open_dict

        job = config.hydra.job.config.override_dirname
        lines = sorted(o.input_line for o in parsed if o.key_or_group not in job.exclude_keys)
        with open_dict(config):
            config.hydra.overrides.task = [o.input_line for o in parsed]
            config.hydra.job.override_dirname = job.item_sep.join(lines).replace("=", job.kv_sep)


def _parsed(overrides: Sequence[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(list(overrides))


def compose_plan(overrides: list[str]) -> Plan:
    """Compose the config for ``overrides`` as the command line would, and plan it."""
    return make_plan(compose_config(overrides))


@contextmanager
def job_session():
    """A private local Ray (as a single run starts it), or the Ray this process has already joined,
    and an ``ActorPool`` that jobs on the same records share: ``run(plan, pool=pool)`` for each
    job. The actors end with the block; so does the Ray if the block started it (a Ray the caller
    had joined stays joined)."""
    import ray

    from fedray.runtime.driver import ActorPool, connect

    started = not ray.is_initialized()
    connect({})
    pool = ActorPool()
    try:
        yield pool
    finally:
        pool.drop_all()
        if started:
            ray.shutdown()
