"""Seed 000: shuffle-private stochastic convex optimization (users with one record each, P_vec)."""

from fedray.protocols.shuffle_sco.p_sgd import PSGD, PSGDState

__all__ = ["PSGD", "PSGDState"]
