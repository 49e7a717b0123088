"""Theory mode: each theorem's hyperparameters from the problem's constants (seed-004 §3).

The experiments (seed-004 §5) pick K, R and step sizes by the paper's empirical recipe; the
theorems fix them as functions of the problem instead. One pure function per theorem maps the
constants below to ``TheoryValues`` (R, K, step size, calibration mode, sigma), with the rounding
rules of seed-004 §3.5 (K = clamp(ceil(.), 1, n), R = max(1, ceil(.)), one-pass R = floor(n / K))
and the theorem's preconditions checked (``ConfigError`` naming the key, the value and the bound).

Symbols (``Problem``): n records per silo, d model dimension, N silos, M silos per round,
(eps, delta) the target, L the Lipschitz bound, beta the smoothness, D the radius of W.

- L is ``privacy.l2_clip``, the per-example gradient bound fedray enforces; the theory formulas
  of ``fedray.protocols.isrl_dp.calibration`` read L the same way (replace-one sensitivity 2 L / K).
- D is ``algorithm.radius``. The iterates start at w_0 = 0, the centre of W, so ||w_0 - w*|| <= D,
  which is the quantity the proofs use (Lemma D.6's ||w_0 - w*||^2, Lemma E.1, Lan's nu).
- beta is ``theory.smoothness``, or from the loss and a bound B on ||x|| (``data.spec.feature_norm``):
  logistic B^2 / 4, squared B^2.

``resolve(cfg)`` is the planner's hook: with a ``theory`` node it fills the theorem-owned keys
(``num_rounds``, ``algorithm.batch_size``, ``algorithm.step_size`` and the theorem's other
algorithm fields must be null, so nothing typed by a user is overwritten; ``privacy.calibration``
is filled only when null, so the theorem's R, K, eta may run with the accountant's noise); with
``privacy.silo_level`` it converts a silo-level budget to the record-level one of seed-004 §3.10.
Without either node it returns the config unchanged.
"""

from __future__ import annotations

from typing import Any

import copy
import dataclasses
import math
from dataclasses import dataclass, field

from fedray.checks import number_in
from fedray.core.planning import AlgorithmSettings, PlannedAlgorithm, PrivacySettings, settings_of
from fedray.core.protocol import Routing
from fedray.core.sampling import AllUnits, UniformParticipation
from fedray.core.terms import Calibration, Composition, TrustModel
from fedray.data import SyntheticLinear
from fedray.errors import ConfigError
from fedray.losses import Logistic, Squared
from fedray.protocols.isrl_dp import calibration as cal
from fedray.protocols.isrl_dp.settings import SiloSettings
from fedray.protocols.isrl_dp.shuffle_calibration import (
    calibrate_shuffled_sgd,
    default_randomizer_delta,
)


@dataclass(frozen=True)
class Problem:
    """The constants the theorems take (module docstring). ``gradient_std`` (phi) and
    ``heterogeneity`` (upsilon) default to L, which bounds both when gradients are bounded by L."""

    records_per_silo: int     # n
    dim: int                  # d
    num_silos: int            # N
    silos_per_round: int      # M
    epsilon: float
    delta: float
    lipschitz: float          # L = l2_clip
    smoothness: float         # beta
    radius: float             # D
    gradient_std: float | None = None
    heterogeneity: float | None = None


@dataclass(frozen=True)
class TheoryValues:
    theorem: str
    num_rounds: int                 # R
    batch_size: int                 # K
    step_size: float                # eta (Alg. 2) or 1/nu (Alg. 1, a prox scale; spec §6 item 1)
    calibration: Calibration        # the privacy.calibration giving the theorem's sigma
    noise_std: float                # sigma, per coordinate of a silo's message
    algorithm: dict = field(default_factory=dict)   # other algorithm fields the theorem sets
    derived: dict = field(default_factory=dict)     # intermediate values, logged with the run


def _ceil_count(value: float, low: int = 1, high: float = math.inf) -> int:
    """clamp(ceil(value), low, high); a value a rounding error above an integer stays that integer."""
    return int(min(high, max(low, math.ceil(value - 1e-9 * max(1.0, abs(value))))))


def _check_budget(p: Problem, theorem: str, bound, bound_text: str) -> None:
    """delta in (0, 1) and eps in (0, bound(delta)]: each theorem's privacy precondition."""
    if not 0.0 < p.delta < 1.0:
        raise ConfigError("privacy.delta", p.delta, f"in (0, 1) for {theorem}")
    limit = bound(p.delta)
    if not 0.0 < p.epsilon <= limit:
        raise ConfigError("privacy.epsilon", p.epsilon, f"in (0, {bound_text}] = (0, {limit:.6g}] for {theorem}")


