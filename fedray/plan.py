"""The planning step: a composed config becomes a validated, fully resolved run plan.

Generic over protocols: it validates what every run has (seed, rounds, replicas, data,
participation, runtime, tracking), asks the algorithm class's ``recipe`` (``fedray.core.planning``)
to resolve and plan the protocol with its privacy plan, and checks that plan's ledger against the
participation sampler's counts, all before Ray starts. Everything a user can get wrong is reported
as one line naming the key, the value and what is allowed (``ConfigError``); a plan that would
overspend is refused (``BudgetError``).
"""

from __future__ import annotations

import importlib
import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields, is_dataclass, replace
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin, get_type_hints
from types import UnionType

import numpy as np
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from fedray.checks import MAX_CLIP, MAX_SETTING, check_bool, known_keys, natural, number_in, positive
from fedray.core.planning import (
    AlgorithmSettings, Because, PlanContext, PlannedAlgorithm, PlannedProtocol, Positive, PrivacySettings,
    ProtocolRecipe, Replicas, Stepped, Within,
)
from fedray.core.terms import TrustModel, as_terms
from fedray.data.federation import DataSpec, FederationShape
from fedray.errors import ConfigError
from fedray.losses import Loss
from fedray.privacy.accounting import accountant_store
from fedray.privacy.ledger import PlansWithoutCounts, check_budget
from fedray.privacy.statement import PrivacyPlan
from fedray.rng import setting_word_rows
from fedray.smoothing import MoreauEnvelope

RUNTIME_KEYS = ("address", "connect_timeout", "num_actors", "num_cpus", "dashboard", "checkpoint_path", "checkpoint_every",
                "resume", "faithful", "max_restarts", "rounds_per_call", "single_actor_work",
                "py_modules")
MAX_RESTARTS = 100
TRACKING_KEYS = ("uri", "artifact_location", "experiment_name", "log_every", "replica_curves", "figure")
# "grids": values presets interpolate from (step-size grids per algorithm); read by nothing else.
TOP_LEVEL_KEYS = ("data", "algorithm", "privacy", "participation", "runtime", "tracking", "seed", "trial",
                  "num_rounds", "repetitions", "replicas", "progress", "evaluate_every", "grids")
REPLICAS_KEYS = ("common_random_numbers",)
PRIVACY_KEYS = ("trust_model", "calibration", "accountant", "epsilon", "epsilon_grid", "delta", "l2_clip",
                "enforce_budget")


@dataclass(frozen=True)
class Plan:
    seed: int
    trial: int
    num_rounds: int                 # R, or the most rounds a halting protocol may run
    dataset_name: str
    dataset: DataSpec
    shape: FederationShape
    loss: Loss | None
    algorithm_name: str
    replicas: Replicas
    sampler: object
    protocol: PlannedProtocol       # the protocol package's plan: privacy, resolved values, build(oracle)
    runtime: dict
    tracking: dict
    progress: bool
    config: dict
    evaluate_every: int = 1         # rounds between evaluations of the model (and the last round)

    @property
    def privacy(self) -> PrivacyPlan:
        return self.protocol.privacy

    @property
    def num_replicas(self) -> int:
        return self.replicas.count

    @property
    def step_sizes(self) -> np.ndarray:
        return self.replicas.step_sizes

    @property
    def repetitions(self) -> np.ndarray:
        return self.replicas.repetitions

    @property
    def epsilon_levels(self) -> np.ndarray | None:
        return self.replicas.epsilon_levels

    @property
    def l2_clips(self) -> np.ndarray | None:
        return self.replicas.l2_clips


def _list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _step_sizes(value) -> np.ndarray:
    values = _list(value)
    if not values:
        raise ConfigError("algorithm.step_size", value, "a positive number or a non-empty list of them")
    for v in values:
        positive("algorithm.step_size", v)
    return np.asarray(values, dtype=np.float64)


def epsilon_grid(priv: dict) -> np.ndarray | None:
    """``privacy.epsilon_grid``: budgets carried as replicas of one run (each replaces
    ``privacy.epsilon`` for its replicas), or None."""
    grid = priv.get("epsilon_grid")
    if grid is None:
        return None
    values = _list(grid)
    allowed = "null or a non-empty list of distinct positive numbers (one budget per block of replicas)"
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise ConfigError("privacy.epsilon_grid", grid, allowed)
    if not values or len(set(values)) != len(values):
        raise ConfigError("privacy.epsilon_grid", grid, allowed)
    return np.asarray(values, dtype=np.float64)


