"""Privacy: calibration formulas, mechanisms as values, dp-accounting ledgers."""

from fedray.privacy.amplification import (
    closed_form_shuffled_epsilon,
    numerical_shuffled_epsilon,
    shuffled_epsilon_delta,
)
from fedray.privacy.audit import AuditResult, audit_epsilon, gaussian_mechanism_sampler
from fedray.privacy.accounting import (
    SiloLedger,
    calibrate_noise_multiplier,
    epsilon_of,
    make_accountant,
    participation_epsilon,
    participation_event,
    release_event,
)
from fedray.privacy.calibration import (
    default_delta,
    paper_batch_size,
    paper_local_sgd_noise_multiplier,
    paper_minibatch_noise_multiplier,
    theory_minibatch_noise_multiplier,
)
from fedray.privacy.shuffle_calibration import ShuffleCalibration, calibrate_shuffled_sgd
from fedray.privacy.vector_sum import VectorSumParameters, VectorSumRandomizer, vector_sum_parameters
from fedray.privacy.mechanisms import GaussianNoise, NoNoise, PerExampleClip

__all__ = [
    "ShuffleCalibration",
    "VectorSumParameters",
    "VectorSumRandomizer",
    "calibrate_shuffled_sgd",
    "vector_sum_parameters",
    "AuditResult",
    "audit_epsilon",
    "closed_form_shuffled_epsilon",
    "gaussian_mechanism_sampler",
    "numerical_shuffled_epsilon",
    "shuffled_epsilon_delta",
    "GaussianNoise",
    "NoNoise",
    "SiloLedger",
    "default_delta",
    "epsilon_of",
    "make_accountant",
    "paper_batch_size",
    "paper_local_sgd_noise_multiplier",
    "paper_minibatch_noise_multiplier",
    "PerExampleClip",
    "calibrate_noise_multiplier",
    "participation_epsilon",
    "participation_event",
    "release_event",
    "theory_minibatch_noise_multiplier",
]