def _check_isrl_budget(p: Problem, theorem: str) -> None:
    """eps_0 <= 2 ln(2/delta_0), delta_0 in (0, 1): the Gaussian/advanced-composition route of Thm 2.1."""
    _check_budget(p, theorem, lambda delta: 2.0 * math.log(2.0 / delta), "2 ln(2/delta)")


def _check_k_condition(p: Problem, num_rounds: int, batch_size: int, theorem: str) -> float:
    """eps' = n e~ / (2K) <= 1 (Thm 2.1: the per-round Gaussian needs eps' <= 1); returns eps'."""
    k_min = cal.theory_min_batch_size(p.records_per_silo, p.epsilon, p.delta, num_rounds)
    eps_prime = k_min / batch_size
    if eps_prime > 1.0 + 1e-9:
        raise ConfigError(
            "privacy.epsilon", p.epsilon,
            f"small enough for {theorem}'s K condition K >= eps n / (4 sqrt(2 R ln(2/delta))) = {k_min:.6g} "
            f"with K <= n = {p.records_per_silo} (R = {num_rounds})",
        )
    return eps_prime


def _theory_noise_std(p: Problem, num_rounds: int, batch_size: int) -> float:
    """sigma of Thm 2.1: the multiplier times the theorem's sensitivity 2 L / K."""
    z = cal.theory_minibatch_noise_multiplier(p.records_per_silo, p.epsilon, p.delta, num_rounds, batch_size)
    return float(z) * 2.0 * p.lipschitz / batch_size


def lan_prox_scale(smoothness: float, oracle_std: float, diameter: float, num_rounds: int) -> float:
    """nu = max{2 beta, [2 V^2 R (R+1) (R+2) / (3 D^2)]^(1/2)} (Lan 2012, mu = 0; seed-004 §3.3)."""
    r = num_rounds
    return max(2.0 * smoothness, math.sqrt(2.0 * oracle_std**2 * r * (r + 1) * (r + 2) / (3.0 * diameter**2)))


def regularized_prox_scale(
    smoothness: float, regularization: float, oracle_std: float, initial_gap: float, num_rounds: int
) -> float:
    """nu = max{2 (beta + lambda), [lambda V^2 R (R+1) (R+2) / (3 Delta)]^(1/2)} (seed-004 §3.3)."""
    r = num_rounds
    return max(
        2.0 * (smoothness + regularization),
        math.sqrt(regularization * oracle_std**2 * r * (r + 1) * (r + 2) / (3.0 * initial_gap)),
    )


def mb_sgd_convex(p: Problem) -> TheoryValues:
    """Thm D.1 (convex, beta-smooth; seed-004 §3.1): ISRL-DP MB-SGD (Alg. 2).

    R   = (beta D sqrt(M) / L) min{sqrt(n), eps n / sqrt(d)} + min{n M, eps^2 n^2 M / d}
    eta = min{1/beta, (D / (L sqrt(R))) min{1, eps n sqrt(M) / sqrt(R d), sqrt(n M / R)}}
    K   >= eps n / (4 sqrt(2 R ln(2/delta)))  (the smallest such K)
    sigma^2 = 256 L^2 R ln(2.5 R/delta) ln(2/delta) / (n^2 eps^2)  (Thm 2.1; ``calibration: theory``)
    gamma_r = 1/R: the output averages the last R iterates (``average_last = R``: w_1..w_R, the
    theorem's w_0..w_{R-1} shifted by one round).
    Preconditions: eps <= 2 ln(2/delta), eps' = n e~ / (2K) <= 1.
    """
    theorem = "Thm D.1"
    _check_isrl_budget(p, theorem)
    n, d, m = p.records_per_silo, p.dim, p.silos_per_round
    eps, lip, beta, radius = p.epsilon, p.lipschitz, p.smoothness, p.radius
    rounds = _ceil_count(
        beta * radius * math.sqrt(m) / lip * min(math.sqrt(n), eps * n / math.sqrt(d))
        + min(n * m, eps**2 * n**2 * m / d)
    )
    step = min(1.0 / beta, radius / (lip * math.sqrt(rounds))
               * min(1.0, eps * n * math.sqrt(m) / math.sqrt(rounds * d), math.sqrt(n * m / rounds)))
    batch = _ceil_count(cal.theory_min_batch_size(n, eps, p.delta, rounds), 1, n)
    eps_prime = _check_k_condition(p, rounds, batch, theorem)
    return TheoryValues(theorem, rounds, batch, step, Calibration.THEORY, _theory_noise_std(p, rounds, batch),
                        algorithm={"average_last": rounds}, derived={"eps_prime": eps_prime})