def clip_grid(priv: dict) -> np.ndarray | None:
    """``privacy.l2_clip`` given as a list: clips carried as replicas of one run (like a list of
    step sizes), or None for one clip."""
    grid = priv.get("l2_clip")
    if not isinstance(grid, (list, tuple)):
        return None
    allowed = f"a positive number, or a non-empty list of distinct ones at most {MAX_CLIP:g} (a clip grid)"
    for v in grid:          # numbers first: a nested list is not hashable for the distinctness check
        positive("privacy.l2_clip", v, largest=MAX_CLIP)
    if not grid or len(set(grid)) != len(grid):
        raise ConfigError("privacy.l2_clip", grid, allowed)
    return np.asarray(grid, dtype=np.float64)


def _check_clip_grid(config: dict, recipe: ProtocolRecipe) -> None:
    """A clip grid only for protocols whose recipe says it carries per-replica clips."""
    grid = config["privacy"].get("l2_clip")
    if isinstance(grid, (list, tuple)) and not recipe.clip_grid:
        raise ConfigError("privacy.l2_clip", grid, f"one number for algorithm={config['algorithm'].get('name')} "
                          "(a list, a clip grid carried as replicas, is for the ISRL-DP silo algorithms)")


MAX_REPLICAS = 10**6        # the driver holds (replicas, units) arrays: beyond this no run fits in memory
MAX_EPSILON = 1e9           # beyond it no calibration or accountant is numerically meaningful
MAX_ROUNDS = 10**7


def _check_epsilon_magnitude(priv: dict) -> None:
    """Every number in privacy.epsilon and privacy.epsilon_grid at most MAX_EPSILON (their shapes
    are checked where they are read)."""
    for key in ("epsilon", "epsilon_grid"):
        value = priv.get(key)
        values = value.get("values", []) if isinstance(value, dict) else _list(value)
        for v in _list(values):
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > MAX_EPSILON:
                raise ConfigError(f"privacy.{key}", value, f"budgets of at most {MAX_EPSILON:g}")


def _check_py_modules(names) -> None:
    """``runtime.py_modules``: importable packages of the user's own (shipped to every Ray worker)."""
    allowed = "a list of importable package names (the user's own code, shipped to every Ray worker)"
    if names is None:
        return
    if isinstance(names, str) or not isinstance(names, Sequence) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError("runtime.py_modules", names, allowed)
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            raise ConfigError("runtime.py_modules", name, f"{allowed}; importing it failed here: {err}") from None
        if not hasattr(module, "__path__"):
            raise ConfigError("runtime.py_modules", name, f"{allowed}; {name} is a single-file module, not a package")


def privacy_settings(config: dict, recipe: ProtocolRecipe) -> PrivacySettings:
    """The ``privacy`` section as the typed value every recipe reads (``PrivacySettings``), checked
    here once for every protocol: ``privacy.trust_model`` one of the recipe's, the keys (the
    planner's and the recipe's ``privacy_keys``), the budgets' magnitude, the grids of budgets and
    clips, ``privacy.enforce_budget``; the closed-vocabulary words become members
    (``fedray.core.terms``). Run before the recipe's ``resolve`` (which reads it) and again after
    it (a theory preset fills in its budget and calibration)."""
    section = config["privacy"]
    words = as_terms(section)
    trust = words.get("trust_model")
    if trust not in recipe.trust_models:
        raise ConfigError("privacy.trust_model", trust, f"one of {tuple(recipe.trust_models)} for "
                          f"{config['algorithm'].get('name')}")
    known_keys("privacy", section, PRIVACY_KEYS + recipe.privacy_keys)
    _check_epsilon_magnitude(section)
    _check_clip_grid(config, recipe)
    clip_grid(section)
    private = trust != TrustModel.NONE
    if private and section.get("epsilon_grid") is not None:        # budgets mean nothing without privacy
        if not recipe.budget_grid:
            raise ConfigError("privacy.epsilon_grid", section["epsilon_grid"], f"null for "
                              f"{config['algorithm'].get('name')} (one budget per run: its schedule, calibration "
                              "or ledger is built for one epsilon)")
        epsilon_grid(section)
    enforce = section.get("enforce_budget", True)
    if enforce not in (True, False, "stop"):
        raise ConfigError("privacy.enforce_budget", enforce, "true (refuse a schedule that passes the budget), false "
                          "(run it, reporting the overspend) or stop (run until the next round would pass it)")
    return PrivacySettings(
        trust_model=trust, calibration=words.get("calibration"), accountant=words.get("accountant"),
        epsilon=section.get("epsilon"), epsilon_grid=section.get("epsilon_grid") if private else None,
        delta=section.get("delta"), l2_clip=section.get("l2_clip"), enforce_budget=enforce,
        composition=words.get("composition"), silo_level=section.get("silo_level"))


