"""A run's privacy plan: who is trusted, the unit and neighbouring relation, the calibration, the
targets, and the ledger that will price what runs. Built by a protocol package at planning."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedray.core.terms import Calibration, Relation, TrustModel
from fedray.privacy.ledger import EventAccountant, Ledger

SIMULATOR_VIEW = ("simulation: every draw follows from the logged run seed (the units' noise, minibatches and "
                  "shuffles, and a trusted curator's noise, vertex draws and selections), so the run repeats bit for "
                  "bit and whoever holds its record can recompute, and subtract, its noise; the driver receives "
                  "per-unit evaluation parts each evaluated round (diagnostic); the guarantee is what a deployment "
                  "running this protocol would have")
FAITHFUL_VIEW = ("faithful: the driver received only the protocol's messages. Not reproducible: the units' noise and "
                 "minibatches and the shuffles (entropy drawn inside the actors and the shuffler) and the trusted "
                 "curator's noise, vertex draws and selections (keyed by secret words of OS entropy drawn on the "
                 "driver at planning, never logged); the logged configuration, seed included, does not determine "
                 "them. Reproducible from it: the data, who takes part each round and public random levels. Models "
                 "were evaluated after the run (diagnostic)")


REPLICAS = ("epsilon and delta are per replica: replicas are repetitions on the same units, so publishing "
            "several of them costs the sum of their epsilons and deltas (basic composition)")


@dataclass(frozen=True)
class GroupGuarantee:
    """A coarser unit the ledger's guarantee covers by group privacy: ledger unit i belongs to a
    group (a silo's dataset) of ``sizes[i]`` units, and group neighbours differ in at most that
    many of them. An (eps, delta)-DP mechanism is (k eps, k e^{(k - 1) eps} delta)-DP for
    neighbours k units apart (Dwork and Roth 2014, the group privacy of (eps, delta)-DP; seed-004
    Lemma D.9), so the group guarantee follows from the ledger's and is computed from it, never
    stated on its own."""

    unit: str                    # e.g. "silo (all of its records)"
    relation: str                # e.g. "replace one silo's whole dataset"
    sizes: np.ndarray            # (N,) k of each ledger unit's group

    def convert(self, epsilon: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(k eps, k e^{(k - 1) eps} delta) per (replica, unit) for (P, N) epsilon and (N,) delta."""
        k = np.asarray(self.sizes, dtype=np.float64)[None, :]
        epsilon = np.asarray(epsilon, dtype=np.float64)
        return k * epsilon, k * np.exp((k - 1) * epsilon) * np.asarray(delta, dtype=np.float64)[None, :]


@dataclass(frozen=True)
class PrivacyPlan:
    trust_model: TrustModel
    calibration: Calibration             # how the noise was chosen
    accountant: str                      # what prices the releases (rdp, pld, advanced, ...)
    unit: str                            # whose privacy the ledger tracks, e.g. "record of one silo"
    relation: Relation                   # the neighbouring relation of that unit
    delta: np.ndarray                    # (N,)
    noise_multiplier: np.ndarray         # (P, N); 0 = no Gaussian noise
    target_epsilon: np.ndarray | None    # (P, N); None when not private
    ledger: Ledger | None                # a fresh ledger of this run; None when not private
    planned_epsilon: np.ndarray | None = None   # (P, N) for the sampler's counts
    nominal_epsilon: np.ndarray | None = None   # (P, N) what the paper's formula claims for this noise
    details: dict = field(default_factory=dict)  # resolved values worth logging (chain parameters, ...)
    non_private_inputs: tuple[str, ...] = ()     # what the run uses that no privacy step covers
    faithful: bool = False                       # runtime.faithful: the driver sees only the protocol's messages
    stop_at_budget: bool = False                 # privacy.enforce_budget=stop: no round the budget cannot pay for
    group: GroupGuarantee | None = None          # a coarser unit covered by group privacy (hybrid silo level)
    planned_counts: np.ndarray | None = None     # (P, N) the ledger counts the budget guard priced

    @property
    def private(self) -> bool:
        return self.trust_model != TrustModel.NONE

    def statement(self, epsilon_spent: np.ndarray | None = None, diagnostics=(), stopped: str | None = None) -> dict:
        """What the run claims, for the run record: trust model, unit, neighbouring relation,
        calibration, accountant, delta, epsilon per unit (planned, or spent after the run), every
        input or output outside the guarantee (non-private inputs, diagnostic metrics), and why
        the run stopped before its last round if it did (``stopped``)."""
        record = {"trust_model": self.trust_model, "unit": self.unit, "neighbouring_relation": self.relation,
                  "calibration": self.calibration, "accountant": self.accountant}
        if self.private:
            epsilon = self.planned_epsilon if epsilon_spent is None else epsilon_spent
            record["delta_max"] = float(np.max(self.delta))
            if epsilon is not None:
                record["epsilon_per_unit_max"] = float(np.max(epsilon))
                record["epsilon_per_unit_mean"] = float(np.mean(epsilon))
                record["replicas"] = REPLICAS
                if self.group is not None:
                    record["group_level"] = self._group_record(epsilon)
        else:
            record["guarantee"] = "none: a non-private baseline"
        record["driver_view"] = FAITHFUL_VIEW if self.faithful else SIMULATOR_VIEW
        record["non_private_inputs"] = list(self.non_private_inputs)
        record["diagnostic_metrics"] = sorted(diagnostics)
        if stopped is not None:
            record["stopped"] = stopped
        return record

    def planned_event(self) -> dict | None:
        """The planned run of the worst (replica, unit) as one composed dp-accounting event, in JSON
        (``fedray.privacy.events.event_to_json``), with the cell, its planned epsilon and its delta;
        an accountant that prices by a theorem with no event (``ComposedAccountant``,
        ``RoundsAccountant``) gives a record whose ``event`` is null and says so. None when not
        private or not planned."""
        if not self.private or self.ledger is None or self.planned_epsilon is None or self.planned_counts is None:
            return None
        from fedray.privacy.events import event_to_json     # imports dp-accounting (a second): only here

        planned = np.asarray(self.planned_epsilon)
        replica, unit = (int(i) for i in np.unravel_index(int(np.argmax(planned)), planned.shape))
        accountant = self.ledger.accountant
        record: dict = {"unit": self.unit, "unit_id": unit, "replica": replica,
                        "neighbouring_relation": self.relation, "accountant": self.accountant,
                        "count": int(self.planned_counts[replica, unit]),
                        "epsilon": float(planned[replica, unit]), "delta": float(np.asarray(self.delta)[unit]),
                        "units_alike": bool(np.all(planned == planned.flat[0]))}
        if isinstance(accountant, EventAccountant):
            record["event"] = event_to_json(accountant.event(replica, unit, record["count"]))
        else:
            record["event"] = None
            record["why_no_event"] = (f"the {accountant.name} accountant prices releases by a composition "
                                      "theorem, not a dp-accounting event")
        return record

    def _group_record(self, epsilon: np.ndarray) -> dict:
        """The group-level guarantee computed from the per-unit ``epsilon`` (P, N) and delta."""
        group_epsilon, group_delta = self.group.convert(np.atleast_2d(epsilon), self.delta)
        return {"unit": self.group.unit, "neighbouring_relation": self.group.relation,
                "group_size_max": int(np.max(self.group.sizes)),
                "by": "group privacy: (k eps, k e^((k - 1) eps) delta) for groups of k units",
                "epsilon_per_unit_max": float(np.max(group_epsilon)), "delta_max": float(np.max(group_delta))}

    def summary(self) -> str:
        """One line: the trust model, unit and relation, and the inputs outside the guarantee."""
        if not self.private:
            return "not private (a baseline): no unit is protected"
        line = (f"{self.trust_model}: unit = {self.unit}, neighbours {self.relation}, calibration "
                f"{self.calibration}, accountant {self.accountant}")
        if self.group is not None:
            line += f"; by group privacy also unit = {self.group.unit}, neighbours {self.group.relation}"
        if self.non_private_inputs:
            line += "; outside the guarantee: " + "; ".join(self.non_private_inputs)
        return line + ("; faithful run (its noise is not reproducible)" if self.faithful
                       else "; simulation (the driver holds the noise seed)")
