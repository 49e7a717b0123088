"""Dataset specs: frozen configs that validate, describe and load a ``Federation``.

Every spec has the same three methods:

- ``validate()`` raises ``ConfigError`` for a bad field (key ``data.<field>``) or missing files;
- ``describe()`` returns the ``FederationShape`` cheaply, without loading records;
- ``load(seed, trial=0, silo_ids=None)`` builds the ``Federation``, deterministic in (seed, trial),
  with ``load(...).shape == describe()``; with ``silo_ids``, only those silos, in that order, equal
  to ``load(seed, trial).select(silo_ids)`` (a silo actor builds only its own silos; the synthetic
  generator then skips the others).

Data folders resolve as explained in ``fedray.data.download`` (``FEDRAY_DATA_DIR``,
``FEDRAY_CACHE_DIR``).
"""

from fedray.data.download import ChecksumError, DownloadError, fetch, resolve_directory
from fedray.data.federation import Federation, FederationShape, SiloArrays, stack_silos
from fedray.data.insurance import InsuranceSorted
from fedray.data.logistic_tasks import LogisticTasks, TaskSamples
from fedray.data.matrix_game import DenseMatrixGame, GameSamples, PaddedMatrixGame
from fedray.data.mnist import IdxFormatError, MnistPairs, MnistUsers, read_idx, write_idx
from fedray.data.obesity import ObesityByClass
from fedray.data.sphere_regression import SphereRegression
from fedray.data.synthetic import SyntheticLinear
from fedray.data.user_means import BinomialUserMeans

__all__ = [
    "BinomialUserMeans",
    "ChecksumError",
    "DenseMatrixGame",
    "DownloadError",
    "Federation",
    "GameSamples",
    "FederationShape",
    "IdxFormatError",
    "InsuranceSorted",
    "LogisticTasks",
    "MnistPairs",
    "MnistUsers",
    "ObesityByClass",
    "PaddedMatrixGame",
    "SiloArrays",
    "SphereRegression",
    "SyntheticLinear",
    "TaskSamples",
    "fetch",
    "read_idx",
    "resolve_directory",
    "stack_silos",
    "write_idx",
]
