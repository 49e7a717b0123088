"""The planning step: a composed config becomes a validated, fully resolved run plan.

Everything a user can get wrong is checked here, before Ray starts, and reported as one line
naming the key, the value and what is allowed (``ConfigError``). The plan resolves the paper's
formulas (K, noise multiplier, delta = 1/n^2) against the dataset's shape, which is known
without loading any record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from fedray.data.federation import FederationShape
from fedray.errors import ConfigError
from fedray.privacy import calibration as cal
from fedray.privacy.accounting import ACCOUNTANTS, SiloLedger
from fedray.privacy.mechanisms import GaussianNoise, NoNoise

TRUST_MODELS = ("isrl_dp", "none")
# Algorithm config keys the planner resolves itself; every other key is a constructor field.
RESOLVED_KEYS = ("_target_", "name", "step_size", "batch_size")


@dataclass(frozen=True)
class PrivacyPlan:
    """Who adds which noise, and what the accountant will charge for it."""

    trust_model: str
    calibration: str
    target_epsilon: float | None
    delta: np.ndarray               # (N,)
    noise_multiplier: np.ndarray    # (P, N), 0 = no noise
    sample_size: int                # records per noisy release
    steps_per_participation: int    # noisy releases per participation
    accountant: str
    planned_epsilon: np.ndarray = field(default=None)  # (P, N) if every silo joined every round

    def ledger(self) -> SiloLedger:
        return SiloLedger(
            noise_multiplier=self.noise_multiplier,
            sample_size=self.sample_size,
            dataset_size=self._sizes,
            steps_per_participation=self.steps_per_participation,
            delta=self.delta,
            accountant=self.accountant,
        )

    @property
    def private(self) -> bool:
        return self.trust_model != "none"

    _sizes: np.ndarray = field(default=None, repr=False)


@dataclass(frozen=True)
class Plan:
    seed: int
    trial: int
    num_rounds: int
    dataset_name: str
    dataset: object
    shape: FederationShape
    loss: object
    algorithm_name: str
    algorithm_class: type
    algorithm_fields: dict          # resolved constructor values except l2_clip and noise
    batch_size: int
    step_sizes: np.ndarray          # (P,)
    repetitions: np.ndarray         # (P,)
    participation: object
    privacy: PrivacyPlan
    l2_clip: float | None           # None: estimated from the data (non-private, as the paper)
    runtime: dict
    tracking: dict
    progress: bool
    config: dict

    @property
    def num_replicas(self) -> int:
        return int(self.step_sizes.shape[0])

    def build_algorithm(self, l2_clip: float):
        """The algorithm with the clip known; noise std = multiplier * (2 l2_clip / records per release)."""
        if self.privacy.private:
            sensitivity = 2.0 * l2_clip / self.privacy.sample_size
            noise = GaussianNoise(self.privacy.noise_multiplier * sensitivity)
        else:
            noise = NoNoise()
        return self.algorithm_class(
            loss=self.loss, l2_clip=float(l2_clip), noise=noise, **self.algorithm_fields
        )


def _positive(key: str, value, kind=float, allow_none=False):
    if value is None and allow_none:
        return None
    try:
        ok = value is not None and not isinstance(value, bool) and kind(value) == value and value > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(key, value, f"a positive {'integer' if kind is int else 'number'}")
    return kind(value)


def _step_sizes(value) -> np.ndarray:
    values = list(value) if isinstance(value, (list, tuple)) or OmegaConf.is_list(value) else [value]
    if not values:
        raise ConfigError("algorithm.step_size", value, "a positive number or a non-empty list of them")
    for v in values:
        _positive("algorithm.step_size", v)
    return np.asarray(values, dtype=np.float64)


def make_plan(cfg: DictConfig) -> Plan:
    """Validate ``cfg`` and resolve it into a ``Plan``; raises ``ConfigError`` on the first bad value."""
    seed = int(cfg.seed)
    trial = int(cfg.trial)
    num_rounds = _positive("num_rounds", cfg.num_rounds, int)
    repetitions = _positive("repetitions", cfg.repetitions, int)

    dataset = instantiate(cfg.data.spec)
    dataset.validate()
    shape = dataset.describe()
    loss = instantiate(cfg.data.loss)

    participation = instantiate(cfg.participation)
    participation.validate(shape.num_silos)

    priv = cfg.privacy
    if priv.trust_model not in TRUST_MODELS:
        raise ConfigError("privacy.trust_model", priv.trust_model, f"one of {TRUST_MODELS}")
    if priv.accountant not in ACCOUNTANTS:
        raise ConfigError("privacy.accountant", priv.accountant, f"one of {ACCOUNTANTS}")
    private = priv.trust_model != "none"
    n = np.asarray(shape.n_train, dtype=np.int64)
    epsilon = None
    if private:
        epsilon = _positive("privacy.epsilon", priv.epsilon)
    if priv.delta is None:
        delta = cal.default_delta(n)
    else:
        if not (isinstance(priv.delta, (int, float)) and 0.0 < priv.delta < 1.0):
            raise ConfigError("privacy.delta", priv.delta, "in (0, 1) or null (= 1/n^2 per silo)")
        delta = np.full(shape.num_silos, float(priv.delta))
    l2_clip = _positive("privacy.l2_clip", priv.l2_clip, allow_none=True)
    if not private and l2_clip is None:
        l2_clip = math.inf

    alg = cfg.algorithm
    algorithm_class = get_class(alg._target_)
    step_sizes = np.tile(_step_sizes(alg.step_size), repetitions)
    reps = np.repeat(np.arange(repetitions), len(step_sizes) // repetitions)
    n_min = int(n.min())
    if alg.batch_size is None:
        if not private:
            raise ConfigError("algorithm.batch_size", None, "an integer in [1, n] when privacy is off")
        batch_size = cal.paper_batch_size(n_min, epsilon, num_rounds)
    else:
        batch_size = _positive("algorithm.batch_size", alg.batch_size, int)
    if batch_size > n_min:
        raise ConfigError("algorithm.batch_size", batch_size, f"at most the smallest silo's training size n = {n_min}")
    algorithm_fields = {"step_size": step_sizes, "batch_size": batch_size}
    for key, value in alg.items():
        if key not in RESOLVED_KEYS:
            algorithm_fields[key] = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    if "average_last" in algorithm_fields:
        _positive("algorithm.average_last", algorithm_fields["average_last"], int)
    if "radius" in algorithm_fields:
        _positive("algorithm.radius", algorithm_fields["radius"], allow_none=True)

    sample_size, steps = algorithm_class.releases(batch_size)
    num_replicas = len(step_sizes)
    if private:
        calibrations = algorithm_class.CALIBRATIONS
        if priv.calibration not in calibrations:
            raise ConfigError("privacy.calibration", priv.calibration, f"one of {tuple(calibrations)} for {alg.name}")
        multiplier = calibrations[priv.calibration](n, epsilon, delta, num_rounds, batch_size)
        noise_multiplier = np.broadcast_to(multiplier, (num_replicas, shape.num_silos)).copy()
    else:
        noise_multiplier = np.zeros((num_replicas, shape.num_silos))
    privacy = PrivacyPlan(
        trust_model=priv.trust_model,
        calibration=priv.calibration,
        target_epsilon=epsilon,
        delta=delta,
        noise_multiplier=noise_multiplier,
        sample_size=sample_size,
        steps_per_participation=steps,
        accountant=priv.accountant,
        _sizes=n,
    )
    if private:
        planned = privacy.ledger().planned_epsilons(num_rounds)
        object.__setattr__(privacy, "planned_epsilon", planned)

    runtime = OmegaConf.to_container(cfg.runtime, resolve=True)
    if runtime.get("num_actors") is not None:
        _positive("runtime.num_actors", runtime["num_actors"], int)
    if runtime.get("num_cpus") is not None:
        _positive("runtime.num_cpus", runtime["num_cpus"], int)
    tracking = OmegaConf.to_container(cfg.tracking, resolve=True)
    _positive("tracking.log_every", tracking.get("log_every"), int)

    return Plan(
        seed=seed,
        trial=trial,
        num_rounds=num_rounds,
        dataset_name=str(cfg.data.name),
        dataset=dataset,
        shape=shape,
        loss=loss,
        algorithm_name=str(alg.name),
        algorithm_class=algorithm_class,
        algorithm_fields=algorithm_fields,
        batch_size=batch_size,
        step_sizes=step_sizes,
        repetitions=reps,
        participation=participation,
        privacy=privacy,
        l2_clip=l2_clip,
        runtime=runtime,
        tracking=tracking,
        progress=bool(cfg.progress),
        config=OmegaConf.to_container(cfg, resolve=True),
    )
