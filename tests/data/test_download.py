"""Directory resolution, md5 checks and atomic downloads (local file:// URLs, no network)."""

from __future__ import annotations

import hashlib
import io
import pickle
from pathlib import Path

import pytest

from fedray.data import ChecksumError, DownloadError, fetch, resolve_directory
from fedray.data import download

PAYLOAD = b"fedray test payload\n" * 1000
PAYLOAD_MD5 = hashlib.md5(PAYLOAD).hexdigest()


@pytest.fixture
def source(tmp_path) -> Path:
    folder = tmp_path / "server"
    folder.mkdir()
    (folder / "blob.bin").write_bytes(PAYLOAD)
    return folder


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_resolve_prefers_explicit_then_data_dir_then_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path / "cache"))
    assert resolve_directory("mnist") == tmp_path / "cache" / "mnist"
    monkeypatch.setenv("FEDRAY_DATA_DIR", str(tmp_path / "copies"))
    assert resolve_directory("mnist") == tmp_path / "copies" / "mnist"
    assert resolve_directory("") == tmp_path / "copies"
    assert resolve_directory("mnist", str(tmp_path / "mine")) == tmp_path / "mine"


def test_cache_defaults_to_home(monkeypatch):
    monkeypatch.delenv("FEDRAY_CACHE_DIR")
    assert resolve_directory("mnist") == Path.home() / ".cache" / "fedray" / "mnist"


def test_fetch_downloads_atomically_and_verifies(tmp_path, source):
    target_dir = tmp_path / "cache" / "x"

    path = fetch("blob.bin", (source / "blob.bin").as_uri(), PAYLOAD_MD5, target_dir)

    assert path == target_dir / "blob.bin"
    assert path.read_bytes() == PAYLOAD
    assert _leftovers(target_dir) == ["blob.bin"]  # no temporary file left behind


def test_fetch_keeps_no_file_when_download_md5_is_wrong(tmp_path, source):
    target_dir = tmp_path / "cache"
    with pytest.raises(ChecksumError) as err:
        fetch("blob.bin", (source / "blob.bin").as_uri(), "0" * 32, target_dir)
    assert PAYLOAD_MD5 in str(err.value) and "0" * 32 in str(err.value) and "blob.bin" in str(err.value)
    assert _leftovers(target_dir) == []


def test_fetch_checks_an_existing_file_and_does_not_download(tmp_path):
    (tmp_path / "blob.bin").write_bytes(PAYLOAD)
    unreachable = (tmp_path / "nowhere" / "blob.bin").as_uri()

    assert fetch("blob.bin", unreachable, PAYLOAD_MD5, tmp_path) == tmp_path / "blob.bin"

    (tmp_path / "blob.bin").write_bytes(PAYLOAD + b"tampered")
    with pytest.raises(ChecksumError) as err:
        fetch("blob.bin", unreachable, PAYLOAD_MD5, tmp_path)
    message = str(err.value)
    assert str(tmp_path / "blob.bin") in message and PAYLOAD_MD5 in message
    assert hashlib.md5(PAYLOAD + b"tampered").hexdigest() in message


def test_fetch_reports_an_unreachable_url(tmp_path):
    with pytest.raises(DownloadError, match="could not download .*FEDRAY_DATA_DIR"):
        fetch("blob.bin", (tmp_path / "missing.bin").as_uri(), PAYLOAD_MD5, tmp_path / "cache")
    assert _leftovers(tmp_path / "cache") == []


def test_fetch_without_url_is_an_error(tmp_path):
    with pytest.raises(DownloadError, match="no public download URL"):
        fetch("blob.bin", None, PAYLOAD_MD5, tmp_path)


def test_interrupted_download_leaves_nothing(tmp_path, monkeypatch):
    class Broken(io.BytesIO):
        def read(self, size=-1):
            if self.tell() > 0:
                raise ConnectionResetError("connection reset")
            return super().read(100)

    monkeypatch.setattr(download, "_open_url", lambda url: Broken(PAYLOAD))
    with pytest.raises(DownloadError, match="connection reset"):
        fetch("blob.bin", "https://example.invalid/blob.bin", PAYLOAD_MD5, tmp_path / "cache")
    assert _leftovers(tmp_path / "cache") == []


def test_checksum_error_survives_pickling():
    err = ChecksumError("a.gz", "1" * 32, "2" * 32)
    assert str(pickle.loads(pickle.dumps(err))) == str(err)
