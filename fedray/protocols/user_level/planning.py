"""Planning user-level output perturbation (the ``ProtocolRecipe`` contract of ``fedray.core.planning``).

Checks before any actor starts: central user-level DP or none; every user in the one release
(``participation=all``, ``num_rounds=1``); a loss with a bounded derivative (the sensitivity needs
G); positive lambda, B and tau; the calibration. Then sigma per replica from its budget, and a
ledger charging each user one (eps, delta) release per replica (basic composition of a single
release: exactly (eps, delta)).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from fedray.checks import known_keys, number_in, positive
from fedray.core.planning import PlanContext
from fedray.core.protocol import Routing
from fedray.core.sampling import AllUnits
from fedray.errors import ConfigError
from fedray.objectives import LinearModelObjective
from fedray.privacy.composition import ApproxDpComposition
from fedray.privacy.gaussian import analytic_sigma, classic_sigma
from fedray.privacy.ledger import ComposedAccountant, Ledger
from fedray.privacy.statement import PrivacyPlan

USER = "user (all records of one silo)"
FIELDS = ("_target_", "name", "regularization", "feature_bound", "gradient_tolerance")
CALIBRATIONS = ("accountant", "paper")


@dataclass(frozen=True)
class OutputPerturbationPlan:
    """The program resolved against its data (``PlannedProtocol``)."""

    algorithm_class: type
    objective: LinearModelObjective
    regularization: float
    gradient_tolerance: float
    noise_std: np.ndarray
    shape: object
    privacy: PrivacyPlan
    resolved: dict = field(default_factory=dict)
    routing: Routing = Routing.DIRECT          # no client messages: nothing to shuffle

    def build(self, oracle):
        model_shape = (self.shape.dim, self.objective.loss.num_outputs)
        return self.algorithm_class(self.objective, self.regularization, self.gradient_tolerance, self.noise_std,
                                    self.shape.num_silos, model_shape, {"sensitivity": self.resolved["sensitivity"]})


@dataclass(frozen=True)
class OutputPerturbationRecipe:
    trust_models: tuple[str, ...] = ("central", "none")
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()

    def resolve(self, algorithm_class: type, config: dict, dataset, shape, loss, sampler) -> dict:
        return config

    def plan(self, algorithm_class: type, config: dict, context: PlanContext) -> OutputPerturbationPlan:
        from fedray.protocols.user_level.output_perturbation import sensitivity

        alg, priv, shape = config["algorithm"], config["privacy"], context.shape
        name = str(alg.get("name"))
        known_keys("algorithm", alg, FIELDS)
        if priv["trust_model"] not in self.trust_models:
            raise ConfigError("privacy.trust_model", priv["trust_model"], f"one of {self.trust_models} for {name}")
        if not isinstance(context.sampler, AllUnits):
            raise ConfigError("participation", type(context.sampler).__name__,
                              f"every user (participation=all) for {name}: one release reads all of them")
        if context.num_rounds != 1:
            raise ConfigError("num_rounds", context.num_rounds, f"1 for {name} (one release)")
        bound = getattr(context.loss, "residual_bound", math.inf)
        if not math.isfinite(bound) or not hasattr(context.loss, "curvature"):
            raise ConfigError("data.loss", type(context.loss).__name__,
                              f"a smooth loss with a bounded derivative (Logistic, Softmax) for {name}")
        regularization = positive("algorithm.regularization", alg.get("regularization"))
        feature_bound = positive("algorithm.feature_bound", alg.get("feature_bound"))
        tolerance = positive("algorithm.gradient_tolerance", alg.get("gradient_tolerance"))
        objective = LinearModelObjective(context.loss, feature_bound)
        delta_sens = sensitivity(objective.lipschitz, regularization, shape.num_silos, tolerance)
        replicas, cells = context.replicas, (context.replicas.count, shape.num_silos)
        resolved = {"lipschitz": objective.lipschitz, "smoothness": objective.smoothness, "sensitivity": delta_sens}
        if priv["trust_model"] == "none":
            privacy = PrivacyPlan(trust_model="none", calibration="none", accountant="none", unit=USER,
                                  relation="replace_one", delta=np.zeros(shape.num_silos),
                                  noise_multiplier=np.zeros(cells), target_epsilon=None, ledger=None)
            noise_std = np.zeros(replicas.count)
        else:
            calibration = priv["calibration"]
            if calibration not in CALIBRATIONS:
                raise ConfigError("privacy.calibration", calibration, f"one of {CALIBRATIONS} for {name}")
            delta = number_in("privacy.delta", priv.get("delta"), 0.0, 1.0, "a number in (0, 1)")
            levels = replicas.epsilon_levels
            if levels is None:
                levels = np.full(replicas.count, positive("privacy.epsilon", priv.get("epsilon")))
            if calibration == "paper" and np.any(levels >= 1):
                raise ConfigError("privacy.epsilon", float(levels.max()), "below 1 with privacy.calibration=paper "
                                  "(the classic Gaussian mechanism); privacy.calibration=accountant serves any epsilon")
            sigma = analytic_sigma if calibration == "accountant" else classic_sigma
            noise_std = np.array([sigma(float(eps), delta, delta_sens) for eps in levels])
            rule = ApproxDpComposition(levels[:, None], delta, 0.0, route="basic")
            privacy = PrivacyPlan(
                trust_model="central", calibration=calibration, accountant="basic", unit=USER,
                relation="replace_one", delta=np.full(shape.num_silos, delta),
                noise_multiplier=np.broadcast_to((noise_std / delta_sens)[:, None], cells).copy(),
                target_epsilon=np.broadcast_to(levels[:, None], cells).copy(),
                ledger=Ledger(ComposedAccountant(rule, "basic"), cells, "user"),
                details={"noise_std_max": float(noise_std.max())})
            resolved["noise_std_max"] = float(noise_std.max())
        return OutputPerturbationPlan(algorithm_class, objective, regularization, tolerance, noise_std, shape,
                                      privacy, resolved=resolved)