def algorithm_settings(config: dict, recipe: ProtocolRecipe) -> AlgorithmSettings:
    """The ``algorithm`` section as the typed value its recipe declares (``recipe.settings``, an
    ``AlgorithmSettings``), checked here once for every protocol: the keys (with a did-you-mean),
    then each field in declaration order against its annotation (``AlgorithmSettings``). Run
    before the recipe's ``resolve`` (which reads it) and again after it (a rule fills in a step
    size, draws, phases)."""
    kind = recipe.settings
    section = config["algorithm"]
    declared = [f for f in fields(kind) if f.init]
    known_keys("algorithm", {k: v for k, v in section.items() if k != "_target_"}, [f.name for f in declared])
    hints = _hints(kind)
    values = {}
    for spec in declared:
        if spec.name in section:
            values[spec.name] = _checked_value(f"algorithm.{spec.name}", section[spec.name], hints[spec.name])
        elif spec.default is MISSING and spec.default_factory is MISSING:
            values[spec.name] = _checked_value(f"algorithm.{spec.name}", None, hints[spec.name])
    return kind(**values)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(kind: type) -> dict[str, Any]:
    """The settings type's field annotations, resolved (once per type)."""
    if kind not in _HINTS:
        _HINTS[kind] = get_type_hints(kind, include_extras=True)
    return _HINTS[kind]


def _checked_value(key: str, value: Any, hint: Any) -> Any:
    """``value`` checked against a settings field's annotation (``AlgorithmSettings``): a
    ``Positive`` or ``Within`` number converted to the field's kind, anything else as given."""
    marks: tuple = ()
    if get_origin(hint) is Annotated:
        hint, *extra = get_args(hint)
        marks = tuple(extra)
    kinds = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    if value is None and type(None) in kinds:
        return None
    kinds = tuple(k for k in kinds if k is not type(None))
    kind = kinds[0] if len(kinds) == 1 else None
    reason = next((f" {m.reason}" for m in marks if isinstance(m, Because)), "")
    for mark in marks:
        if isinstance(mark, Positive):
            return positive(key, value, int if kind is int else float,
                            largest=MAX_SETTING if mark.largest is None else mark.largest)
        if isinstance(mark, Within):
            return number_in(key, value, mark.low, mark.high, mark.allowed, closed_high=mark.closed_high)
    if get_origin(kind) is Literal:
        words = get_args(kind)
        if isinstance(value, bool) or value not in words:
            raise ConfigError(key, value, f"one of {words}{reason}")
    elif kind is bool:
        check_bool(key, value)
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ConfigError(key, value, "an integer")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ConfigError(key, value, "a number")
    return value


def _check_faults(runtime: dict) -> None:
    """``runtime.max_restarts`` (per actor)."""
    restarts = runtime.get("max_restarts", 3)
    if natural("runtime.max_restarts", restarts) > MAX_RESTARTS:
        raise ConfigError("runtime.max_restarts", restarts, f"an integer from 0 to {MAX_RESTARTS}")


