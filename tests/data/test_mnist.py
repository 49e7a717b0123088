"""IDX reading, and the seed-004 E1 MNIST federation (small fake files and the real t10k set)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from fedray.data import IdxFormatError, MnistPairs, read_idx, write_idx
from fedray.data import mnist
from fedray.data.cache import cache_key
from fedray.errors import ConfigError

# ---------------------------------------------------------------- IDX format


@pytest.mark.parametrize(
    ("name", "array"),
    [
        ("images.gz", np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)),
        ("plain.idx", np.array([[-5, 7], [1 << 20, -(1 << 30)]], dtype=np.int32)),
        ("float.idx.gz", np.array([0.5, -1.25, 3e10])),
    ],
)
def test_idx_round_trip(tmp_path, name, array):
    write_idx(tmp_path / name, array)

    back = read_idx(tmp_path / name)

    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)


def test_idx_header_is_big_endian(tmp_path):
    # magic 00 00 0B (int16) 01 (one dim), dim 2 as big-endian uint32, then 258 and -2.
    raw = bytes([0, 0, 0x0B, 1, 0, 0, 0, 2, 0x01, 0x02, 0xFF, 0xFE])
    (tmp_path / "a.idx").write_bytes(raw)
    (tmp_path / "a.idx.gz").write_bytes(gzip.compress(raw))

    for path in (tmp_path / "a.idx", tmp_path / "a.idx.gz"):
        np.testing.assert_array_equal(read_idx(path), np.array([258, -2], dtype=np.int16))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x01\x00\x08\x01\x00\x00\x00\x01\x07", "not an IDX file"),
        (b"\x00\x00\x07\x01\x00\x00\x00\x01\x07", "not an IDX file"),
        (b"\x00\x00\x08\x02\x00\x00\x00\x01", "truncated"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x03\x07", "need 3 data bytes"),
    ],
)
def test_idx_rejects_malformed_files(tmp_path, raw, message):
    (tmp_path / "bad").write_bytes(raw)
    with pytest.raises(IdxFormatError, match=message):
        read_idx(tmp_path / "bad")


# ---------------------------------------------------------------- small fake MNIST folders

PER_DIGIT = 12


def _write_pair(folder: Path, prefix: str, per_digit: int, seed: int, gz: bool = False) -> None:
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(10, dtype=np.uint8), per_digit))
    images = rng.integers(0, 256, size=(labels.size, 28, 28), dtype=np.uint8)
    images[:, 0, 0], images[:, 0, 1] = 0, 255
    suffix = ".gz" if gz else ""
    write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images)
    write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels)


def test_reads_whatever_pairs_exist_train_first(tmp_path):
    _write_pair(tmp_path, "t10k", PER_DIGIT, seed=1)
    only_test = mnist.read_labels(tmp_path)
    _write_pair(tmp_path, "train", 2 * PER_DIGIT, seed=2)

    images, labels = mnist.read_mnist(tmp_path)

    assert images.shape == (30 * PER_DIGIT, 784) and labels.shape == (30 * PER_DIGIT,)
    np.testing.assert_array_equal(labels[20 * PER_DIGIT :], only_test)
    assert images.min() == 0.0 and images.max() == 1.0


def test_unpaired_file_is_an_error(tmp_path):
    _write_pair(tmp_path, "t10k", PER_DIGIT, seed=1)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(ConfigError, match="t10k-labels-idx1-ubyte"):
        MnistPairs(directory=str(tmp_path), images_per_digit=4).validate()


def test_raw_pixels_are_scaled_to_unit_interval(tmp_path):
    _write_pair(tmp_path, "t10k", PER_DIGIT, seed=1)
    spec = MnistPairs(directory=str(tmp_path), images_per_digit=5, pca_dim=None, heterogeneity=1.0)

    data = spec.load(seed=0)

    assert data.shape == spec.describe()
    assert data.dim == 784 and data.n_train[0] == 8 and data.n_test[0] == 2
    assert data.x_train.min() >= 0.0 and data.x_train.max() <= 1.0
    assert set(np.unique(data.x_train[:, :, 1])) == {1.0}  # pixel (0, 1) is 255 in every image


def test_first_images_by_default_and_fresh_ones_when_shuffled(tmp_path):
    _write_pair(tmp_path, "t10k", PER_DIGIT, seed=1)
    images, labels = mnist.read_mnist(tmp_path)
    first_zeros = {images[i].tobytes() for i in np.flatnonzero(labels == 0)[:3]}

    def zeros_used(spec, trial):
        data, (digits, _) = spec.load(seed=0, trial=trial), spec.digits(seed=0, trial=trial)
        return {row.tobytes() for row in data.x_train[digits == 0]}

    common = dict(directory=str(tmp_path), images_per_digit=3, heterogeneity=1.0, pca_dim=None)
    fixed, shuffled = MnistPairs(**common), MnistPairs(shuffle_images=True, **common)
    assert all(zeros_used(fixed, trial) <= first_zeros for trial in range(5))
    assert len(set().union(*(zeros_used(shuffled, trial) for trial in range(5)))) > 3


@pytest.mark.slow
def test_download_only_when_no_pair_is_present(tmp_path, monkeypatch):
    server = tmp_path / "server"
    server.mkdir()
    _write_pair(server, "train", PER_DIGIT, seed=3, gz=True)
    _write_pair(server, "t10k", PER_DIGIT, seed=4, gz=True)
    md5 = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in server.iterdir()}
    monkeypatch.setattr(mnist, "MD5", md5)
    monkeypatch.setattr(mnist, "MIRRORS", ((tmp_path / "offline").as_uri() + "/", server.as_uri() + "/"))
    spec = MnistPairs(images_per_digit=4, pca_dim=5)  # resolves to $FEDRAY_CACHE_DIR/mnist

    spec.validate()  # nothing there yet, but download=True: fine
    data = spec.load(seed=0)

    cache = spec.data_directory()
    assert sorted(p.name for p in cache.iterdir()) == sorted(md5)
    assert data.shape == spec.describe()

    only_t10k = tmp_path / "only_t10k"
    only_t10k.mkdir()
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        shutil.copy(server / name, only_t10k / name)
    monkeypatch.setattr(mnist, "MIRRORS", ((tmp_path / "offline").as_uri() + "/",))
    MnistPairs(directory=str(only_t10k), images_per_digit=4, pca_dim=5).load(seed=0)
    assert len(list(only_t10k.iterdir())) == 2


def test_a_built_federation_is_cached_on_disk_and_read_back_bit_for_bit(tmp_path, monkeypatch):
    """Catches a cache that serves a stale or foreign federation (another trial, field or data
    content), one that misses on an unchanged copy of the data (new file times), and an unreadable
    entry trusted."""
    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path / "cache"))      # this test's entries only
    _write_pair(tmp_path, "t10k", PER_DIGIT, seed=1)
    spec = MnistPairs(directory=str(tmp_path), images_per_digit=5, pca_dim=4)
    entries = tmp_path / "cache" / "federations"

    built = spec.load(seed=0, trial=1)
    (entry,) = entries.iterdir()
    read = spec.load(seed=0, trial=1)
    uncached = dataclasses.replace(spec, cache=False).load(seed=0, trial=1)

    for name in ("x_train", "y_train", "n_train", "x_test", "y_test", "n_test"):
        np.testing.assert_array_equal(getattr(read, name), getattr(built, name))
        np.testing.assert_array_equal(getattr(uncached, name), getattr(built, name))
    assert (read.task, read.num_outputs, read.summarised_items) == ("binary", 1, None)
    assert read.shape == spec.describe()
    # the same files elsewhere, with new modification times, are the same entry
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in tmp_path.glob("t10k-*"):
        (copy / path.name).write_bytes(path.read_bytes())
    assert cache_key(dataclasses.replace(spec, directory=str(copy)), 0, 1, copy) == cache_key(spec, 0, 1, tmp_path)
    label_file = tmp_path / "t10k-labels-idx1-ubyte"
    os.utime(label_file, ns=(label_file.stat().st_atime_ns, label_file.stat().st_mtime_ns + 10**9))
    spec.load(seed=0, trial=1)
    assert len(list(entries.iterdir())) == 1
    # a different trial, a different field or a changed byte of the data are other entries
    spec.load(seed=0, trial=2)
    dataclasses.replace(spec, heterogeneity=0.5).load(seed=0, trial=1)
    labels = bytearray(label_file.read_bytes())
    labels[-1] = (labels[-1] + 1) % 10               # one record's label changed
    label_file.write_bytes(bytes(labels))
    spec.load(seed=0, trial=1)
    assert len(list(entries.iterdir())) == 4
    # an unreadable entry is rebuilt, not trusted
    entry.write_bytes(b"not a federation")
    np.testing.assert_array_equal(spec.load(seed=0, trial=1).x_train, built.x_train)


def test_cache_false_writes_nothing(tmp_path):
    _write_pair(tmp_path, "t10k", PER_DIGIT, seed=1)
    MnistPairs(directory=str(tmp_path), images_per_digit=5, pca_dim=4, cache=False).load(seed=0)
    assert not (Path(os.environ["FEDRAY_CACHE_DIR"]) / "federations").exists()


def test_corrupt_compressed_file_is_rejected(tmp_path, monkeypatch):
    _write_pair(tmp_path, "t10k", PER_DIGIT, seed=1, gz=True)
    monkeypatch.setattr(mnist, "MD5", {**mnist.MD5, "t10k-images-idx3-ubyte.gz": "0" * 32})
    with pytest.raises(ValueError, match="t10k-images-idx3-ubyte.gz has md5"):
        MnistPairs(directory=str(tmp_path), images_per_digit=4).validate()


def test_missing_folder_names_it_and_the_env_var(tmp_path):
    folder = tmp_path / "no_mnist_here"
    with pytest.raises(ConfigError, match="FEDRAY_DATA_DIR") as err:
        MnistPairs(directory=str(folder), download=False).validate()
    assert str(folder) in str(err.value) and "data.directory" in str(err.value)


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("images_per_digit", 0, "data.images_per_digit must be an integer >= 1; got 0"),
        ("images_per_digit", 2.5, "data.images_per_digit must be an integer >= 1; got 2.5"),
        ("heterogeneity", 1.5, "data.heterogeneity must be a number in [0.0, 1.0]; got 1.5"),
        ("train_fraction", 1.0, "data.train_fraction must be a number in (0.0, 1.0); got 1.0"),
        ("pca_dim", 0, "data.pca_dim must be an integer in [1, 784]; got 0"),
        ("download", "yes", "data.download must be true or false; got 'yes'"),
        ("cache", "no", "data.cache must be true or false; got 'no'"),
    ],
)
def test_bad_fields_are_named(tmp_path, field, value, fragment):
    spec = MnistPairs(directory=str(tmp_path), **{field: value})
    with pytest.raises(ConfigError) as err:
        spec.validate()
    assert str(err.value) == fragment


# ---------------------------------------------------------------- the real t10k set at paper scale


@pytest.fixture(scope="module")
def paper(shared_data_dir, tmp_path_factory):
    """One paper-scale load shared by the module (tests that call the spec again also request
    ``shared_data``, since the FEDRAY_DATA_DIR set here is reset around each test)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FEDRAY_DATA_DIR", str(shared_data_dir))
        patch.setenv("FEDRAY_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        spec = MnistPairs()
        spec.validate()
        yield spec, spec.load(seed=3, trial=0)


@pytest.mark.slow
def test_paper_scale_shape(paper, shared_data):
    spec, data = paper

    assert data.shape == spec.describe()
    assert data.num_silos == 25 and data.dim == 50 and data.task == "binary" and data.num_outputs == 1
    assert set(data.n_train) == {1238} and set(data.n_test) == {310}
    assert data.x_train.shape == (25, 1238, 50) and data.x_test.shape == (25, 310, 50)
    # PCA was fitted on the pooled training records, so they are centred.
    np.testing.assert_allclose(data.x_train.reshape(-1, 50).mean(axis=0), 0.0, atol=1e-10)


@pytest.mark.slow
def test_paper_labels_are_one_for_even_digits(paper, shared_data):
    spec, data = paper
    train_digits, test_digits = spec.digits(seed=3, trial=0)

    np.testing.assert_array_equal(data.y_train, (train_digits % 2 == 0).astype(float))
    np.testing.assert_array_equal(data.y_test, (test_digits % 2 == 0).astype(float))


@pytest.mark.slow
def test_paper_p0_silos_hold_only_their_pair(paper, shared_data):
    spec, _ = paper
    train_digits, test_digits = spec.digits(seed=3, trial=0)
    pairs = [(even, odd) for even in (0, 2, 4, 6, 8) for odd in (1, 3, 5, 7, 9)]

    for silo, pair in enumerate(pairs):
        assert set(train_digits[silo]) | set(test_digits[silo]) == set(pair)


def test_paper_p1_silos_mix_all_digits(shared_data):
    train_digits, _ = MnistPairs(heterogeneity=1.0).digits(seed=3)
    assert all(len(set(row)) == 10 for row in train_digits)


@pytest.mark.slow
def test_paper_load_is_deterministic(paper, shared_data):
    spec, data = paper

    again = spec.load(seed=3, trial=0)

    np.testing.assert_array_equal(again.x_train, data.x_train)
    np.testing.assert_array_equal(again.y_test, data.y_test)


@pytest.mark.slow
def test_trials_and_seeds_draw_fresh_data(paper, shared_data):
    spec, _ = paper
    first, _ = spec.digits(seed=3, trial=0)

    assert not np.array_equal(spec.digits(seed=3, trial=1)[0], first)
    assert not np.array_equal(spec.digits(seed=4, trial=0)[0], first)
    np.testing.assert_array_equal(spec.digits(seed=3, trial=0)[0], first)


def test_paper_images_per_digit_cannot_exceed_the_files(shared_data):
    with pytest.raises(ConfigError, match="at most 892"):
        MnistPairs(images_per_digit=893).validate()


@pytest.mark.slow
def test_mnist_users_are_one_image_each_with_features_from_public_images_only(shared_data_dir):
    """Public, test and user images are disjoint parts of one seeded permutation; the PCA basis
    and the scale come from the public part alone (recomputed here), and every ||x|| <= 1."""
    from sklearn.decomposition import PCA

    from fedray.data import MnistUsers
    from fedray.data.mnist import read_mnist
    from fedray.rng import data_generator

    spec = MnistUsers(directory=str(shared_data_dir / "mnist"), public_images=500, test_images=300, pca_dim=8)
    spec.validate()
    fed = spec.load(4, 1)
    images, labels = read_mnist(spec.prepare())
    order = data_generator(4, 1).permutation(len(labels))
    public, test, users = order[:500], order[500:800], order[800:]
    assert fed.x_train.shape == (len(labels) - 800, 1, 8) and spec.describe().num_silos == len(users)
    pca = PCA(n_components=8, svd_solver="covariance_eigh").fit(images[public])
    scale = np.linalg.norm(pca.transform(images[public]), axis=1).max()
    x = pca.transform(images[users])
    np.testing.assert_allclose(fed.x_train[:, 0], x / np.maximum(scale, np.linalg.norm(x, axis=1, keepdims=True)))
    np.testing.assert_array_equal(fed.y_train[:, 0], labels[users] % 2 == 0)
    assert fed.n_test.sum() == 300 and np.array_equal(fed.y_test[:300, 0], labels[test] % 2 == 0)
    assert np.linalg.norm(fed.x_train, axis=2).max() <= 1.0 + 1e-12
    part = spec.load(4, 1, silo_ids=np.array([7, 3]))
    np.testing.assert_array_equal(part.x_train, fed.x_train[[7, 3]])


def test_a_data_dir_without_the_files_is_one_error_and_nothing_is_created(tmp_path, monkeypatch):
    """$FEDRAY_DATA_DIR names offline copies: missing files are reported (the folder, the files, the
    variable) at validation, before anything runs, and nothing is downloaded or created there."""
    from fedray.data import MnistPairs, MnistUsers

    monkeypatch.setenv("FEDRAY_DATA_DIR", str(tmp_path / "copies"))
    for spec in (MnistPairs(), MnistUsers()):
        with pytest.raises(ConfigError) as err:
            spec.validate()
        message = str(err.value)
        assert err.value.key == "data.directory" and str(tmp_path / "copies" / "mnist") in message
        assert "t10k-images-idx3-ubyte.gz" in message and "FEDRAY_DATA_DIR" in message and "\n" not in message
        with pytest.raises(ConfigError):
            spec.prepare()
    assert not (tmp_path / "copies").exists()
