"""Planning seed 000's sequential protocols: users with one record each, disjoint batches of users
per step, P_vec per batch (the ``ProtocolRecipe`` contract of ``fedray.core.planning``).

Privacy: each step is one P_vec invocation over B users at (eps, delta); every user is in one
batch (``SequentialBatches``), so the run spends (eps, delta) by parallel composition, for a user
anywhere in the population (``fedray.privacy.ledger.one_pass_ledger``). P_vec is calibrated
from (eps, delta, d C, B, L) in the silo actors; the planner builds the same parameters first, so
a budget or dimension P_vec cannot meet is a config error before any actor starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from fedray.checks import known_keys, number_in, positive
from fedray.core.planning import PlanContext, Replicas
from fedray.core.protocol import Routing, SequentialSteps
from fedray.core.sampling import SequentialBatches
from fedray.data.federation import SiloArrays
from fedray.errors import ConfigError
from fedray.evaluation import LinearModelEvaluation
from fedray.privacy.ledger import Ledger, one_pass_ledger
from fedray.privacy.statement import PrivacyPlan
from fedray.privacy.vector_sum import ExactSum, SplitVectorSum, vector_sum_parameters
from fedray.protocols.shuffle_sco.hyperparameters import MODES, sgd_schedule

RESOLVED_KEYS = ("_target_", "name", "step_size", "trust_model", "block_steps", "parameters")
USER = "user (one record) anywhere in the population"


@dataclass(frozen=True)
class PvecStepsPlan:
    """A seed-000 sequential protocol resolved against its data (``PlannedProtocol``)."""

    algorithm: object
    sampler: SequentialBatches
    loss: object
    shape: object
    replicas: Replicas
    num_rounds: int
    block_steps: int
    privacy: PrivacyPlan
    routing: Routing = Routing.SHUFFLE_SUM
    resolved: dict = field(default_factory=dict)

    def build(self, oracle) -> SequentialSteps:
        params0 = np.zeros((self.replicas.count, self.shape.dim, self.loss.num_outputs))
        return SequentialSteps(self.algorithm, self.sampler, LinearModelEvaluation(self.loss), SiloArrays.of,
                               params0, self.num_rounds, self.shape.num_silos, self.block_steps, self.routing,
                               {"l2_clip": float(self.algorithm.l2_clip)})


@dataclass(frozen=True)
class PvecSteps:
    trust_models: tuple[str, ...] = ("sdp", "none")
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()

    def resolve(self, algorithm_class: type, config: dict, dataset, shape, loss, sampler) -> dict:
        """``algorithm.parameters`` paper or exact: B, T and eta from the paper's formulas
        (``hyperparameters``), replacing participation.batch_size, num_rounds and step_size."""
        alg, priv = config["algorithm"], config["privacy"]
        mode = alg.get("parameters", "manual")
        if mode not in MODES:
            raise ConfigError("algorithm.parameters", mode, f"one of {MODES}")
        if mode == "manual":
            return config
        needs = f"for algorithm.parameters={mode} (the formulas' input)"
        eps = number_in("privacy.epsilon", priv.get("epsilon"), 0.0, 15.0, f"a number in (0, 15] {needs}",
                        closed_high=True)
        delta = number_in("privacy.delta", priv.get("delta"), 0.0, 0.5, f"a number in (0, 1/2) {needs}")
        lipschitz = positive("privacy.l2_clip", priv.get("l2_clip"))
        radius = alg.get("radius")
        if radius is None:
            raise ConfigError("algorithm.radius", radius, f"a positive number (Theta's radius, D = 2 radius) {needs}")
        diameter = 2.0 * positive("algorithm.radius", radius)
        schedule = sgd_schedule(mode, shape.num_silos, shape.dim * loss.num_outputs, eps, delta, lipschitz, diameter)
        return {**config, "num_rounds": schedule.num_steps,
                "participation": {**config["participation"], "batch_size": schedule.batch_size},
                "algorithm": {**alg, "step_size": schedule.step_size}}

    def plan(self, algorithm_class: type, config: dict, context: PlanContext) -> PvecStepsPlan:
        alg, priv, shape, sampler = config["algorithm"], config["privacy"], context.shape, context.sampler
        name = str(alg.get("name"))
        if priv["trust_model"] not in self.trust_models:
            raise ConfigError("privacy.trust_model", priv["trust_model"], f"one of {self.trust_models} for {name}")
        if not isinstance(sampler, SequentialBatches):
            raise ConfigError("participation", type(sampler).__name__,
                              f"sequential disjoint batches of users (participation=sequential) for {name}")
        if set(shape.n_train) != {1}:
            raise ConfigError("data", f"{min(shape.n_train)}..{max(shape.n_train)} records per unit",
                              f"one record per user for {name} (e.g. data.spec.samples_per_silo=1)")
        if context.replicas.epsilon_levels is not None:
            raise ConfigError("privacy.epsilon_grid", priv.get("epsilon_grid"), f"null for {name} (one budget per run)")
        allowed = {f.name for f in dataclasses.fields(algorithm_class)} - {"loss", "batch_size", "l2_clip", "vector_sum"}
        known_keys("algorithm", {k: v for k, v in alg.items() if k not in RESOLVED_KEYS}, allowed | set(RESOLVED_KEYS))
        block_steps = positive("algorithm.block_steps", alg.get("block_steps", 4096), int)
        radius = positive("algorithm.radius", alg.get("radius"), allow_none=True)
        l2_clip = positive("privacy.l2_clip", priv.get("l2_clip"),
                           allow_none=priv["trust_model"] == "none") or float("inf")
        batch, dim = sampler.batch_size, shape.dim * context.loss.num_outputs
        cells = (context.replicas.count, shape.num_silos)
        if priv["trust_model"] == "none":
            vector_sum, privacy = ExactSum(), PrivacyPlan(
                trust_model="none", calibration="none", accountant=priv["accountant"], unit=USER,
                relation="replace_one", delta=np.zeros(shape.num_silos), noise_multiplier=np.zeros(cells),
                target_epsilon=None, ledger=None)
        else:
            if priv["calibration"] != "paper":
                raise ConfigError("privacy.calibration", priv["calibration"], "paper for P_vec (seed-000 §2.2)")
            eps = number_in("privacy.epsilon", priv.get("epsilon"), 0.0, 15.0, "a number in (0, 15] for P_vec",
                            closed_high=True)
            delta = number_in("privacy.delta", priv.get("delta"), 0.0, 0.5, "an explicit number in (0, 1/2) for P_vec")
            try:
                parameters = vector_sum_parameters(eps, delta, dim, batch, l2_clip)
            except ConfigError as err:
                raise ConfigError("participation.batch_size", batch, f"a batch P_vec can serve here ({err})") from err
            vector_sum = SplitVectorSum(parameters)
            privacy = PrivacyPlan(
                trust_model=priv["trust_model"], calibration="paper", accountant="parallel", unit=USER,
                relation="replace_one", delta=np.full(shape.num_silos, delta), noise_multiplier=np.zeros(cells),
                target_epsilon=np.full(cells, eps),
                ledger=Ledger(one_pass_ledger(eps, delta), cells, "population"),
                details={"users_per_invocation": batch, "messages_per_user": parameters.messages_per_user})
        algorithm = algorithm_class(loss=context.loss, step_size=context.replicas.step_sizes, batch_size=batch,
                                    l2_clip=l2_clip, vector_sum=vector_sum, radius=radius)
        resolved = {"batch_size": batch, "block_steps": block_steps, "num_rounds": context.num_rounds,
                    "parameters": alg.get("parameters", "manual"), **privacy.details}
        return PvecStepsPlan(algorithm, sampler, context.loss, shape, context.replicas, context.num_rounds,
                             block_steps, privacy, resolved=resolved)
