"""The closed vocabularies of a privacy configuration, as string enums.

A config's ``privacy.trust_model``, ``privacy.calibration``, ``privacy.accountant`` and
``privacy.composition`` each take one of a fixed set of words, and every privacy plan states its
neighbouring relation (``Relation``). The YAML keeps the words; the
planner (``fedray.plan``) turns them into these members in one place, and code compares against
members, never against string literals, so a misspelt comparison fails at import instead of
silently never matching. Each enum is a ``StrEnum``: a member equals, hashes and prints as its
word (MLflow parameters, JSON and checkpoint fingerprints see the same text as before), and its
``repr`` is the word's, so an error naming allowed values reads ``('paper', 'tight')``.

The words' meaning (who is trusted, how noise is chosen, what prices the releases) is stated by
each protocol package's docstring; here they are only names.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar


class _Term(StrEnum):
    def __repr__(self) -> str:
        return repr(self.value)


class TrustModel(_Term):
    """Who must be trusted (``privacy.trust_model``)."""

    NONE = "none"                  # a non-private baseline
    ISRL_DP = "isrl_dp"            # no trusted server; each silo noises its own messages
    SDP = "sdp"                    # a shuffler trusted only to permute and drop sender identity
    CENTRAL = "central"            # a trusted server or curator
    LOCAL = "local"                # no one: every unit noises before anything leaves it
    PAN_PRIVATE = "pan_private"    # a trusted curator whose state an intruder may see once


class Calibration(_Term):
    """How the noise (or step size) is chosen (``privacy.calibration``)."""

    NONE = "none"                  # no noise
    PAPER = "paper"                # the paper's formula
    THEORY = "theory"              # the formula of the theorem a preset names
    ACCOUNTANT = "accountant"      # the smallest noise whose accountant epsilon meets the target
    TIGHT = "tight"                # an exact privacy-loss bound of the mechanism as it runs
    ANALYTIC = "analytic"          # the analytic Gaussian mechanism


class Accountant(_Term):
    """What prices the releases (``privacy.accountant``)."""

    NONE = "none"
    RDP = "rdp"                    # dp-accounting's Renyi-DP accountant
    PLD = "pld"                    # dp-accounting's privacy-loss-distribution accountant
    ADVANCED = "advanced"          # advanced composition of (eps, delta) releases
    BASIC = "basic"                # basic composition
    PARALLEL = "parallel"          # parallel composition over disjoint units


class Composition(_Term):
    """How a run's (eps0, delta0) rounds compose (``privacy.composition``)."""

    ADVANCED = "advanced"          # the advanced composition theorem
    PLD = "pld"                    # the rounds' privacy-loss distributions composed


class Relation(_Term):
    """The neighbouring relation of a privacy unit (dp-accounting's ``NeighboringRelation``)."""

    REPLACE_ONE = "replace_one"    # neighbours differ in one unit's data, replaced
    ADD_REMOVE = "add_remove"      # neighbours differ by one unit added or removed


TERMS: dict[str, type[StrEnum]] = {"trust_model": TrustModel, "calibration": Calibration,
                                   "accountant": Accountant, "composition": Composition}

E = TypeVar("E", bound=StrEnum)


def member(kind: type[E], value: object) -> E | object:
    """``value`` as a member of ``kind`` if it is one of its words (or already a member), else
    ``value`` unchanged, for the check that knows the allowed subset to refuse in one line."""
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            return value
    return value


def as_terms(privacy: dict) -> dict:
    """A copy of a ``privacy`` config section with each closed-vocabulary word as its member."""
    return {key: member(TERMS[key], value) if key in TERMS else value for key, value in privacy.items()}
