"""Health-insurance federation of seed-004 experiment E2: silos cut from records sorted by charges.

Symbols: N = ``num_silos``; 1338 records; d = 7 (six features and an intercept).

Build, per trial (seed-004 section 5, E2)
-----------------------------------------
1. Read ``insurance.csv`` (Kaggle "Medical Cost Personal Datasets", Choi 2018; Open Database
   licence; md5 checked). There is no stable public download URL, so a missing file is an
   error; put a copy in the data folder.
2. Label-encode sex, smoker and region, codes in alphabetical order (as scikit-learn's
   LabelEncoder): female 0 / male 1; no 0 / yes 1; northeast 0, northwest 1, southeast 2,
   southwest 3.
3. Sort by charges ascending (a stable sort, so ties keep file order) and cut into N groups:
   the first N - 1 hold ceil(1338 / N) records each and the last holds the rest. Silo 0 has
   the cheapest records, which gives label-based heterogeneity.
4. A random 80/20 split inside every silo, fresh per trial (n_train = floor(0.8 n)).
5. Standardize age and bmi with TRAINING statistics (population std): ``per_silo`` uses each
   silo's own training records (the authors' code), ``pooled`` the training records of all
   silos. Children stays unscaled, as in the authors' code.
6. Features in column order age, sex, bmi, children, smoker, region, intercept; the target is
   charges in dollars, unscaled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedray.data._prep import (
    check_choice,
    check_real,
    check_units,
    label_encode,
    random_split,
    split_sizes,
    standardize,
    with_intercept,
)
from fedray.data.download import missing_data_error, resolve_directory, verify_md5
from fedray.data.federation import Federation, FederationShape, stack_silos
from fedray.errors import ConfigError
from fedray.rng import data_generator

FILENAME = "insurance.csv"
MD5 = "f86198943bbad63258a06f54f847265b"
NUM_RECORDS = 1338  # fixed by the md5
ORIGIN = "https://www.kaggle.com/datasets/mirichoi0218/insurance"
FEATURES = ("age", "sex", "bmi", "children", "smoker", "region")
CATEGORICAL = ("sex", "smoker", "region")
SCALED = ("age", "bmi")
TARGET = "charges"
STANDARDIZE = ("per_silo", "pooled")


def silo_sizes(num_records: int, num_silos: int) -> tuple[int, ...]:
    """Group sizes before the split: N - 1 groups of ceil(n / N), the rest in the last."""
    size = math.ceil(num_records / num_silos)
    return (size,) * (num_silos - 1) + (num_records - size * (num_silos - 1),)


@dataclass(frozen=True)
class InsuranceSorted:
    """Seed-004 E2: N silos of consecutive records in order of charges; linear regression.

    Parameters
    ----------
    directory:
        Folder holding ``insurance.csv``; ``None`` resolves ``$FEDRAY_DATA_DIR`` or the cache.
    num_silos:
        N (3, 5, 10 or 15 in the paper; 10 by default).
    train_fraction:
        Per-silo train share (0.8).
    standardize:
        ``per_silo`` (authors' code) or ``pooled`` training statistics for age and bmi.
    """

    directory: str | None = None
    num_silos: int = 10
    train_fraction: float = 0.8
    standardize: str = "per_silo"

    def path(self) -> Path:
        return resolve_directory("", self.directory) / FILENAME

    def source(self) -> str:
        """Where the records come from (logged with the run)."""
        return str(self.path())

    def validate(self) -> None:
        check_units("data.num_silos", self.num_silos)
        check_real("data.train_fraction", self.train_fraction, 0.0, 1.0, low_open=True, high_open=True)
        check_choice("data.standardize", self.standardize, STANDARDIZE)
        self._checked_path()
        self._sizes()

    def describe(self) -> FederationShape:
        return FederationShape(
            num_silos=self.num_silos,
            n_train=tuple(split_sizes(n, self.train_fraction)[0] for n in self._sizes()),
            dim=len(FEATURES) + 1,
            num_outputs=1,
            task="regression",
        )

    def load(self, seed: int, trial: int = 0, silo_ids=None) -> Federation:
        """The federation of (seed, trial), or only the silos ``silo_ids`` in that order."""
        fed = self._load_all(seed, trial)
        return fed if silo_ids is None else fed.select(silo_ids)

    def _load_all(self, seed: int, trial: int) -> Federation:
        x, y = self._sorted_records()
        rng = data_generator(seed, trial)
        bounds = np.cumsum((0,) + self._sizes())
        train, test = [], []
        for start, stop in zip(bounds[:-1], bounds[1:]):
            x_silo, y_silo = x[start:stop], y[start:stop]
            train_rows, test_rows = random_split(stop - start, self.train_fraction, rng)
            train.append((x_silo[train_rows], y_silo[train_rows]))
            test.append((x_silo[test_rows], y_silo[test_rows]))
        scaled = [FEATURES.index(name) for name in SCALED]
        pooled = np.concatenate([x_train for x_train, _ in train])
        for i, ((x_train, y_train), (x_test, y_test)) in enumerate(zip(train, test)):
            reference = x_train if self.standardize == "per_silo" else pooled
            x_train, x_test = standardize(scaled, reference, x_train, x_test)
            train[i] = (with_intercept(x_train), y_train)
            test[i] = (with_intercept(x_test), y_test)
        return stack_silos(train, test, task="regression", num_outputs=1)

    def sorted_targets(self) -> np.ndarray:
        """All charges in ascending order: silo i holds a consecutive block of them."""
        return self._sorted_records()[1]

    def _checked_path(self) -> Path:
        path = self.path()
        if not path.is_file():
            raise missing_data_error(path.parent, f"{FILENAME} (from {ORIGIN})", "")
        verify_md5(path, MD5)
        return path

    def _sorted_records(self) -> tuple[np.ndarray, np.ndarray]:
        """(features (n, 6) after label encoding, charges (n,)), in ascending order of charges."""
        import pandas as pd

        frame = pd.read_csv(self._checked_path())
        columns = [
            label_encode(frame[name].to_numpy()) if name in CATEGORICAL else frame[name].to_numpy(np.float64)
            for name in FEATURES
        ]
        x = np.column_stack(columns)
        y = frame[TARGET].to_numpy(np.float64)
        order = np.argsort(y, kind="stable")
        return x[order], y[order]

    def _sizes(self) -> tuple[int, ...]:
        """Per-silo sizes before the split; raises if N cannot give every silo both splits."""
        sizes = silo_sizes(NUM_RECORDS, self.num_silos)
        n_train, n_test = split_sizes(min(sizes), self.train_fraction)
        if min(sizes) < 1 or n_train < 1 or n_test < 1:
            raise ConfigError(
                "data.num_silos", self.num_silos,
                f"small enough that every silo of the {NUM_RECORDS} records gets train and test "
                f"records (groups of ceil({NUM_RECORDS}/N), the rest in the last)",
            )
        return sizes