def accelerated_erm(p: Problem) -> TheoryValues:
    """Thm F.1 (smooth convex ERM; seed-004 §3.2): accelerated ISRL-DP MB-SGD (Alg. 1, AC-SA).

    R = max{(beta D sqrt(M) eps n / (L sqrt(d ln(1/delta))))^(1/2), 1[MK < Nn] eps^2 n^2 / (K d ln(1/delta))}
    The K condition of Thm 2.1 ties K to R and the second term of R to K. [OURS] K is the smallest
    K meeting the condition at the first term's R, which every final R is at least, so it holds
    at the final R too. Noise: Thm 2.1's sigma (the same as Alg. 2; ``calibration: theory``).
    Regularizer (Lemma E.1 form, spec §6 item 3): lambda = V / (D sqrt(R)) with the oracle variance
    V^2 = 1[MK < Nn] 4 L^2 / (M K) + d sigma^2 / M. Prox scale (spec §3.3):
    nu = max{2 (beta + lambda), [lambda V^2 R (R+1) (R+2) / (3 Delta)]^(1/2)}, step_size = 1/nu,
    with [OURS] Delta = L D >= F(w_0) - F* (L-Lipschitz, ||w_0 - w*|| <= D).
    Preconditions: eps <= 2 ln(2/delta), eps' <= 1.
    """
    theorem = "Thm F.1"
    _check_isrl_budget(p, theorem)
    n, d, m, big_n = p.records_per_silo, p.dim, p.silos_per_round, p.num_silos
    eps, lip, beta, radius = p.epsilon, p.lipschitz, p.smoothness, p.radius
    log_term = d * math.log(1.0 / p.delta)
    first = math.sqrt(beta * radius * math.sqrt(m) * eps * n / (lip * math.sqrt(log_term)))
    batch = _ceil_count(cal.theory_min_batch_size(n, eps, p.delta, _ceil_count(first)), 1, n)
    sampled = m * batch < big_n * n
    rounds = _ceil_count(max(first, eps**2 * n**2 / (batch * log_term) if sampled else 0.0))
    eps_prime = _check_k_condition(p, rounds, batch, theorem)
    sigma = _theory_noise_std(p, rounds, batch)
    oracle_std = math.sqrt((4.0 * lip**2 / (m * batch) if sampled else 0.0) + d * sigma**2 / m)
    regularization = oracle_std / (radius * math.sqrt(rounds))
    nu = regularized_prox_scale(beta, regularization, oracle_std, lip * radius, rounds)
    return TheoryValues(theorem, rounds, batch, 1.0 / nu, Calibration.THEORY, sigma,
                        algorithm={"regularization": regularization},
                        derived={"eps_prime": eps_prime, "oracle_std": oracle_std, "prox_scale": nu})


def one_pass_convex(p: Problem) -> TheoryValues:
    """Thm E.1.1 (convex, beta-smooth, heterogeneous SCO; seed-004 §3.3): one-pass accelerated MB-SGD.

    K = (L / (beta D))^(2/5) n^(3/5) (d ln(1/delta))^(1/5) / (eps^(2/5) M^(1/5)), clamped to [1, n];
    R = floor(n / K). Noise: G2, sigma^2 = 32 L^2 ln(1.25/delta) / (eps^2 K^2) per round, parallel
    composition over the disjoint batches. V^2 = phi^2 / (M K) + (upsilon^2 / M) (N-M)/(N-1) 1[N > 1]
    + d sigma^2 / M (Lemma E.3). Step: Lan's alternative without regularizer (spec §3.3),
    nu = max{2 beta, [2 V^2 R (R+1) (R+2) / (3 D^2)]^(1/2)}, step_size = 1/nu.
    Precondition: eps <= 8 ln(1/delta) (G2).
    """
    theorem = "Thm E.1"
    _check_budget(p, theorem, lambda delta: 8.0 * math.log(1.0 / delta), "8 ln(1/delta)")
    n, d, m, big_n = p.records_per_silo, p.dim, p.silos_per_round, p.num_silos
    lip = p.lipschitz
    batch = _ceil_count((lip / (p.smoothness * p.radius)) ** 0.4 * n**0.6 * (d * math.log(1.0 / p.delta)) ** 0.2
                        / (p.epsilon**0.4 * m**0.2), 1, n)
    rounds = cal.one_pass_num_rounds(n, batch)
    z = cal.one_pass_noise_multiplier(n, p.epsilon, p.delta, rounds, batch)
    sigma = float(z) * 2.0 * lip / batch
    phi = lip if p.gradient_std is None else p.gradient_std
    upsilon = lip if p.heterogeneity is None else p.heterogeneity
    silo_sampling = (upsilon**2 / m) * (big_n - m) / (big_n - 1) if big_n > 1 else 0.0
    oracle_std = math.sqrt(phi**2 / (m * batch) + silo_sampling + d * sigma**2 / m)
    nu = lan_prox_scale(p.smoothness, oracle_std, p.radius, rounds)
    return TheoryValues(theorem, rounds, batch, 1.0 / nu, Calibration.THEORY, sigma,
                        algorithm={"regularization": 0.0}, derived={"oracle_std": oracle_std, "prox_scale": nu})


