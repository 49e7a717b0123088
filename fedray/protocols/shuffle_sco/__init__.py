"""Seed 000: shuffle-private stochastic convex optimization (users with one record each, P_vec)."""

from fedray.protocols.shuffle_sco.p_agd import PAGD
from fedray.protocols.shuffle_sco.p_gd import PGD
from fedray.protocols.shuffle_sco.p_sgd import PSGD, PSGDState

__all__ = ["PAGD", "PGD", "PSGD", "PSGDState"]
