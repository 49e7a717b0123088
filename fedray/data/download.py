"""Where data files live, and how a missing one is fetched and checked.

Directory resolution (first match wins), for a dataset whose files sit in sub-folder ``sub``:

1. the spec's explicit ``directory`` field, used as is;
2. ``$FEDRAY_DATA_DIR/<sub>`` when ``FEDRAY_DATA_DIR`` is set (a folder of offline copies,
   laid out like ``shared/datasets``: ``mnist/``, ``insurance.csv``, ``obesity.csv``);
3. the cache ``$FEDRAY_CACHE_DIR/<sub>``, where ``FEDRAY_CACHE_DIR`` defaults to
   ``~/.cache/fedray``.

``fetch`` checks the md5 of a file that is already there, and otherwise downloads it into the
given directory atomically: the bytes go to a temporary file in the same directory, the md5
is checked, and only then is the file renamed into place. A reader never sees a partial or
corrupt file, and two processes downloading at once both end with the same good file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import BinaryIO

from fedray.errors import ConfigError

DATA_DIR_ENV = "FEDRAY_DATA_DIR"
CACHE_DIR_ENV = "FEDRAY_CACHE_DIR"
_CHUNK = 1 << 20
_TIMEOUT_SECONDS = 60


class ChecksumError(ValueError):
    """A data file's md5 differs from the published one."""

    def __init__(self, source: str | os.PathLike, expected: str, actual: str) -> None:
        self.source = str(source)
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{self.source} has md5 {actual}; expected {expected} "
            "(a corrupt copy or a different version of the file)"
        )

    def __reduce__(self):  # keep the error picklable across Ray actors
        return (type(self), (self.source, self.expected, self.actual))


class DownloadError(OSError):
    """A file could not be downloaded (no network, bad URL, server error)."""


def cache_root() -> Path:
    """``$FEDRAY_CACHE_DIR`` if set, else ``~/.cache/fedray``."""
    root = os.environ.get(CACHE_DIR_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "fedray"


def resolve_directory(sub: str, directory: str | os.PathLike | None = None) -> Path:
    """The folder a dataset's files are read from (see the module docstring for the order).

    Parameters
    ----------
    sub:
        The dataset's sub-folder under ``$FEDRAY_DATA_DIR`` or the cache (``""`` for files at
        the top level, such as ``insurance.csv``).
    directory:
        An explicit folder; when given it wins and ``sub`` is not appended.
    """
    if directory is not None:
        if not isinstance(directory, (str, os.PathLike)) or not str(directory):
            raise ConfigError("data.spec.directory", directory, "a folder path or null (FEDRAY_DATA_DIR or the cache)")
        return Path(directory).expanduser()
    data_dir = os.environ.get(DATA_DIR_ENV)
    base = Path(data_dir).expanduser() if data_dir else cache_root()
    return base / sub if sub else base


def offline_copies(directory: str | os.PathLike | None) -> bool:
    """True when files are read from ``$FEDRAY_DATA_DIR`` (no explicit ``directory``): the user said
    where the copies are, so a missing file is an error to report, never a download into that folder."""
    return directory is None and bool(os.environ.get(DATA_DIR_ENV))


def md5sum(path: str | os.PathLike) -> str:
    """Hex md5 of a file, read in chunks."""
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_md5(path: str | os.PathLike, md5: str) -> None:
    """Raise ``ChecksumError`` naming the file and both digests when they differ."""
    actual = md5sum(path)
    if actual != md5.lower():
        raise ChecksumError(path, md5.lower(), actual)


def missing_data_error(directory: Path, wanted: str, sub: str, extra_hint: str = "") -> ConfigError:
    """The error a spec raises when its files are not in ``directory``.

    The message names the folder, what it should hold, and how to point fedray at copies.
    """
    where = f"${DATA_DIR_ENV}/{sub}" if sub else f"${DATA_DIR_ENV}"
    hint = (
        f"a folder holding {wanted}; set data.directory, or set {DATA_DIR_ENV} to a folder with "
        f"copies of the data sets (files are read from {where})"
    )
    if extra_hint:
        hint = f"{hint}; {extra_hint}"
    return ConfigError("data.directory", str(directory), hint)


def _open_url(url: str) -> BinaryIO:
    """Open ``url`` for reading (a seam the tests replace to simulate failures)."""
    return urllib.request.urlopen(url, timeout=_TIMEOUT_SECONDS)  # noqa: S310 (https/file only)


def fetch(filename: str, url: str | None, md5: str, directory: str | os.PathLike) -> Path:
    """Return ``directory/filename``, downloading it from ``url`` if it is missing.

    Parameters
    ----------
    filename:
        The file's name inside ``directory``.
    url:
        Where to download it from (``https://`` or ``file://``); ``None`` if there is no
        public download, in which case a missing file is an error.
    md5:
        The expected hex md5 of the file.
    directory:
        Where the file is read from and, if missing, written to (created if needed).

    Returns
    -------
    Path to the verified file.

    Raises
    ------
    ChecksumError
        The existing or downloaded file has the wrong md5 (a bad download is never kept).
    DownloadError
        The download failed (no network, HTTP error) or there is no URL to download from.
    """
    directory = Path(directory)
    target = directory / filename
    if target.exists():
        verify_md5(target, md5)
        return target
    if url is None:
        raise DownloadError(f"{target} is missing and has no public download URL")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DownloadError(f"cannot create {directory} to download {filename} into: {err}") from err
    handle, temp_name = tempfile.mkstemp(dir=directory, prefix=f".{filename}.", suffix=".part")
    temp = Path(temp_name)
    try:
        digest = hashlib.md5()
        with os.fdopen(handle, "wb") as out:
            try:
                with _open_url(url) as response:
                    for chunk in iter(lambda: response.read(_CHUNK), b""):
                        digest.update(chunk)
                        out.write(chunk)
            except (urllib.error.URLError, OSError) as err:
                raise DownloadError(
                    f"could not download {url} to {target}: {err}. Without network access, set "
                    f"{DATA_DIR_ENV} to a folder with copies of the data sets"
                ) from err
        actual = digest.hexdigest()
        if actual != md5.lower():
            raise ChecksumError(f"{filename} downloaded from {url}", md5.lower(), actual)
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    return target