def _replicas(config: dict, privacy: PrivacySettings, algorithm: AlgorithmSettings) -> Replicas:
    """Replica order: budget level (slowest), clip, repetition, step size (fastest)."""
    repetitions = positive("repetitions", config.get("repetitions"), int)
    if repetitions > MAX_REPLICAS:
        raise ConfigError("repetitions", repetitions, f"at most {MAX_REPLICAS:,} (the driver holds per-replica, "
                          "per-unit arrays)")
    # A protocol without a step size (a driver-side solver) has one setting per repetition and budget.
    base_steps = _step_sizes(algorithm.step_size) if isinstance(algorithm, Stepped) else np.zeros(1)
    grid = None if privacy.epsilon_grid is None else np.asarray(privacy.epsilon_grid, dtype=np.float64)
    clips = np.asarray(privacy.l2_clip, dtype=np.float64) if isinstance(privacy.l2_clip, (list, tuple)) else None
    blocks = (1 if grid is None else len(grid)) * (1 if clips is None else len(clips))
    block = repetitions * len(base_steps)
    step_sizes = np.tile(base_steps, repetitions * blocks)
    reps = np.tile(np.repeat(np.arange(repetitions), len(base_steps)), blocks)
    levels = None if grid is None else np.repeat(grid, block * (1 if clips is None else len(clips)))
    l2_clips = None if clips is None else np.tile(np.repeat(clips, block), blocks // len(clips))
    options = config.get("replicas") or {}
    known_keys("replicas", options, REPLICAS_KEYS)
    common = options.get("common_random_numbers", False)
    check_bool("replicas.common_random_numbers", common)
    if common:
        streams = reps[:, None]
    else:
        # Each replica's row: repetition, then the words of its step size, budget and clip (if a grid).
        budgets = levels if levels is not None else np.full(len(reps), _budget_key(privacy.epsilon))
        columns = [reps[:, None], setting_word_rows(step_sizes), setting_word_rows(budgets)]
        streams = np.concatenate(columns + ([] if l2_clips is None else [setting_word_rows(l2_clips)]), axis=1,
                                 dtype=np.int64)
    if (config.get("runtime") or {}).get("faithful") is True:
        streams = np.concatenate([streams, np.broadcast_to(secret_words(), (len(streams), SECRET_WORDS))], axis=1)
    return Replicas(step_sizes, reps, levels, streams, common, l2_clips)


SECRET_WORDS = 4     # 128 bits of OS entropy


def secret_words() -> np.ndarray:
    """A faithful run's secret stream words: ``SECRET_WORDS`` 32-bit words of fresh OS entropy
    (``SeedSequence()`` without a seed), drawn here on the driver when the run is planned and
    appended to every replica's stream key (``Replicas.streams``). Every private draw is keyed by
    that row: the curator's noise, vertex draws and selections on the driver, and whatever the
    actors and the shuffler key by it besides their own secret seeds. No parameter, tag, metric or
    artifact holds them, so the logged configuration (seed included) does not determine those
    draws. Public draws (data, participation, random levels) are keyed by the seed and the
    repetition alone and stay reproducible."""
    return np.random.SeedSequence().generate_state(SECRET_WORDS).astype(np.int64)


def _budget_key(epsilon) -> float:
    """The budget a plain run's streams are keyed by: privacy.epsilon, or a digest of a per-silo spec."""
    if isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool):
        return float(epsilon)
    return float(zlib.crc32(json.dumps(epsilon, sort_keys=True).encode()))


def _algorithm_class(target) -> type[PlannedAlgorithm]:
    try:
        found = get_class(str(target))
    except Exception:  # Hydra raises several kinds for a path that does not import
        found = None
    if not isinstance(found, PlannedAlgorithm) or not isinstance(found.recipe, ProtocolRecipe):
        raise ConfigError("algorithm._target_", target, "the import path of a fedray protocol class (one with a recipe)")
    return found


def _instantiate(key: str, node: dict):
    """The object a config group describes; a field its class does not take is a config error."""
    if not isinstance(node, dict) or "_target_" not in node:
        raise ConfigError(key, node, "a config group (a mapping with _target_; choose one with the group's name)")
    try:
        return instantiate(node)
    except InstantiationException as err:
        cause = err.__cause__ if err.__cause__ is not None else err
        raise ConfigError(key, {k: v for k, v in node.items() if k != "_target_"},
                          f"the fields of {node.get('_target_')} ({cause})") from err


def _list_fields_as_arrays(dataset):
    """``dataset`` with each list-valued field (one whose default is a tuple or list, e.g. a dense
    game's payoff) as a read-only float64 ndarray: Hydra's ``instantiate`` hands lists over as
    OmegaConf ``ListConfig``s, which numpy converts anew on every product (3.5 ms instead of
    microseconds for a 2 x 3 payoff). A ragged or non-numeric list stays as given, for the spec's
    ``validate`` to name."""
    if not is_dataclass(dataset) or isinstance(dataset, type):
        return dataset
    arrays = {}
    for spec_field in fields(dataset):
        value = getattr(dataset, spec_field.name)
        if not spec_field.init or not isinstance(spec_field.default, (tuple, list)):
            continue
        if OmegaConf.is_list(value):
            value = OmegaConf.to_container(value, resolve=True)
        try:
            array = np.array(value, dtype=np.float64)
        except (TypeError, ValueError):
            continue
        array.flags.writeable = False
        arrays[spec_field.name] = array
    return replace(dataset, **arrays) if arrays else dataset


