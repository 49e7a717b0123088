"""Privacy: mechanisms as values, dp-accounting ledgers, amplification by shuffling, audits."""

from fedray.privacy.amplification import (
    closed_form_shuffled_epsilon,
    numerical_shuffled_epsilon,
    shuffled_epsilon_delta,
)
from fedray.privacy.audit import AuditResult, audit_epsilon, gaussian_mechanism_sampler
from fedray.privacy.accounting import (
    calibrate_noise_multiplier,
    epsilon_of,
    make_accountant,
    participation_epsilon,
    participation_event,
    release_event,
)
from fedray.privacy.ledger import Ledger, RoundsAccountant, SampledGaussianAccountant, check_budget, silo_ledger
from fedray.privacy.vector_sum import VectorSumParameters, VectorSumRandomizer, vector_sum_parameters
from fedray.privacy.mechanisms import GaussianNoise, NoNoise, PerExampleClip

__all__ = [
    "VectorSumParameters",
    "VectorSumRandomizer",
    "vector_sum_parameters",
    "AuditResult",
    "audit_epsilon",
    "closed_form_shuffled_epsilon",
    "gaussian_mechanism_sampler",
    "numerical_shuffled_epsilon",
    "shuffled_epsilon_delta",
    "GaussianNoise",
    "NoNoise",
    "Ledger",
    "RoundsAccountant",
    "SampledGaussianAccountant",
    "check_budget",
    "silo_ledger",
    "epsilon_of",
    "make_accountant",
    "PerExampleClip",
    "calibrate_noise_multiplier",
    "participation_epsilon",
    "participation_event",
    "release_event",
]
