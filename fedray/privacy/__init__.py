"""Privacy: mechanisms as values, dp-accounting ledgers, amplification by shuffling, audits."""

from fedray._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "fedray.privacy.amplification": ("closed_form_shuffled_epsilon", "numerical_shuffled_epsilon",
                                     "shuffled_epsilon_delta"),
    "fedray.privacy.audit": ("AuditResult", "audit_epsilon", "gaussian_mechanism_sampler"),
    "fedray.privacy.accounting": ("calibrate_noise_multiplier", "epsilon_of", "make_accountant",
                                  "participation_epsilon", "participation_event", "release_event"),
    "fedray.privacy.ledger": ("Ledger", "RoundsAccountant", "SampledGaussianAccountant", "CentralGaussianAccountant",
                               "PoissonGaussianAccountant", "GroupPrivacyAccountant", "check_budget", "silo_ledger",
                               "central_gaussian_ledger", "poisson_gaussian_ledger"),
    "fedray.privacy.vector_sum": ("VectorSumParameters", "vector_sum_parameters"),
    "fedray.privacy.central_rounds": ("ServerGaussianRounds", "poisson_noise_multiplier", "server_gaussian_rounds"),
    "fedray.privacy.mechanisms": ("GaussianNoise", "ServerGaussianNoise", "NoNoise", "PerExampleClip", "UnitClip"),
})