def shuffled_convex(p: Problem) -> TheoryValues:
    """Thm G.1 (convex, i.i.d.; seed-004 §3.7): shuffled noisy MB-SGD under shuffle DP, K = 1.

    R = max{n^2 N^2 eps^2 / M, N / M, min{n, eps^2 n^2 N^2 / (d M)}, (beta D / L) min{sqrt(n M), eps n N / sqrt(d)}}
    sigma: the explicit chain of ``fedray.protocols.isrl_dp.shuffle_calibration`` with advanced composition
    (the paper's route; ``calibration: paper``), which fixes the theorem's constant C.
    eta: the theorem only says eta <= 1/beta, tuned. [D] Minimising its bound's eta terms,
    L^2 R eta / (n M) + D^2 / (eta R) + eta (L^2 + d sigma^2) / M, gives
    eta = min{1/beta, D / sqrt(R (L^2 R / (n M) + (L^2 + d sigma^2) / M))}. gamma_r = 1/R.
    Preconditions (§3.5): eps <= ln(2/delta), delta in (0, 1), M >= 16 ln(2/dh0) with
    dh0 = n N delta / (18 R M^2), and the chain's eh0 <= 1.
    """
    theorem = "Thm G.1"
    _check_budget(p, theorem, lambda delta: math.log(2.0 / delta), "ln(2/delta)")
    n, d, m, big_n = p.records_per_silo, p.dim, p.silos_per_round, p.num_silos
    eps, lip, beta, radius = p.epsilon, p.lipschitz, p.smoothness, p.radius
    rounds = _ceil_count(max(
        n**2 * big_n**2 * eps**2 / m,
        big_n / m,
        min(n, eps**2 * n**2 * big_n**2 / (d * m)),
        beta * radius / lip * min(math.sqrt(n * m), eps * n * big_n / math.sqrt(d)),
    ))
    dh0 = default_randomizer_delta(p.delta, num_silos=big_n, silos_per_round=m, records_per_silo=n,
                                   num_rounds=rounds)
    need = 16.0 * math.log(2.0 / dh0)
    if m < need:
        raise ConfigError("participation.silos_per_round", m,
                          f">= 16 ln(2/dh0) = {need:.1f} for {theorem} (dh0 = {dh0:.3g}, R = {rounds})")
    solved = calibrate_shuffled_sgd(eps, p.delta, num_silos=big_n, records_per_silo=n, num_rounds=rounds,
                                    silos_per_round=m, composition=Composition.ADVANCED)
    sigma = solved.noise_multiplier * 2.0 * lip
    spread = lip**2 * rounds / (n * m) + (lip**2 + d * sigma**2) / m
    step = min(1.0 / beta, radius / math.sqrt(rounds * spread))
    return TheoryValues(theorem, rounds, 1, step, Calibration.PAPER, sigma, algorithm={"average_last": rounds},
                        derived={"randomizer_epsilon": solved.round.randomizer_epsilon, "randomizer_delta": dh0})


# Each algorithm's recipe names the theorem about it (``SiloGaussian.theorem``); a theory node on
# another algorithm is refused.
THEOREMS = {f"{__name__}.{theorem.__name__}": theorem
            for theorem in (mb_sgd_convex, accelerated_erm, one_pass_convex, shuffled_convex)}


