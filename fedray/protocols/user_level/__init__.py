"""User-level DP protocols (seeds 002 and 003): a user is a silo of m records, neighbours replace
one user's records. ``OutputPerturbation`` is the driver-side baseline (B0 without privacy, B1)."""

from fedray.protocols.user_level.output_perturbation import OutputPerturbation

__all__ = ["OutputPerturbation"]