def _loss(data: dict) -> Loss | None:
    """The data's loss, or None for data that define their own objective (a game's payoffs). Its
    settings (a margin clip, a Huber threshold, the number of outputs) are positive numbers."""
    if data.get("loss") is None:
        return None
    loss = _instantiate("data.loss", data["loss"])
    if not isinstance(loss, Loss) or not is_dataclass(loss):
        raise ConfigError("data.loss", type(loss).__name__, "a loss: a dataclass subclassing fedray.losses.Loss")
    for setting in fields(loss):        # the numeric settings (a smoothed loss's base loss is not one)
        if isinstance(setting.default, (int, float)) and not isinstance(setting.default, bool):
            positive(f"data.loss.{setting.name}", getattr(loss, setting.name), type(setting.default))
    return loss


def _guard(privacy: PrivacyPlan, sampler, replicas: Replicas, seed: int, num_rounds: int, num_units: int,
           enforce: bool) -> PrivacyPlan:
    """The budget guard: charge the sampler's participations to the plan's ledger."""
    if not privacy.private:
        return privacy
    ledger, target = privacy.ledger, privacy.target_epsilon
    if ledger is None or target is None:
        raise ValueError(f"a private plan needs a ledger and target epsilons; got ledger={ledger}, target={target}")
    accountant = ledger.accountant
    # An accountant that prices phases, not rounds, needs no replay of the sampler's draws (10^5 rounds of them)
    if isinstance(accountant, PlansWithoutCounts):
        counts = accountant.planned_without_counts((replicas.count, num_units), num_rounds)
    else:
        counts = accountant.planned(sampler.counts(seed, replicas.repetitions, num_rounds, num_units), num_rounds)
    if enforce:
        planned = check_budget(ledger, counts, target, privacy.delta)
    else:
        planned = ledger.epsilons(counts)
    return replace(privacy, planned_epsilon=planned, planned_counts=counts)


def make_plan(cfg: DictConfig) -> Plan:
    """Validate ``cfg`` and resolve it into a ``Plan``; raises ``ConfigError`` on the first bad value
    and ``BudgetError`` if the participations would overspend a unit's budget. Changes no state of
    the process: the accountant store is chosen for this call alone."""
    config = cast(dict, OmegaConf.to_container(cfg, resolve=True))      # plain data from here on (a DictConfig's: a dict)
    # A faithful run trusts no accountant answer it did not compute itself (fedray.privacy.stored).
    with accountant_store(not bool((config.get("runtime") or {}).get("faithful", False))):
        return _resolved(config)