def silo_level_budget(epsilon: float, delta: float, records_per_silo: int, num_silos: int,
                      silos_per_round: int | None) -> tuple[float, float]:
    """Record-level (eps_0, delta_0) of the hybrid ISRL-DP + silo-level recipe (seed-004 §3.10, App. D.3.5).

    Trust model: ISRL-DP, no trusted server; every message is noised inside its silo, so both
    guarantees hold for everything the server and the other silos see.
    Neighbouring relations: record level, replace one record of one silo (ISRL-DP, at
    (eps_0, delta_0)); user level, replace one silo's whole dataset (at (eps, delta)).
    Calibration: run Alg. 2 at eps_0 = eps / n, delta_0 = delta / (4 n) (any algorithm whose ledger
    certifies (eps_0, delta_0)-ISRL-DP per silo will do: the argument uses only that). A silo's
    dataset differs from its replacement in at most n records, so group privacy (Lemma D.9) gives
    (n eps_0, n e^{(n-1) eps_0} delta_0) = (eps, e^{eps (1 - 1/n)} delta / 4), and e^eps / 4 < 1 for
    eps <= 1. n is the largest silo's size, so every silo is covered.
    Assumptions: eps <= 1, full participation M = N (the paper's setting; its rate also assumes
    i.i.d. silos, which is not checked).

    Raises
    ------
    ConfigError
        If eps is not in (0, 1], delta not in (0, 1), or M != N.
    """
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0.0 < epsilon <= 1.0:
        raise ConfigError("privacy.silo_level.epsilon", epsilon, "in (0, 1] (seed-004 §3.10)")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 < delta < 1.0:
        raise ConfigError("privacy.silo_level.delta", delta, "in (0, 1)")
    if silos_per_round != num_silos:
        raise ConfigError("participation.silos_per_round", silos_per_round,
                          f"the number of silos N = {num_silos} (seed-004 §3.10 needs M = N, uniform participation)")
    return epsilon / records_per_silo, delta / (4.0 * records_per_silo)


def loss_smoothness(loss, feature_norm: float | None) -> float:
    """beta of a GLM loss with ||x|| <= B: logistic B^2 / 4 (sigmoid' <= 1/4), squared B^2."""
    factors = {Logistic: 0.25, Squared: 1.0}
    if type(loss) not in factors or feature_norm is None:
        raise ConfigError("theory.smoothness", None,
                          f"a positive number: beta is not derived for {type(loss).__name__} "
                          f"with data.spec.feature_norm = {feature_norm}")
    return factors[type(loss)] * float(feature_norm) ** 2


def _number(key: str, value, allowed: str) -> float:
    return number_in(key, value, 0.0, math.inf, allowed)


def _select(cfg: dict, key: str):
    node = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _fill(cfg: dict, key: str, value, owner: str) -> None:
    current = _select(cfg, key)
    if current is not None:
        raise ConfigError(key, current, f"null under {owner}, which sets it ({value!r})")
    *path, last = key.split(".")
    node = cfg
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value


def _problem(cfg: dict, priv: PrivacySettings, node: dict, shape, spec, loss, silos_per_round,
             shuffled: bool, radius: float | None) -> Problem:
    if not priv.private:
        raise ConfigError("privacy.trust_model", TrustModel.NONE, "private under a theory preset (the theorems need eps)")
    if priv.epsilon_grid is not None:
        raise ConfigError("privacy.epsilon_grid", priv.epsilon_grid,
                          "null under a theory preset (R, K, eta depend on eps)")
    if isinstance(priv.l2_clip, (list, tuple)):
        raise ConfigError("privacy.l2_clip", priv.l2_clip, "one number under a theory preset (R, K, eta depend on L)")
    if len(set(shape.n_train)) != 1:
        raise ConfigError("data", f"silo sizes {min(shape.n_train)}..{max(shape.n_train)}",
                          "balanced silos under a theory preset (the theorems' n)")
    if silos_per_round is None:
        raise ConfigError("participation", cfg["participation"].get("_target_"),
                          "uniform participation of M silos per round under a theory preset (Assumption 1.4)")
    n, big_n = shape.n_train[0], shape.num_silos
    default_delta = 1.0 / (big_n * n) ** 2 if shuffled else 1.0 / n**2   # the planner's defaults
    smoothness = node.get("smoothness")
    if smoothness is None:
        smoothness = loss_smoothness(loss, spec.feature_norm if isinstance(spec, SyntheticLinear) else None)
    return Problem(
        records_per_silo=n,
        dim=shape.dim * shape.num_outputs,
        num_silos=big_n,
        silos_per_round=int(silos_per_round),
        epsilon=_number("privacy.epsilon", priv.epsilon, "one positive number under a theory preset"),
        delta=default_delta if priv.delta is None else _number("privacy.delta", priv.delta,
                                                                      "null or one number in (0, 1)"),
        lipschitz=_number("privacy.l2_clip", priv.l2_clip,
                          "a positive number under a theory preset "
                          "(the theorems' L; null would estimate it from the data)"),
        smoothness=_number("theory.smoothness", smoothness, "a positive number (beta) or null"),
        radius=_number("algorithm.radius", radius,
                       "a positive number under a theory preset (the theorems' D; W must be bounded)"),
        gradient_std=node.get("gradient_std"),
        heterogeneity=node.get("heterogeneity"),
    )


