"""The synthetic silos the algorithm tests share."""

import numpy as np

from fedray.data import SiloArrays
from fedray.data import Federation, SyntheticLinear


def synthetic_silos(num_silos: int, samples_per_silo: int, seed: int) -> tuple[Federation, SiloArrays]:
    """A federation (d = 5, heterogeneity 0.3, ||x|| <= 2) and its training records as SiloArrays."""
    fed = SyntheticLinear(num_silos=num_silos, samples_per_silo=samples_per_silo, dim=5, heterogeneity=0.3,
                          noise=0.5, feature_norm=2.0).load(seed)
    return fed, SiloArrays(np.arange(num_silos), fed.x_train, fed.y_train, fed.n_train,
                           np.linalg.norm(fed.x_train, axis=2))
