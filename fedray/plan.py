"""The planning step: a composed config becomes a validated, fully resolved run plan.

Everything a user can get wrong is checked here, before Ray starts, and reported as one line
naming the key, the value and what is allowed (``ConfigError``). The plan resolves the paper's
formulas (K, noise multipliers, delta = 1/n^2) against the dataset's shape, which is known
without loading any record, draws the participation schedule (it depends on the seed only),
and refuses a schedule whose accountant epsilon exceeds the target (``BudgetError``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from fedray.data.federation import FederationShape
from fedray.errors import ConfigError
from fedray import theory
from fedray.privacy import calibration as cal
from fedray.privacy.accounting import ACCOUNTANTS, GlobalLedger, SiloLedger
from fedray.privacy.shuffle_calibration import calibrate_shuffled_sgd
from fedray.privacy.budgets import calibrate, check_budget, per_silo
from fedray.privacy.mechanisms import GaussianNoise, NoNoise, PerExampleClip

# Algorithm config keys the planner resolves itself; every other key is a constructor field.
# ``trust_model`` (optional) pins the privacy group a preset is meant for: the non-private
# baselines say none, so a baseline run with a private preset is refused, not mislabelled.
RESOLVED_KEYS = ("_target_", "name", "step_size", "batch_size", "trust_model")


@dataclass(frozen=True)
class PrivacyPlan:
    """Who adds which noise, what the accountant charges for it, and the planned spend."""

    trust_model: str
    calibration: str
    accountant: str
    target_epsilon: np.ndarray | None    # (P, N) per-replica, per-silo targets; None when not private
    delta: np.ndarray                    # (N,)
    noise_multiplier: np.ndarray         # (P, N); 0 = no noise
    sample_size: int                     # records per noisy release
    releases: int                        # noisy releases per participation
    dataset_size: np.ndarray             # (N,)
    parallel_composition: bool
    planned_epsilon: np.ndarray | None   # (P, N) for the drawn participation schedule
    nominal_epsilon: np.ndarray | None = None  # (P, N) what the paper's formula claims for this noise
    federation_calibration: object | None = None  # shuffle DP: one solved chain for the federation

    @property
    def private(self) -> bool:
        return self.trust_model != "none"

    def ledger(self) -> SiloLedger | GlobalLedger:
        if self.federation_calibration is not None:
            return GlobalLedger(self.federation_calibration.epsilon_after, *self.noise_multiplier.shape)
        return SiloLedger(
            noise_multiplier=self.noise_multiplier,
            sample_size=self.sample_size,
            dataset_size=self.dataset_size,
            releases=self.releases,
            delta=self.delta,
            accountant=self.accountant,
            parallel_composition=self.parallel_composition,
        )


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
    algorithm_fields: dict          # resolved constructor values except loss, l2_clip and noise
    batch_size: int
    step_sizes: np.ndarray          # (P,)
    repetitions: np.ndarray         # (P,) the stream key: replicas of one repetition share draws
    epsilon_levels: np.ndarray | None   # (P,) replica p's privacy.epsilon_grid value, if a grid
    participation: object
    schedule: np.ndarray            # (R, P, N) bool: who takes part in each round
    privacy: PrivacyPlan
    l2_clip: float | None           # None: estimated from the data (non-private, as the paper)
    runtime: dict
    tracking: dict
    progress: bool
    config: dict
    evaluate_every: int = 1         # rounds between evaluations of the model (and the last round)

    @property
    def num_replicas(self) -> int:
        return int(self.step_sizes.shape[0])

    @property
    def shuffled(self) -> bool:
        """Messages pass through the shuffler before the server sees them."""
        return bool(getattr(self.algorithm_class, "SHUFFLED", False))

    def build_algorithm(self, l2_clip: float):
        """The algorithm with the clip known; noise std = multiplier * replace-one sensitivity."""
        if self.privacy.private:
            sensitivity = PerExampleClip(l2_clip).sensitivity(self.privacy.sample_size, "replace_one")
            noise = GaussianNoise(self.privacy.noise_multiplier * sensitivity)
        else:
            noise = NoNoise()
        return self.algorithm_class(loss=self.loss, l2_clip=float(l2_clip), noise=noise, **self.algorithm_fields)


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


def _algorithm_fields(alg: DictConfig, step_sizes: np.ndarray, batch_size: int) -> dict:
    fields = {"step_size": step_sizes, "batch_size": batch_size}
    for key, value in alg.items():
        if key not in RESOLVED_KEYS:
            fields[key] = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    if "average_last" in fields:
        _positive("algorithm.average_last", fields["average_last"], int)
    if "radius" in fields:
        _positive("algorithm.radius", fields["radius"], allow_none=True)
    return fields


def epsilon_grid(priv: DictConfig) -> np.ndarray | None:
    """``privacy.epsilon_grid``: budgets carried as replicas of one run (each replaces
    ``privacy.epsilon`` for its replicas), or None."""
    grid = priv.get("epsilon_grid")
    if grid is None:
        return None
    values = list(grid) if OmegaConf.is_list(grid) or isinstance(grid, (list, tuple)) else [grid]
    allowed = "null or a non-empty list of distinct positive numbers (one budget per block of replicas)"
    if not values or len(set(values)) != len(values):
        raise ConfigError("privacy.epsilon_grid", grid, allowed)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise ConfigError("privacy.epsilon_grid", grid, allowed)
    return np.asarray(values, dtype=np.float64)


def replica_epsilons(priv: DictConfig, num_silos: int, levels: np.ndarray | None) -> np.ndarray:
    """(P, N) per-replica, per-silo targets: the grid level of each replica, else privacy.epsilon."""
    if levels is not None:
        return np.broadcast_to(levels[:, None], (len(levels), num_silos)).copy()
    epsilon = per_silo("privacy.epsilon", priv.epsilon, num_silos, 0.0, math.inf,
                       "a positive number, a list of one per silo, or {values, fractions}")
    return epsilon[None, :]


def _privacy_plan(priv: DictConfig, algorithm_class: type, algorithm_name: str, shape: FederationShape,
                  num_rounds: int, batch_size: int, schedule: np.ndarray,
                  levels: np.ndarray | None = None) -> PrivacyPlan:
    trust_models = algorithm_class.TRUST_MODELS
    if priv.trust_model not in trust_models:
        raise ConfigError("privacy.trust_model", priv.trust_model, f"one of {trust_models} for {algorithm_name}")
    if priv.accountant not in ACCOUNTANTS:
        raise ConfigError("privacy.accountant", priv.accountant, f"one of {ACCOUNTANTS}")
    n = np.asarray(shape.n_train, dtype=np.int64)
    num_silos, num_replicas = shape.num_silos, schedule.shape[1]
    if priv.delta is None:
        delta = cal.default_delta(n)
    else:
        delta = per_silo("privacy.delta", priv.delta, num_silos, 0.0, 1.0,
                         "in (0, 1) or null (= 1/n^2 per silo), or one such value per silo")
    sample_size, releases = algorithm_class.releases(batch_size)
    common = dict(trust_model=priv.trust_model, accountant=priv.accountant, delta=delta, sample_size=sample_size,
                  releases=releases, dataset_size=n,
                  parallel_composition=bool(getattr(algorithm_class, "DISJOINT_BATCHES", False)))
    if priv.trust_model == "none":
        return PrivacyPlan(calibration="none", target_epsilon=None,
                           noise_multiplier=np.zeros((num_replicas, num_silos)), planned_epsilon=None, **common)

    if getattr(algorithm_class, "SHUFFLED", False):
        if levels is not None:
            raise ConfigError("privacy.epsilon_grid", priv.epsilon_grid,
                              "null for shuffled algorithms (one federation-wide budget per run)")
        if getattr(algorithm_class, "VECTOR_SUM", False):
            return _vector_sum_privacy_plan(priv, batch_size, schedule, common)
        return _shuffle_privacy_plan(priv, shape, num_rounds, schedule, common)
    epsilon = replica_epsilons(priv, num_silos, levels)                  # (P, N)
    formulas = dict(algorithm_class.CALIBRATIONS)
    modes = tuple(formulas) + ("accountant",)
    if priv.calibration not in modes:
        raise ConfigError("privacy.calibration", priv.calibration, f"one of {modes} for {algorithm_name}")
    rounds_charged = 1 if common["parallel_composition"] else num_rounds
    # One calibration per distinct budget row: a grid of E levels costs E solves, not P.
    rows, inverse = np.unique(epsilon, axis=0, return_inverse=True)
    multipliers = np.stack([calibrate(priv.calibration, formulas, row, delta, n, rounds_charged, batch_size,
                                      sample_size, releases, priv.accountant, common["parallel_composition"])
                            for row in rows])
    # (P, N); a single budget row applies to every replica.
    noise_multiplier = np.broadcast_to(multipliers[inverse.reshape(-1)], (num_replicas, num_silos)).copy()
    epsilon = np.broadcast_to(epsilon, (num_replicas, num_silos)).copy()
    nominal = None
    if "paper" in formulas:
        # Every paper formula is proportional to 1/eps, so the claimed eps of a multiplier z is z(1)/z.
        unit = np.array([formulas["paper"](n_i, 1.0, d_i, rounds_charged, batch_size) for n_i, d_i in zip(n, delta)])
        nominal = unit[None, :] / noise_multiplier
    plan = PrivacyPlan(calibration=priv.calibration, target_epsilon=epsilon, noise_multiplier=noise_multiplier,
                       planned_epsilon=None, nominal_epsilon=nominal, **common)
    counts = schedule.sum(axis=0)
    if priv.get("enforce_budget", True):
        planned = check_budget(plan.ledger(), counts, plan.target_epsilon)
    else:
        planned = plan.ledger().epsilons(counts)
    object.__setattr__(plan, "planned_epsilon", planned)
    return plan


SHUFFLE_COMPOSITIONS = {"paper": "advanced", "accountant": "pld"}


def _shuffle_privacy_plan(priv: DictConfig, shape: FederationShape, num_rounds: int, schedule: np.ndarray,
                          common: dict) -> PrivacyPlan:
    """Shuffle DP: one federation-wide (eps, delta) over records anywhere in the federation, from
    the amplification-by-shuffling chain of ``fedray.privacy.shuffle_calibration``."""
    if priv.calibration not in SHUFFLE_COMPOSITIONS:
        raise ConfigError("privacy.calibration", priv.calibration,
                          f"one of {tuple(SHUFFLE_COMPOSITIONS)} for shuffled algorithms (advanced or PLD composition)")
    if not isinstance(priv.epsilon, (int, float)) or isinstance(priv.epsilon, bool) or priv.epsilon <= 0:
        raise ConfigError("privacy.epsilon", priv.epsilon, "one positive number under shuffle DP (a federation-wide budget)")
    n_min, num_silos = shape.min_train_size, shape.num_silos
    delta = 1.0 / (num_silos * n_min) ** 2 if priv.delta is None else priv.delta
    if not isinstance(delta, (int, float)) or not 0.0 < delta < 1.0:
        raise ConfigError("privacy.delta", priv.delta, "in (0, 1), or null (= 1/(N n)^2)")
    per_round = schedule.sum(axis=2)
    silos_per_round = int(per_round.flat[0]) if np.all(per_round == per_round.flat[0]) else None
    try:
        solved = calibrate_shuffled_sgd(float(priv.epsilon), float(delta), num_silos=num_silos,
                                        records_per_silo=n_min, num_rounds=num_rounds,
                                        silos_per_round=silos_per_round,
                                        composition=SHUFFLE_COMPOSITIONS[priv.calibration])
    except ValueError as err:
        raise ConfigError("privacy.epsilon", priv.epsilon, f"a budget the shuffle chain can meet here ({err})") from err
    num_replicas = schedule.shape[1]
    common = dict(common, delta=np.full(num_silos, float(delta)))
    plan = PrivacyPlan(calibration=priv.calibration, target_epsilon=np.full((num_replicas, num_silos), float(priv.epsilon)),
                       noise_multiplier=np.full((num_replicas, num_silos), solved.noise_multiplier),
                       planned_epsilon=np.full((num_replicas, num_silos), solved.epsilon),
                       federation_calibration=solved, **common)
    return plan


def _vector_sum_privacy_plan(priv: DictConfig, batch_size: int, schedule: np.ndarray, common: dict) -> PrivacyPlan:
    """Shuffle DP through P_vec (seed-004 §3.8): one invocation per round over its M K record
    gradients, each record in at most one of them (one pass), so the run spends (epsilon, delta)
    by parallel composition (``OnePassVectorSums``). The silos calibrate P_vec from the same
    privacy.epsilon, privacy.delta and M (``conf/algorithm/sdp_one_pass_accelerated.yaml``)."""
    from fedray.privacy.vector_sum import OnePassVectorSums

    if priv.calibration != "paper":
        raise ConfigError("privacy.calibration", priv.calibration, "paper for P_vec (seed-000 §2.2 parameters)")
    eps, delta = priv.epsilon, priv.delta
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps <= 15:
        raise ConfigError("privacy.epsilon", eps, "one number in (0, 15] for P_vec (seed-000 Theorem 3.2)")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 0.5:
        raise ConfigError("privacy.delta", delta, "an explicit number in (0, 1/2) for P_vec (seed-000 Theorem 3.2)")
    per_round = schedule.sum(axis=2)                                          # (R, P)
    if per_round.min() < 1 or np.any(per_round != per_round.flat[0]):
        raise ConfigError("participation", sorted(set(per_round.flat)), "a fixed number M >= 1 of silos "
                          "every round (participation=uniform): P_vec is calibrated for M K users")
    spend = OnePassVectorSums(float(eps), float(delta), int(per_round.flat[0]) * batch_size)
    full = np.full(schedule.shape[1:], spend.epsilon)                          # (P, N)
    return PrivacyPlan(calibration="paper", target_epsilon=full, noise_multiplier=np.zeros_like(full),
                       planned_epsilon=full.copy(), federation_calibration=spend,
                       **dict(common, delta=np.full(full.shape[1], spend.delta)))


def _check_vector_sum_inputs(fields: dict, cfg: DictConfig) -> None:
    """The silos calibrate P_vec themselves: refuse inputs other than what the ledger accounts."""
    accounted = {"target_epsilon": ("privacy.epsilon", cfg.privacy.epsilon),
                 "target_delta": ("privacy.delta", cfg.privacy.delta),
                 "silos_per_round": ("participation.silos_per_round", cfg.participation.get("silos_per_round"))}
    for field, (key, value) in accounted.items():
        if fields.get(field) != value:
            raise ConfigError(f"algorithm.{field}", fields.get(field),
                              f"{value!r} (= {key}, which the privacy ledger accounts)")


def make_plan(cfg: DictConfig) -> Plan:
    """Validate ``cfg`` and resolve it into a ``Plan``; raises ``ConfigError`` on the first bad value
    and ``BudgetError`` if the schedule would overspend a silo's budget."""
    cfg = theory.resolve(cfg)  # theory presets and the hybrid user-level budget; unchanged without them
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

    alg = cfg.algorithm
    algorithm_class = get_class(alg._target_)
    pinned = alg.get("trust_model")
    if pinned is not None and pinned != cfg.privacy.trust_model:
        raise ConfigError("privacy.trust_model", cfg.privacy.trust_model,
                          f"{pinned!r} for algorithm={alg.name} (privacy={pinned})")
    base_steps = _step_sizes(alg.step_size)
    private = cfg.privacy.trust_model != "none"
    grid = epsilon_grid(cfg.privacy) if private else None   # budgets mean nothing without privacy, like epsilon
    # Replica order: budget level (slowest), repetition, step size (fastest).
    blocks = 1 if grid is None else len(grid)
    step_sizes = np.tile(base_steps, repetitions * blocks)
    reps = np.tile(np.repeat(np.arange(repetitions), len(base_steps)), blocks)
    levels = None if grid is None else np.repeat(grid, repetitions * len(base_steps))
    n_min = shape.min_train_size
    if alg.batch_size is None:
        if not private:
            raise ConfigError("algorithm.batch_size", None, "an integer in [1, n] when privacy is off")
        # K >= n sqrt(eps / (4R)) must hold for the largest budget (the paper's code uses eps_max).
        eps_max = float(np.max(replica_epsilons(cfg.privacy, shape.num_silos, grid)))
        batch_size = cal.paper_batch_size(n_min, eps_max, num_rounds)
    else:
        batch_size = _positive("algorithm.batch_size", alg.batch_size, int)
    if batch_size > n_min:
        raise ConfigError("algorithm.batch_size", batch_size, f"at most the smallest silo's training size n = {n_min}")
    if getattr(algorithm_class, "DISJOINT_BATCHES", False) and num_rounds * batch_size > n_min:
        raise ConfigError("num_rounds", num_rounds,
                          f"at most floor(n / K) = {n_min // batch_size} for {alg.name}, which uses each record once")
    algorithm_fields = _algorithm_fields(alg, step_sizes, batch_size)

    runtime = OmegaConf.to_container(cfg.runtime, resolve=True)
    if runtime.get("num_actors") is not None:
        _positive("runtime.num_actors", runtime["num_actors"], int)
    if runtime.get("num_cpus") is not None:
        _positive("runtime.num_cpus", runtime["num_cpus"], int)
    if runtime.get("checkpoint_every") is not None:
        _positive("runtime.checkpoint_every", runtime["checkpoint_every"], int)
    tracking = OmegaConf.to_container(cfg.tracking, resolve=True)
    _positive("tracking.log_every", tracking.get("log_every"), int)
    _positive("tracking.replica_curves", tracking.get("replica_curves", 30), int)
    l2_clip = _positive("privacy.l2_clip", cfg.privacy.l2_clip, allow_none=True)
    if not private and l2_clip is None:
        l2_clip = math.inf

    schedule = np.stack([participation.sample(seed, reps, r, shape.num_silos) for r in range(num_rounds)])
    privacy = _privacy_plan(cfg.privacy, algorithm_class, str(alg.name), shape, num_rounds, batch_size, schedule,
                            levels)
    if private and getattr(algorithm_class, "VECTOR_SUM", False):
        _check_vector_sum_inputs(algorithm_fields, cfg)

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
        epsilon_levels=levels,
        participation=participation,
        schedule=schedule,
        privacy=privacy,
        l2_clip=l2_clip,
        runtime=runtime,
        tracking=tracking,
        progress=bool(cfg.progress),
        config=OmegaConf.to_container(cfg, resolve=True),
        evaluate_every=_positive("evaluate_every", cfg.get("evaluate_every", 1), int),
    )