def resolve(cfg: dict, algorithm_class: type[Any], spec, shape, loss, sampler,
            privacy: PrivacySettings | None = None, algorithm: AlgorithmSettings | None = None) -> dict:
    """``cfg`` with the hybrid budget (``privacy.silo_level``) and the theorem's values (``theory``)
    filled in; the same object, untouched, when neither node is present. ``privacy``: the run's
    settings (``fedray.plan.privacy_settings``); None stands for settings without a silo level.
    ``algorithm``: the run's algorithm settings (``fedray.plan.algorithm_settings``), needed with
    a ``theory`` node (its name, and the radius D the theorems read)."""
    silo_level, node = (privacy.silo_level if privacy is not None else None), cfg.get("theory")
    if silo_level is None and node is None:
        return cfg
    if privacy is None:
        raise ValueError("theory.resolve needs the run's privacy settings for a theory preset")
    cfg = copy.deepcopy(cfg)
    # The theorems and the hybrid recipe assume M of N silos drawn uniformly (Assumption 1.4).
    uniform = isinstance(sampler, (UniformParticipation, AllUnits))
    silos_per_round = sampler.per_round(shape.num_silos) if uniform else None
    if silo_level is not None:
        eps0, delta0 = silo_level_budget(silo_level.get("epsilon"), silo_level.get("delta"),
                                         max(shape.n_train), shape.num_silos, silos_per_round)
        _fill(cfg, "privacy.epsilon", eps0, "privacy.silo_level")
        _fill(cfg, "privacy.delta", delta0, "privacy.silo_level")
        privacy = dataclasses.replace(privacy, epsilon=eps0, delta=delta0)
    if node is not None:
        if algorithm is None:
            raise ValueError("theory.resolve needs the run's algorithm settings for a theory preset")
        _apply_theorem(cfg, privacy, algorithm, node, algorithm_class, shape, spec, loss, silos_per_round)
    return cfg


def _apply_theorem(cfg: dict, privacy: PrivacySettings, algorithm: AlgorithmSettings, node: dict,
                   algorithm_class: type[Any], shape, spec, loss, silos_per_round) -> None:
    theorem = THEOREMS.get(str(node.get("_target_")))
    if theorem is None:
        raise ConfigError("theory._target_", node.get("_target_"), f"one of {list(THEOREMS)}")
    if algorithm_class.recipe.theorem is not theorem:
        raise ConfigError("algorithm", algorithm.name,
                          f"an algorithm whose recipe names theory {node['_target_']}")
    shuffled = algorithm_class.recipe.routing is not Routing.DIRECT
    problem = _problem(cfg, privacy, node, shape, spec, loss, silos_per_round, shuffled,
                       settings_of(SiloSettings, algorithm).radius)      # every algorithm a theorem names has W
    values = theorem(problem)
    owner = f"theory ({values.theorem})"
    _fill(cfg, "num_rounds", values.num_rounds, owner)
    _fill(cfg, "algorithm.batch_size", values.batch_size, owner)
    _fill(cfg, "algorithm.step_size", values.step_size, owner)
    for key, value in values.algorithm.items():
        _fill(cfg, f"algorithm.{key}", value, owner)
    if privacy.calibration is None:
        cfg["privacy"]["calibration"] = values.calibration
    # The run record carries the constants used and the theorem's sigma (seed-004 §3.5: log them).
    cfg["theory"]["resolved"] = {"theorem": values.theorem, "noise_std": values.noise_std,
                                 "smoothness": problem.smoothness, "lipschitz": problem.lipschitz,
                                 "radius": problem.radius, "delta": problem.delta, **values.derived}
