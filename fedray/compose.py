"""The plan ``python -m fedray <overrides>`` would run, and a Ray session to run many such plans in,
for scripts and experiments that run many jobs in one process (the resolvers name paper packages,
so this lives outside ``fedray.plan``)."""

from __future__ import annotations

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
