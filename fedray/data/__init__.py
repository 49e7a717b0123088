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

from fedray._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "fedray.data.download": ("ChecksumError", "DownloadError", "fetch", "resolve_directory"),
    "fedray.data.federation": ("DataSpec", "Federation", "FederationShape", "KnownPopulation", "PreparedFiles", "SiloArrays",
                               "stack_silos"),
    "fedray.data.insurance": ("InsuranceSorted",),
    "fedray.data.logistic_tasks": ("LogisticTasks", "TaskSamples"),
    "fedray.data.matrix_game": ("DenseMatrixGame", "GameSamples", "PaddedMatrixGame"),
    "fedray.data.mnist": ("IdxFormatError", "MnistPairs", "MnistUsers", "read_idx", "write_idx"),
    "fedray.data.obesity": ("ObesityByClass",),
    "fedray.data.sphere_regression": ("SphereRegression",),
    "fedray.data.synthetic": ("SyntheticLinear",),
    "fedray.data.user_means": ("BinomialUserMeans",),
})
