"""Obesity-level federation of seed-004 experiment E3: one silo per class, softmax regression.

Symbols: N = 7 silos (one per class), C = 7 outputs, d = 17 (16 attributes and an intercept).

Build, per trial (seed-004 section 5, E3)
-----------------------------------------
1. Read ``obesity.csv`` (UCI "Estimation of obesity levels based on eating habits and physical
   condition", CC BY 4.0; UCI names it ``ObesityDataSet_raw_and_data_sinthetic.csv`` and either
   name is accepted; md5 checked). UCI serves it inside a zip archive with no stable direct
   link, so a missing file is an error; put a copy in the data folder.
2. Label-encode the eight categorical columns, codes in alphabetical order of the values.
3. Class index = position of the class name in sorted order (``CLASSES``): 0
   Insufficient_Weight, 1 Normal_Weight, 2 Obesity_Type_I, 3 Obesity_Type_II,
   4 Obesity_Type_III, 5 Overweight_Level_I, 6 Overweight_Level_II. Silo i holds class i.
4. A global 80/20 split, stratified by class: each class contributes floor(0.8 n_c) random
   records to the training split. (The authors split without stratifying, so their per-class
   counts, and hence the balanced silo size, varied from trial to trial, n ~ 202-211;
   stratifying makes the silo sizes a function of the config, n = 217, so the planner can know
   them before loading.) Fresh per trial.
5. Standardize Age, Height, Weight, CH2O and TUE with the mean and population std of the whole
   training split (before balancing); other columns stay as encoded. Append an intercept.
6. Balance: every silo keeps ``n = min_c floor(0.8 n_c)`` training records. ``balance`` picks
   how: ``without_replacement`` (default; the paper's text, "discarding random samples"),
   ``with_replacement`` (the authors' code, section 6 item 14e) or ``none`` (keep all).
7. Each silo's test set is its class's share of the global test split (sizes differ by class).

Labels ``y`` hold the class index as a float.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedray.data._prep import (
    check_choice,
    check_real,
    label_encode,
    split_sizes,
    standardize,
    with_intercept,
)
from fedray.data.download import missing_data_error, resolve_directory, verify_md5
from fedray.data.federation import Federation, FederationShape, stack_silos
from fedray.errors import ConfigError
from fedray.rng import data_generator

FILENAMES = ("obesity.csv", "ObesityDataSet_raw_and_data_sinthetic.csv")
MD5 = "aff636fcccdf0a24ed7186e48bad2548"
ORIGIN = "https://archive.ics.uci.edu/dataset/544"
TARGET = "NObeyesdad"
FEATURES = (
    "Gender", "Age", "Height", "Weight", "family_history_with_overweight", "FAVC", "FCVC", "NCP",
    "CAEC", "SMOKE", "CH2O", "SCC", "FAF", "TUE", "CALC", "MTRANS",
)
CATEGORICAL = ("Gender", "family_history_with_overweight", "FAVC", "CAEC", "SMOKE", "SCC", "CALC", "MTRANS")
SCALED = ("Age", "Height", "Weight", "CH2O", "TUE")
# Records per class in the md5-pinned file, in sorted class-name order (silo order).
CLASS_COUNTS = {
    "Insufficient_Weight": 272,
    "Normal_Weight": 287,
    "Obesity_Type_I": 351,
    "Obesity_Type_II": 297,
    "Obesity_Type_III": 324,
    "Overweight_Level_I": 290,
    "Overweight_Level_II": 290,
}
CLASSES = tuple(sorted(CLASS_COUNTS))
BALANCE = ("without_replacement", "with_replacement", "none")


@dataclass(frozen=True)
class ObesityByClass:
    """Seed-004 E3: 7 single-class silos, balanced training sets, 17 features.

    Parameters
    ----------
    directory:
        Folder holding ``obesity.csv``; ``None`` resolves ``$FEDRAY_DATA_DIR`` or the cache.
    train_fraction:
        Share of each class in the global training split (0.8).
    balance:
        ``without_replacement`` (paper text), ``with_replacement`` (authors' code) or ``none``.
    """

    directory: str | None = None
    train_fraction: float = 0.8
    balance: str = "without_replacement"

    def source(self) -> str:
        """Where the records come from (logged with the run)."""
        return str(self.path())

    def path(self) -> Path:
        """The first of ``FILENAMES`` present (the first name if none is)."""
        folder = resolve_directory("", self.directory)
        for name in FILENAMES:
            if (folder / name).is_file():
                return folder / name
        return folder / FILENAMES[0]

    def validate(self) -> None:
        check_real("data.train_fraction", self.train_fraction, 0.0, 1.0, low_open=True, high_open=True)
        check_choice("data.balance", self.balance, BALANCE)
        for count in CLASS_COUNTS.values():
            n_train, n_test = split_sizes(count, self.train_fraction)
            if n_train < 1 or n_test < 1:
                raise ConfigError(
                    "data.train_fraction", self.train_fraction,
                    f"a fraction leaving train and test records in a {count}-record class",
                )
        self._checked_path()

    def describe(self) -> FederationShape:
        return FederationShape(
            num_silos=len(CLASSES),
            n_train=self._train_sizes(),
            dim=len(FEATURES) + 1,
            num_outputs=len(CLASSES),
            task="multiclass",
        )

    def load(self, seed: int, trial: int = 0, silo_ids=None) -> Federation:
        """The federation of (seed, trial), or only the silos ``silo_ids`` in that order."""
        fed = self._load_all(seed, trial)
        return fed if silo_ids is None else fed.select(silo_ids)

    def _load_all(self, seed: int, trial: int) -> Federation:
        x, y = self._records()
        rng = data_generator(seed, trial)
        train_rows, test_rows = [], []
        for label in range(len(CLASSES)):
            rows = rng.permutation(np.flatnonzero(y == label))
            n_train, _ = split_sizes(rows.size, self.train_fraction)
            train_rows.append(rows[:n_train])
            test_rows.append(rows[n_train:])
        scaled = [FEATURES.index(name) for name in SCALED]
        (x,) = standardize(scaled, x[np.concatenate(train_rows)], x)
        x = with_intercept(x)
        size = min(rows.size for rows in train_rows)
        if self.balance == "without_replacement":
            train_rows = [rng.choice(rows, size=size, replace=False) for rows in train_rows]
        elif self.balance == "with_replacement":
            train_rows = [rng.choice(rows, size=size, replace=True) for rows in train_rows]
        train = [(x[rows], y[rows]) for rows in train_rows]
        test = [(x[rows], y[rows]) for rows in test_rows]
        return stack_silos(train, test, task="multiclass", num_outputs=len(CLASSES))

    def _train_sizes(self) -> tuple[int, ...]:
        sizes = tuple(split_sizes(CLASS_COUNTS[name], self.train_fraction)[0] for name in CLASSES)
        return sizes if self.balance == "none" else (min(sizes),) * len(sizes)

    def _checked_path(self) -> Path:
        path = self.path()
        if not path.is_file():
            raise missing_data_error(path.parent, f"{' or '.join(FILENAMES)} (from {ORIGIN})", "")
        verify_md5(path, MD5)
        return path

    def _records(self) -> tuple[np.ndarray, np.ndarray]:
        """(features (n, 16) float64 after label encoding, class index (n,) float64)."""
        import pandas as pd

        frame = pd.read_csv(self._checked_path())
        columns = [
            label_encode(frame[name].to_numpy()) if name in CATEGORICAL else frame[name].to_numpy(np.float64)
            for name in FEATURES
        ]
        y = np.searchsorted(CLASSES, frame[TARGET].to_numpy().astype(str)).astype(np.float64)
        return np.column_stack(columns), y
