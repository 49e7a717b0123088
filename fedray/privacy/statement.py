"""A run's privacy plan: who is trusted, the unit and neighbouring relation, the calibration, the
targets, and the ledger that will price what runs. Built by a protocol package at planning."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedray.privacy.ledger import Ledger


@dataclass(frozen=True)
class PrivacyPlan:
    trust_model: str                     # isrl_dp, sdp, central, user_level, local, or none
    calibration: str                     # how the noise was chosen (paper, theory, accountant, none)
    accountant: str                      # what prices the releases (rdp, pld, advanced, ...)
    unit: str                            # whose privacy the ledger tracks, e.g. "record of one silo"
    relation: str                        # the neighbouring relation of that unit, e.g. "replace_one"
    delta: np.ndarray                    # (N,)
    noise_multiplier: np.ndarray         # (P, N); 0 = no Gaussian noise
    target_epsilon: np.ndarray | None    # (P, N); None when not private
    ledger: Ledger | None                # a fresh ledger of this run; None when not private
    planned_epsilon: np.ndarray | None = None   # (P, N) for the sampler's counts
    nominal_epsilon: np.ndarray | None = None   # (P, N) what the paper's formula claims for this noise
    details: dict = field(default_factory=dict)  # resolved values worth logging (chain parameters, ...)

    @property
    def private(self) -> bool:
        return self.trust_model != "none"

    def statement(self) -> str:
        """One line for the run record."""
        if not self.private:
            return "not private (a baseline): no unit is protected"
        return (f"{self.trust_model}: unit = {self.unit}, neighbours {self.relation}, calibration "
                f"{self.calibration}, accountant {self.accountant}")
