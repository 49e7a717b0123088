"""Privacy: calibration formulas, mechanisms as values, dp-accounting ledgers."""

from fedray.privacy.accounting import SiloLedger, epsilon_of, make_accountant
from fedray.privacy.calibration import (
    default_delta,
    paper_batch_size,
    paper_local_sgd_noise_multiplier,
    paper_minibatch_noise_multiplier,
    theory_minibatch_noise_multiplier,
)
from fedray.privacy.mechanisms import GaussianNoise, NoNoise, subsampled_gaussian_event

__all__ = [
    "GaussianNoise",
    "NoNoise",
    "SiloLedger",
    "default_delta",
    "epsilon_of",
    "make_accountant",
    "paper_batch_size",
    "paper_local_sgd_noise_multiplier",
    "paper_minibatch_noise_multiplier",
    "subsampled_gaussian_event",
    "theory_minibatch_noise_multiplier",
]
