"""Checks of what a run needs outside fedray, made before Ray starts, each failing in one line.

The MLflow client retries a refusing or unreachable tracking server for minutes (260 s for
``tracking.uri=http://127.0.0.1:9``) and then reports five chained tracebacks; ``tracking_store``
asks the server once, within ``timeout`` seconds, and names the URI and the cause.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from fedray.errors import ConfigError

STORE_TIMEOUT = 5.0     # seconds for a tracking server to answer its health check


def tracking_store(uri: str, timeout: float = STORE_TIMEOUT) -> None:
    """Raise ``ConfigError`` naming ``tracking.uri`` unless the MLflow server at an ``http(s)`` URI
    answers (any HTTP status counts as an answer: what it says is the client's to report). Local
    stores (``sqlite:``, a folder) are not probed."""
    if not str(uri).startswith(("http://", "https://")):
        return
    url = f"{str(uri).rstrip('/')}/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            pass
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError, ValueError) as err:
        cause = getattr(err, "reason", err)
        raise ConfigError("tracking.uri", uri, f"an MLflow tracking server that answers; none answered at {url} "
                          f"within {timeout:g} s ({type(cause).__name__}: {cause})") from None


def shadowed_configs(searchpath, own_root) -> None:
    """Raise ``ConfigError`` when a ``hydra.searchpath`` entry holds a config file that fedray's own
    tree (``own_root``) also holds under the same group and name: Hydra reads fedray's tree first,
    so the user's file would be silently ignored. Entries are ``file://<dir>`` or
    ``pkg://<package>``; a package that cannot be found is left for Hydra to report."""
    import importlib.util
    from pathlib import Path

    for entry in searchpath or ():
        entry = str(entry)
        if entry.startswith("pkg://"):
            spec = importlib.util.find_spec(entry[len("pkg://"):].replace("/", "."))
            if spec is None or not spec.submodule_search_locations:
                continue
            root = Path(list(spec.submodule_search_locations)[0])
        else:
            root = Path(entry[len("file://"):] if entry.startswith("file://") else entry)
        if not root.is_dir() or root.resolve() == Path(own_root).resolve():
            continue
        for path in sorted(root.rglob("*.yaml")):
            relative = path.relative_to(root)
            if (Path(own_root) / relative).is_file():
                raise ConfigError("hydra.searchpath", entry, f"config files fedray's own tree does not hold: "
                                  f"{relative} is fedray's too, and fedray's would win silently (rename yours)")
