"""MNIST even-vs-odd federation of seed-004 experiment E1, and a reader for IDX files.

Symbols: N = 25 silos, n_m = ``images_per_digit`` (774 = floor(5421 / 7) in the paper),
p = ``heterogeneity``.

Build, per trial (seed-004 section 5, E1)
-----------------------------------------
1. Read whichever standard MNIST file pairs are present (``train-*``, ``t10k-*``; gzip or
   plain) and concatenate them, train first. Pixels are scaled to [0, 1].
2. Per digit k, keep n_m images: by default the FIRST n_m images of digit k in file order, as
   the authors' code does (``by_number[k]``), so every trial uses the same 10 * n_m images;
   with ``shuffle_images=True`` a seeded random n_m of them, drawn afresh each trial.
3. Silo (e, o) for even e in 0,2,4,6,8 and odd o in 1,3,5,7,9, in that nested order
   (silo index 5 * (e // 2) + o // 2). Its pair pool is the 2 n_m kept images of e and o.
   The silo draws round(2 n_m (1 - p)) records WITH replacement from its pair pool and the
   remaining ones WITH replacement from the pooled 10 n_m images of all digits, as the
   authors' code does (section 6, item 14c: duplicates can fall on both sides of the split).
   p = 0 is fully heterogeneous (each silo sees only its two digits), p = 1 homogeneous.
   Python's ``round`` (half to even) gives the count.
4. Label 1 for an even digit, 0 for odd.
5. A random 80/20 split per silo: 1548 records -> 1238 train / 310 test.
6. PCA to ``pca_dim`` (50) with scikit-learn, fitted on the pooled TRAINING records of all
   silos only (the authors fit on all 60k images), then applied to train and test.

Fresh sampling per trial (the paper's "20 independent trials (fresh data sampling /
train-test split)") comes from steps 3 and 5, all drawn from ``data_generator(seed, trial)``.

This environment holds only the t10k files (10,000 images, at least 892 per digit), which
is enough for the paper's scale. With the train files present the default reproduces the
authors' image selection exactly.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedray.checks import check_bool
from fedray.data._prep import check_int, check_real, split_sizes
from fedray.data.download import (
    ChecksumError,
    DownloadError,
    fetch,
    missing_data_error,
    offline_copies,
    resolve_directory,
    verify_md5,
)
from fedray.data.cache import cached_federation
from fedray.data.federation import Federation, FederationShape
from fedray.errors import ConfigError
from fedray.rng import data_generator

SUBDIR = "mnist"
PAIRS = (
    ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
)
MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)
EVENS = (0, 2, 4, 6, 8)
ODDS = (1, 3, 5, 7, 9)
NUM_PIXELS = 28 * 28

# IDX type codes (third magic byte) -> big-endian numpy dtype.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_IDX_CODES = {np.dtype(v).newbyteorder("="): k for k, v in _IDX_DTYPES.items()}


class IdxFormatError(ValueError):
    """A file is not a well-formed IDX file of the expected kind."""


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (gzip-compressed or plain, detected from its first bytes).

    The header is two zero bytes, a type code, the number of dimensions, then one big-endian
    uint32 per dimension; the data follow in big-endian C order. Returns a native-endian array.
    """
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise IdxFormatError(
            f"{path} is not an IDX file: magic bytes {raw[:4].hex()}; expected 00 00, a type "
            f"code in {sorted(hex(c) for c in _IDX_DTYPES)} and the number of dimensions"
        )
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise IdxFormatError(f"{path} is truncated inside its header ({len(raw)} bytes)")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    count = int(np.prod(dims, dtype=np.int64))
    if len(raw) - header != count * dtype.itemsize:
        raise IdxFormatError(
            f"{path}: header dims {dims} need {count * dtype.itemsize} data bytes; "
            f"the file holds {len(raw) - header}"
        )
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=header).reshape(dims)
    return data.astype(dtype.newbyteorder("="))


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file, gzip-compressed when ``path`` ends in ``.gz``."""
    array = np.asarray(array)
    native = array.dtype.newbyteorder("=")
    if native not in _IDX_CODES:
        raise IdxFormatError(f"IDX cannot hold dtype {array.dtype}; use one of {sorted(_IDX_DTYPES.values())}")
    code = _IDX_CODES[native]
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + np.ascontiguousarray(array, dtype=_IDX_DTYPES[code]).tobytes()
    path = Path(path)
    if path.suffix == ".gz":
        payload = gzip.compress(payload, mtime=0)
    path.write_bytes(payload)


def _find(directory: Path, stem: str) -> Path | None:
    for name in (f"{stem}.gz", stem):
        if (directory / name).is_file():
            return directory / name
    return None


def find_pairs(directory: str | Path) -> list[tuple[Path, Path]]:
    """The complete (images, labels) file pairs in ``directory``, train first.

    Raises ``ConfigError`` if only one file of a pair is present (a broken copy).
    """
    directory = Path(directory)
    pairs = []
    for image_stem, label_stem in PAIRS:
        images, labels = _find(directory, image_stem), _find(directory, label_stem)
        if (images is None) != (labels is None):
            present, absent = (images, label_stem) if labels is None else (labels, image_stem)
            raise missing_data_error(
                directory, f"{absent}[.gz] next to {present.name}", SUBDIR, "or remove the unpaired file"
            )
        if images is not None:
            pairs.append((images, labels))
    return pairs


def _verify(path: Path) -> None:
    """Check a compressed file against the published md5 (plain copies are not checksummed)."""
    if path.name in MD5:
        verify_md5(path, MD5[path.name])


def _read_labels(path: Path) -> np.ndarray:
    labels = read_idx(path)
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise IdxFormatError(f"{path} holds {labels.dtype} with shape {labels.shape}; expected 1-d uint8 labels")
    return labels.astype(np.int64)


def _read_images(path: Path) -> np.ndarray:
    images = read_idx(path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise IdxFormatError(f"{path} holds {images.dtype} with shape {images.shape}; expected 3-d uint8 images")
    return images.reshape(images.shape[0], -1)


def read_labels(directory: str | Path) -> np.ndarray:
    """Labels of every present pair, concatenated train first (int64)."""
    pairs = find_pairs(directory)
    return np.concatenate([_read_labels(labels) for _, labels in pairs]) if pairs else np.zeros(0, np.int64)


def read_mnist(directory: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, 784) float64 scaled to [0, 1], labels (n,) int64) of every present pair.

    Compressed files are checked against the published md5s.
    """
    images, labels = [], []
    for image_path, label_path in find_pairs(directory):
        _verify(image_path)
        _verify(label_path)
        part_images, part_labels = _read_images(image_path), _read_labels(label_path)
        if len(part_images) != len(part_labels):
            raise IdxFormatError(
                f"{image_path} has {len(part_images)} images but {label_path} has {len(part_labels)} labels"
            )
        images.append(part_images)
        labels.append(part_labels)
    if not images:
        raise missing_data_error(Path(directory), _wanted(), SUBDIR)
    return np.concatenate(images).astype(np.float64) / 255.0, np.concatenate(labels)