def _resolved(config: dict) -> Plan:
    """``make_plan`` of the config as plain data, inside its accountant-store scope."""
    natural("seed", config.get("seed"))
    natural("trial", config.get("trial"))
    dataset = _list_fields_as_arrays(_instantiate("data.spec", config["data"]["spec"]))
    if not isinstance(dataset, DataSpec):
        raise ConfigError("data.spec", type(dataset).__name__, "a data spec (validate, describe and load: "
                          "fedray.data.DataSpec)")
    dataset.validate()
    shape = dataset.describe()
    loss = _loss(config["data"])
    sampler = _instantiate("participation", config["participation"])
    algorithm_class = _algorithm_class(config["algorithm"].get("_target_"))
    recipe = algorithm_class.recipe
    if not recipe.sets_participation:   # else resolve writes it (then checked)
        sampler.validate(shape.num_silos)
    known_keys("", config, TOP_LEVEL_KEYS + recipe.config_keys)
    given = privacy_settings(config, recipe)
    if loss is None and recipe.needs_loss:
        raise ConfigError("data.loss", None, f"a loss for {config['algorithm'].get('name')} (data={config['data'].get('name')} "
                          "defines none)")
    if shape.summarised_items is not None and not (loss is not None and loss.linear_in_record):
        raise ConfigError("data.loss", type(loss).__name__, f"a loss linear in the record (Linear) for data="
                          f"{config['data'].get('name')}: each record is the mean of {shape.summarised_items} items, "
                          "which gives the items' average loss only for such a loss")
    config = recipe.resolve(algorithm_class, config, dataset, shape, loss, sampler, given,
                            algorithm_settings(config, recipe))
    # resolve may have filled some (a theory preset's budget and calibration, a rule's step size):
    # the settings as resolved
    config["privacy"] = as_terms(config["privacy"])
    settings = privacy_settings(config, recipe)
    algorithm = algorithm_settings(config, recipe)
    # resolve may have set the sampler's size or the loss's smoothing
    sampler = _instantiate("participation", config["participation"])
    loss = _loss(config["data"])
    sampler.validate(shape.num_silos)
    if isinstance(loss, MoreauEnvelope) and loss.smoothing is None:
        raise ConfigError("data.loss.smoothing", None, "a positive number (null only where a protocol sets it from "
                          "its theorem: p_agd or p_gd with algorithm.parameters=paper|exact)")

    num_rounds = positive("num_rounds", config.get("num_rounds"), int)
    if num_rounds > MAX_ROUNDS:
        raise ConfigError("num_rounds", num_rounds, f"at most {MAX_ROUNDS:,} (planning replays every round's draws)")
    max_rounds = sampler.max_rounds(shape.num_silos)
    if max_rounds is not None and num_rounds > max_rounds:
        raise ConfigError("num_rounds", num_rounds, f"at most {max_rounds} with {type(sampler).__name__}")
    replicas = _replicas(config, settings, algorithm)
    if replicas.count * shape.num_silos > 2**31:
        raise ConfigError("repetitions", config["repetitions"], f"fewer replicas: {replicas.count:,} replicas x "
                          f"{shape.num_silos:,} units exceed 2^31 ledger cells")
    runtime, tracking = config["runtime"], config["tracking"]
    known_keys("runtime", runtime, RUNTIME_KEYS)
    known_keys("tracking", tracking, TRACKING_KEYS)
    for key in ("num_actors", "num_cpus", "checkpoint_every", "rounds_per_call"):
        positive(f"runtime.{key}", runtime.get(key), int, allow_none=True)
    positive("runtime.single_actor_work", runtime.get("single_actor_work"), allow_none=True)
    positive("runtime.connect_timeout", runtime.get("connect_timeout"), allow_none=True)
    check_bool("runtime.dashboard", runtime.get("dashboard", False))
    _check_faults(runtime)
    _check_py_modules(runtime.get("py_modules"))
    address = runtime.get("address")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise ConfigError("runtime.address", address, 'null (a private local Ray), "auto", or "host:port" / "ray://host:port"')
    positive("tracking.log_every", tracking.get("log_every"), int)
    positive("tracking.replica_curves", tracking.get("replica_curves", 30), int)

    context = PlanContext(int(config["seed"]), num_rounds, dataset, shape, loss, sampler, replicas, settings, algorithm)
    planned = recipe.plan(algorithm_class, config, context)
    enforce = settings.enforce_budget
    privacy = _guard(planned.privacy, sampler, replicas, context.seed, num_rounds, shape.num_silos, enforce is True)
    if enforce == "stop" and privacy.private:
        if not planned.public_charges:
            raise ConfigError("privacy.enforce_budget", enforce, f"true or false for {config['algorithm'].get('name')}: "
                              "a run stops at its budget only where every round's charge is public (rounds of "
                              "sampled units or steps; not a driver-side program or a halting curator)")
        privacy = replace(privacy, stop_at_budget=True)
    if privacy.private and replicas.common_random_numbers and replicas.count > len(set(replicas.repetitions)):
        privacy = replace(privacy, non_private_inputs=privacy.non_private_inputs + (
            "common random numbers: replicas of one repetition share noise, so each replica's release is "
            "private on its own but their joint release is not",))
    if privacy.private and shape.preprocessing_outside_guarantee:
        privacy = replace(privacy, non_private_inputs=privacy.non_private_inputs + shape.preprocessing_outside_guarantee)
    faithful = runtime.get("faithful", False)
    check_bool("runtime.faithful", faithful)
    if faithful and runtime.get("resume"):
        raise ConfigError("runtime.resume", True, "false with runtime.faithful=true (a faithful run evaluates its "
                          "models after the last round, and those pending evaluations are not checkpointed)")
    if faithful and privacy.non_private_inputs:
        raise ConfigError("runtime.faithful", True, "false for a plan that uses inputs outside its privacy "
                          f"guarantee ({'; '.join(privacy.non_private_inputs)})")
    privacy = replace(privacy, faithful=bool(faithful))
    return Plan(
        seed=context.seed,
        trial=int(config["trial"]),
        num_rounds=num_rounds,
        dataset_name=str(config["data"]["name"]),
        dataset=dataset,
        shape=shape,
        loss=loss,
        algorithm_name=str(config["algorithm"].get("name")),
        replicas=replicas,
        sampler=sampler,
        protocol=replace(planned, privacy=privacy),
        runtime=runtime,
        tracking=tracking,
        progress=bool(config["progress"]),
        config=config,
        evaluate_every=positive("evaluate_every", config.get("evaluate_every", 1), int),
    )