def _wanted() -> str:
    return " and/or ".join(f"{i}.gz + {l}.gz" for i, l in PAIRS)


def download_mnist(directory: str | Path) -> None:
    """Download all four files into ``directory``, trying ``MIRRORS`` in order per file."""
    for pair in PAIRS:
        for stem in pair:
            name = f"{stem}.gz"
            errors = []
            for mirror in MIRRORS:
                try:
                    fetch(name, mirror + name, MD5[name], directory)
                    break
                except (DownloadError, ChecksumError) as err:
                    errors.append(str(err))
            else:
                raise DownloadError(f"could not fetch {name} from any mirror: " + " | ".join(errors))


@dataclass(frozen=True)
class MnistPairs:
    """Seed-004 E1: 25 (even, odd) digit-pair silos, label 1 = even, PCA features.

    Parameters
    ----------
    directory:
        Folder with the IDX files; ``None`` resolves ``$FEDRAY_DATA_DIR/mnist`` or the cache.
    images_per_digit:
        n_m, images kept per digit (774 in the paper, 1/7 of the smallest train digit count).
    heterogeneity:
        p in [0, 1]; the share of each silo's records drawn from the pooled all-digit set.
    train_fraction:
        Per-silo train share (0.8: 1548 -> 1238 / 310).
    pca_dim:
        PCA output dimension (50), or ``None`` for the raw 784 scaled pixels.
    shuffle_images:
        ``False`` (default, authors' code): the first n_m images of each digit, same in every
        trial. ``True``: a seeded random n_m per digit, fresh each trial.
    download:
        Download the four files into the resolved directory when NO file pair is present.
        ``validate`` never downloads; ``prepare()`` does (call it once on the driver so that
        silo actors find the files), and ``load`` calls it too.
    """

    directory: str | None = None
    images_per_digit: int = 774
    heterogeneity: float = 0.0
    train_fraction: float = 0.8
    pca_dim: int | None = 50
    shuffle_images: bool = False
    download: bool = True
    cache: bool = True

    @property
    def num_silos(self) -> int:
        return len(EVENS) * len(ODDS)

    def source(self) -> str:
        """Where the records come from (logged with the run)."""
        return str(self.data_directory())

    def data_directory(self) -> Path:
        return resolve_directory(SUBDIR, self.directory)

    def validate(self) -> None:
        """Check fields, then that the files are there (or may be downloaded) and large enough."""
        check_int("data.images_per_digit", self.images_per_digit, 1)
        check_real("data.heterogeneity", self.heterogeneity, 0.0, 1.0)
        check_real("data.train_fraction", self.train_fraction, 0.0, 1.0, low_open=True, high_open=True)
        check_bool("data.shuffle_images", self.shuffle_images)
        check_bool("data.download", self.download)
        check_bool("data.cache", self.cache)
        per_silo = 2 * self.images_per_digit
        n_train, n_test = split_sizes(per_silo, self.train_fraction)
        if n_train < 1 or n_test < 1:
            raise ConfigError(
                "data.train_fraction", self.train_fraction,
                f"a fraction leaving train and test records in a {per_silo}-record silo",
            )
        if self.pca_dim is not None:
            check_int("data.pca_dim", self.pca_dim, 1, min(NUM_PIXELS, self.num_silos * n_train))
        directory = self.data_directory()
        pairs = find_pairs(directory)
        if not pairs:
            _check_downloadable(directory, self.directory, self.download)
            return
        for image_path, label_path in pairs:
            _verify(image_path)
            _verify(label_path)
        self._check_counts(read_labels(directory), directory)

    def prepare(self) -> Path:
        """Make sure the files are present (downloading if allowed and none are); return the folder."""
        return _prepare(self.data_directory(), self.directory, self.download)

    def describe(self) -> FederationShape:
        n_train, _ = split_sizes(2 * self.images_per_digit, self.train_fraction)
        return FederationShape(
            num_silos=self.num_silos,
            n_train=(n_train,) * self.num_silos,
            dim=NUM_PIXELS if self.pca_dim is None else self.pca_dim,
            num_outputs=1,
            task="binary",
            preprocessing_outside_guarantee=() if self.pca_dim is None else (
                f"the PCA basis (data.spec.pca_dim={self.pca_dim}) is fitted on the pooled training records of "
                "all silos (data.spec.pca_dim=null: raw pixels)",),
        )

    def load(self, seed: int, trial: int = 0, silo_ids=None) -> Federation:
        """The federation of (seed, trial), or only the silos ``silo_ids`` in that order."""
        fed = self._load_all(seed, trial)
        return fed if silo_ids is None else fed.select(silo_ids)

    def _load_all(self, seed: int, trial: int) -> Federation:
        directory = self.prepare()
        return cached_federation(self, seed, trial, directory, lambda: self._build(directory, seed, trial))

    def _build(self, directory: Path, seed: int, trial: int) -> Federation:
        images, labels = read_mnist(directory)
        train_idx, test_idx = self._draw(labels, data_generator(seed, trial))
        x_train, x_test = images[train_idx], images[test_idx]
        if self.pca_dim is not None:
            x_train, x_test = _pca(x_train, x_test, self.pca_dim)
        num_silos = self.num_silos
        return Federation(
            x_train=x_train,
            y_train=_even(labels[train_idx]),
            n_train=np.full(num_silos, train_idx.shape[1], dtype=np.int64),
            x_test=x_test,
            y_test=_even(labels[test_idx]),
            n_test=np.full(num_silos, test_idx.shape[1], dtype=np.int64),
            task="binary",
            num_outputs=1,
        )

    def digits(self, seed: int, trial: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The digit (0-9) of every record ``load(seed, trial)`` returns: (train (N, n), test (N, m)).

        Reads only the label files; useful to inspect the heterogeneity.
        """
        labels = read_labels(self.prepare())
        train_idx, test_idx = self._draw(labels, data_generator(seed, trial))
        return labels[train_idx], labels[test_idx]

    def _check_counts(self, labels: np.ndarray, directory: Path) -> None:
        fewest = int(np.bincount(labels, minlength=10)[:10].min())
        if self.images_per_digit > fewest:
            raise ConfigError(
                "data.images_per_digit", self.images_per_digit,
                f"at most {fewest}, the fewest images of any digit in {directory}",
            )

    def _draw(self, labels: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Indices into the concatenated files: (train (N, n_train), test (N, n_test)), steps 2-5."""
        self._check_counts(labels, self.data_directory())
        kept = []
        for digit in range(10):
            where = np.flatnonzero(labels == digit)
            if self.shuffle_images:
                where = np.sort(rng.choice(where, size=self.images_per_digit, replace=False))
            kept.append(where[: self.images_per_digit])
        per_silo = 2 * self.images_per_digit
        pair_pools = np.stack([np.concatenate([kept[e], kept[o]]) for e in EVENS for o in ODDS])
        all_digits = np.concatenate(kept)
        num_silos = pair_pools.shape[0]
        n_own = round(per_silo * (1.0 - self.heterogeneity))
        own = np.take_along_axis(pair_pools, rng.integers(0, per_silo, size=(num_silos, n_own)), axis=1)
        mixed = all_digits[rng.integers(0, all_digits.size, size=(num_silos, per_silo - n_own))]
        chosen = np.concatenate([own, mixed], axis=1)
        order = rng.permuted(np.broadcast_to(np.arange(per_silo), chosen.shape), axis=1)
        chosen = np.take_along_axis(chosen, order, axis=1)
        n_train, _ = split_sizes(per_silo, self.train_fraction)
        return chosen[:, :n_train], chosen[:, n_train:]


def _check_downloadable(directory: Path, explicit, download: bool) -> None:
    """A folder without the files is an error unless a download into the cache (or an explicit
    data.directory) is allowed; a $FEDRAY_DATA_DIR of offline copies is never written to."""
    if offline_copies(explicit):
        raise missing_data_error(directory, _wanted(), SUBDIR, "nothing is downloaded into $FEDRAY_DATA_DIR")
    if not download:
        raise missing_data_error(directory, _wanted(), SUBDIR, "or set data.download=true")


def _prepare(directory: Path, explicit, download: bool) -> Path:
    if not find_pairs(directory):
        _check_downloadable(directory, explicit, download)
        download_mnist(directory)
    return directory


@dataclass(frozen=True)
class MnistUsers:
    """MNIST even vs odd with one image per user (seed 000's X3): a public part, test images, users.

    Per trial, a seeded permutation of all images present (``data_generator(seed, trial)``) puts
    the first ``public_images`` aside as PUBLIC data (they fit the PCA basis and the feature scale
    and are never anyone's record), the next ``test_images`` as held-out test records (attached one
    each to users 0.., for the driver's test error) and the rest as the users, one training image
    each. Features: the PCA projection to ``pca_dim`` (scikit-learn, fitted on the public part
    only), divided by max(c, ||x||) with c the largest norm among the public projections, so every
    record has ||x|| <= 1 (a logistic loss is then 1-Lipschitz) from public information alone.
    Label 1 for an even digit, 0 for odd. With the t10k files only (10,000 images) the defaults give
    8,000 users, 1,000 test images and 1,000 public images.
    """

    directory: str | None = None
    public_images: int = 1000
    test_images: int = 1000
    pca_dim: int = 20
    download: bool = True
    cache: bool = True

    def source(self) -> str:
        return str(self.data_directory())

    def data_directory(self) -> Path:
        return resolve_directory(SUBDIR, self.directory)

    def prepare(self) -> Path:
        return _prepare(self.data_directory(), self.directory, self.download)

    @property
    def num_silos(self) -> int:
        return self._total() - self.public_images - self.test_images

    def _total(self) -> int:
        """Images present (70,000 once the four files are downloaded)."""
        directory = self.data_directory()
        return len(read_labels(directory)) if find_pairs(directory) else 70_000

    def validate(self) -> None:
        check_int("data.public_images", self.public_images, 1)
        check_int("data.test_images", self.test_images, 1)
        check_int("data.pca_dim", self.pca_dim, 1, min(NUM_PIXELS, self.public_images))
        check_bool("data.download", self.download)
        check_bool("data.cache", self.cache)
        directory = self.data_directory()
        if not find_pairs(directory):
            _check_downloadable(directory, self.directory, self.download)
        elif self.num_silos < 1:
            raise ConfigError("data.public_images", self.public_images,
                              f"a number leaving users among the {self._total()} images in {directory}")

    def describe(self) -> FederationShape:
        return FederationShape(num_silos=self.num_silos, n_train=(1,) * self.num_silos, dim=self.pca_dim,
                               num_outputs=1, task="binary")

    def load(self, seed: int, trial: int = 0, silo_ids=None) -> Federation:
        directory = self.prepare()
        fed = cached_federation(self, seed, trial, directory, lambda: self._build(directory, seed, trial))
        return fed if silo_ids is None else fed.select(np.asarray(silo_ids))

    def _build(self, directory: Path, seed: int, trial: int) -> Federation:
        from sklearn.decomposition import PCA

        images, labels = read_mnist(directory)
        order = data_generator(seed, trial).permutation(len(labels))
        public, test = order[:self.public_images], order[self.public_images:self.public_images + self.test_images]
        users = order[self.public_images + self.test_images:]
        pca = PCA(n_components=self.pca_dim, svd_solver="covariance_eigh").fit(images[public])
        scale = float(np.linalg.norm(pca.transform(images[public]), axis=1).max())

        def features(rows: np.ndarray) -> np.ndarray:
            x = pca.transform(images[rows])
            return x / np.maximum(scale, np.linalg.norm(x, axis=1, keepdims=True))

        n = users.size
        x_test, y_test = np.zeros((n, 1, self.pca_dim)), np.zeros((n, 1))
        x_test[:test.size, 0], y_test[:test.size, 0] = features(test), _even(labels[test])
        return Federation(x_train=features(users)[:, None, :], y_train=_even(labels[users])[:, None],
                          n_train=np.ones(n, dtype=np.int64), x_test=x_test, y_test=y_test,
                          n_test=(np.arange(n) < test.size).astype(np.int64), task="binary", num_outputs=1)


def _even(digits: np.ndarray) -> np.ndarray:
    return (digits % 2 == 0).astype(np.float64)


def _pca(x_train: np.ndarray, x_test: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Project both onto the top ``dim`` components of the pooled training records."""
    from sklearn.decomposition import PCA

    num_silos, n_train, num_features = x_train.shape
    pca = PCA(n_components=dim, svd_solver="covariance_eigh").fit(x_train.reshape(-1, num_features))

    def project(x: np.ndarray) -> np.ndarray:
        return pca.transform(x.reshape(-1, num_features)).reshape(*x.shape[:2], dim)

    return project(x_train), project(x_test)
