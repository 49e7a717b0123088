"""Seed 002's parameter calculator (spec §2.1, §2.3, §4.1): every phase's sizes, steps, thresholds
and noise for Alg. 1 (phased SGD with outlier-iterate removal) and Alg. 3 (accelerated phased ERM
with outlier-gradient removal), from public inputs only (n users of m items, d, eps, delta and the
problem's L, R, beta), and the gradient evaluations each costs.

Profile P ("paper") is the printed formulas, natural logs, no rounding (``phase_layout`` rounds
what runs, ``layout_noise_std`` recomputes sigma_i for it), with Alg. 3's users per step
capped at the phase's users (K_i := min(K_i, n_i): full participation, privacy-consistent since
sigma_i does not depend on K_i). At laptop scale P is vacuous (spec §4.1: Alg. 1's first phase adds
noise of norm ~680 R at n = 1e6); ``feasibility`` says so in words. Profile X ("exploratory")
multiplies the printed constants (100, 1000, 500) by ``kappa`` (not the log factors); its results
carry a nominal eps only. Profile D ("derived", spec §5 item 12) keeps the structure and recomputes
the privacy constants from the proof's inequalities, with c_Delta = 120 for the filtered mean's
coupled sensitivity Delta = c_Delta tau (7 + 3 ln(1 / zeta)) / K (the spec's conservative value
for Lemma B.2 / C.2's unspecified constant, so D's eps holds modulo it):

- Alg. 1: the test at Lap(8 / eps) (the score, sensitivity < 2, at eps / 4) with C = ceil(80 ln(10
  e^eps / delta) / eps) groups, so that P(|Lap| >= C / 10) <= zeta = delta / (10 e^eps) and a pass
  means s >= 0.7 C, which the sensitivity sketch needs (the spec's 60 leaves a margin of 2C / 15,
  so only s >= 2C / 3); sigma_i by the analytic Gaussian at (3 eps / 4, delta / 2). A phase is
  then (eps / 4 + 3 eps / 4, delta / 2 + 3 zeta / 2)-DP: where s(D) >= 0.7 C - 2 the test and the
  coupled Gaussian compose, otherwise a pass has probability <= zeta / 2 and the test alone is
  (eps / 4, zeta / 2)-DP.
- Alg. 3 (and Alg. 2 alone): Lap(8 / eps) and Lap(16 / eps) as printed, K_i from the good event
  (``derived_batch``), and sigma_i for T_i Gaussian releases at (eps / 2, delta / 2) WITHOUT credit
  for sampling K_i of n_i (``derived_noise``).

Symbols: l = floor(log2 n) phases; phase i has n_i = (1 - 2^-q) n / 2^(i q) fresh users.
Alg. 1: C = 100 ln(20 n m e^eps / delta) / eps groups, eta_i = eta / 2^(p i), N_i = n_i / C users per
group, T_i = N_i m steps, tau_i = 1000 eta_i L sqrt(T_i) ln(n d m), sigma_i = 100 tau_i ln^2(n / delta)
/ (eps C); Thm B.1: J = ln m / ln n, p = J + 3/2, eta = R / (L sqrt(d m n eps)).
Alg. 3: lambda = (L / R)(1 / sqrt(n m) + sqrt(d) / (eps n sqrt m)), p = 3 q + 2.5 + ln m / (2 ln n),
tau = c_tau L ln(n d m) / sqrt m, lambda_i = lambda 2^(p i), T_i = c_T (1 + sqrt(beta / lambda_i))
ln(n d m), K_i = 500 ln(n_i^2 m^2 e^eps / delta)(1 / eps + n_i eps / sqrt(T_i ln(1 / delta))),
sigma_i = 1000 tau sqrt(T_i) ln(n d e^eps / delta) / (eps n_i).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from fedray.core.terms import Accountant
from fedray.privacy.gaussian import analytic_sigma

COUPLING_CONSTANT = 120.0      # c_Delta (spec §5 item 12): Lemma B.2 / C.2 leave the constant unspecified
PAPER_TEST_SCALE = 20.0        # Alg. 1's Lap(20 / eps) as printed
PAPER_MARGIN = 2 / 15          # and its noise margin: a pass with |Lap| < 2C/15 means s >= 2C/3
DERIVED_TEST_SCALE = 8.0       # Lap(8 / eps): the score (sensitivity < 2) at eps / 4


@dataclass(frozen=True)
class Problem:
    """The public inputs every formula reads."""

    users: int                 # n
    items: int                 # m
    dim: int                   # d
    epsilon: float
    delta: float
    lipschitz: float = 1.0     # L
    diameter: float = 1.0      # R
    smoothness: float = 1.0    # beta
    decay: float = 0.1         # q

    @property
    def phases(self) -> int:
        return int(math.floor(math.log2(self.users)))

    def phase_users(self) -> np.ndarray:
        """(l,) n_i = (1 - 2^-q) n / 2^(i q), i = 1..l."""
        i = np.arange(1, self.phases + 1)
        return (1 - 2 ** -self.decay) * self.users / 2 ** (i * self.decay)


@dataclass(frozen=True)
class PhasedSgdSchedule:
    """Alg. 1 (module docstring); per-phase arrays are (l,)."""

    groups: float              # C
    exponent: float            # p
    step_size: float           # eta
    phase_users: np.ndarray    # n_i
    step_sizes: np.ndarray     # eta_i
    group_users: np.ndarray    # N_i
    steps: np.ndarray          # T_i
    thresholds: np.ndarray     # tau_i
    noise_std: np.ndarray      # sigma_i
    gradients: float           # sum_i C N_i m = sum_i n_i m
    users_condition: tuple[float, float]    # (n^(1-q), (100 / (1 - 2^-q)) ln(n / delta) / eps): Thm B.1 needs >=

    @property
    def feasible(self) -> bool:
        """Every group has a user (N_l >= 1) and the users condition holds."""
        return bool(self.group_users[-1] >= 1 and self.users_condition[0] >= self.users_condition[1])


def _sgd_thresholds_noise(problem: Problem, kappa: float, step_sizes: np.ndarray, steps: np.ndarray,
                          groups: float, c_tau: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Alg. 1's tau_i = 1000 c_tau kappa eta_i L sqrt(T_i) ln(n d m) and sigma_i = 100 kappa tau_i
    ln^2(n / delta) / (eps C), for the printed sizes or the rounded ones."""
    n, m, d, eps, delta = problem.users, problem.items, problem.dim, problem.epsilon, problem.delta
    thresholds = c_tau * kappa * 1000 * step_sizes * problem.lipschitz * np.sqrt(steps) * math.log(n * d * m)
    noise = kappa * 100 * thresholds * math.log(n / delta) ** 2 / (eps * groups)
    return thresholds, noise


def coupling_log_failure(problem: Problem, releases: int = 1) -> float:
    """ln(1 / zeta), zeta = delta / (10 e^eps releases): the chance that the coupled filtered means
    of neighbours are further apart than ``coupled_sensitivity`` in one of ``releases`` releases."""
    return math.log(10 * releases / problem.delta) + problem.epsilon


def coupled_sensitivity(threshold, size: int, log_failure: float):
    """Delta = c_Delta tau (7 + 3 ln(1 / zeta)) / K (spec §5 item 12): on a passed test the kept
    points are pairwise within 4 tau, and under coupled coins at most 7 + 3 ln(1 / zeta) of the K
    points change status (1 + Bin(mean <= 6)), each moving the mean by a multiple of tau / K."""
    return COUPLING_CONSTANT * threshold * (7 + 3 * log_failure) / size


DERIVED_MARGIN = 0.1        # Alg. 1 under D: a pass (s + Lap >= 4C/5) with |Lap| < C/10 means s >= 0.7 C


def derived_groups(problem: Problem) -> int:
    """Profile D's C = ceil(80 ln(10 e^eps / delta) / eps): then P(|Lap(8 / eps)| >= C / 10) =
    exp(-C eps / 80) <= zeta = delta / (10 e^eps)."""
    return int(math.ceil(DERIVED_TEST_SCALE / DERIVED_MARGIN * coupling_log_failure(problem) / problem.epsilon))


def phased_sgd_schedule(problem: Problem, kappa: float = 1.0) -> PhasedSgdSchedule:
    """Alg. 1's parameters under profile P (kappa = 1) or X (module docstring)."""
    n, m, d, eps, delta = problem.users, problem.items, problem.dim, problem.epsilon, problem.delta
    L, R = problem.lipschitz, problem.diameter
    groups = kappa * 100 * (math.log(20 * n * m / delta) + eps) / eps
    exponent = math.log(m) / math.log(n) + 1.5
    step = R / (L * math.sqrt(d * m * n * eps))
    users = problem.phase_users()
    steps_i = step / 2 ** (exponent * np.arange(1, problem.phases + 1))
    group_users = users / groups
    steps = group_users * m
    thresholds, noise = _sgd_thresholds_noise(problem, kappa, steps_i, steps, groups)
    condition = (n ** (1 - problem.decay), 100 / (1 - 2 ** -problem.decay) * math.log(n / delta) / eps)
    return PhasedSgdSchedule(groups, exponent, step, users, steps_i, group_users, steps, thresholds, noise,
                             float((users * m).sum()), condition)


@dataclass(frozen=True)
class PhasedSgdLayout:
    """Alg. 1 as it runs (spec §5 item 1): C = ceil(C), N_i = floor(n_i / C), n_i = C N_i, T_i = N_i
    m, with tau_i and sigma_i recomputed at the rounded sizes for the theorem's eta (a step
    multiplier scales eta_i, tau_i and sigma_i alike)."""

    groups: int                # C
    group_users: tuple         # N_i
    steps: tuple               # T_i
    step_sizes: np.ndarray     # eta_i
    thresholds: np.ndarray     # tau_i
    noise_std: np.ndarray      # sigma_i
    test_scale: float = PAPER_TEST_SCALE    # the score's Laplace noise is Lap(test_scale / eps)
    test_margin: float = PAPER_MARGIN       # the proof's noise margin, a fraction of C

    @property
    def phase_users(self) -> tuple:
        return tuple(self.groups * n for n in self.group_users)

    @property
    def gradients(self) -> int:
        """sum_i C N_i m: the gradient evaluations of a run that does not halt."""
        return int(sum(self.groups * t for t in self.steps))


def phased_sgd_layout(problem: Problem, kappa: float = 1.0, profile: str = "paper",
                      c_tau: float = 1.0) -> PhasedSgdLayout:
    """Alg. 1 as it runs under ``profile`` (paper, exploratory with ``kappa``, or derived: module
    docstring); ``c_tau`` multiplies every tau_i (and so sigma_i: privacy holds for any c_tau)."""
    schedule = phased_sgd_schedule(problem, kappa)
    groups = derived_groups(problem) if profile == "derived" else int(math.ceil(schedule.groups))
    group_users = np.floor(schedule.phase_users / groups).astype(np.int64)
    steps = group_users * problem.items
    thresholds, noise = _sgd_thresholds_noise(problem, kappa, schedule.step_sizes, steps, groups, c_tau)
    scale, margin = PAPER_TEST_SCALE, PAPER_MARGIN
    if profile == "derived":
        sensitivity = coupled_sensitivity(1.0, groups, coupling_log_failure(problem))       # per unit of tau_i
        noise = thresholds * analytic_sigma(3 * problem.epsilon / 4, problem.delta / 2, sensitivity)
        scale, margin = DERIVED_TEST_SCALE, DERIVED_MARGIN
    return PhasedSgdLayout(groups, tuple(map(int, group_users)), tuple(map(int, steps)), schedule.step_sizes,
                           thresholds, noise, scale, margin)


def laplace_test_failure(groups: int, epsilon: float, scale: float = PAPER_TEST_SCALE,
                         margin: float = PAPER_MARGIN) -> float:
    """P(|Lap(scale / eps)| >= margin C) = exp(-margin C eps / scale) (exp(-C eps / 150) as printed,
    margin 2/15): the Laplace test's bad event in Alg. 1's proof, which must be <= delta / (10
    e^eps) (spec §5 item 10)."""
    return math.exp(-margin * groups * epsilon / scale)


@dataclass(frozen=True)
class AcceleratedSchedule:
    """Alg. 3 (module docstring); per-phase arrays are (l,)."""

    regularization: float      # lambda
    exponent: float            # p
    threshold: float           # tau
    phase_users: np.ndarray    # n_i
    regularizations: np.ndarray   # lambda_i
    steps: np.ndarray          # T_i
    batch_printed: np.ndarray  # K_i as printed
    batch: np.ndarray          # min(K_i, n_i): what runs
    noise_std: np.ndarray      # sigma_i
    users_condition: tuple[float, float]    # (n^(1-q), 100 ln(20 n m d e^eps / delta) / (eps (1 - 2^-q)))
    cap_condition: np.ndarray  # n_i >= 500 ln(n_i^2 m^2 e^eps / delta) / eps where the cap is active
    items: int                 # m

    @property
    def gradients(self) -> float:
        """sum_i T_i K_i m (no halt)."""
        return float((self.steps * self.batch).sum() * self.items)


def accelerated_schedule(problem: Problem, c_tau: float = 1.0, c_steps: float = 1.0, kappa: float = 1.0,
                         regularization: float | None = None, accelerated: bool = True) -> AcceleratedSchedule:
    """Alg. 3's parameters under profile P (kappa = 1) or X (module docstring); ``regularization``
    replaces Thm C.3's lambda (Thm D.3's (L / R) / sqrt(n m) for the smoothed non-smooth case).
    ``accelerated=False`` is ablation A2 (spec §4.3): plain SGD per phase needs T_i = c_T (1 +
    beta / lambda_i) ln(n d m) steps (the condition number, not its square root)."""
    n, m, d, eps, delta = problem.users, problem.items, problem.dim, problem.epsilon, problem.delta
    L, R, beta, q = problem.lipschitz, problem.diameter, problem.smoothness, problem.decay
    log_ndm = math.log(n * d * m)
    lam = (L / R) * (1 / math.sqrt(n * m) + math.sqrt(d) / (eps * n * math.sqrt(m))) if regularization is None \
        else regularization
    exponent = 3 * q + 2.5 + math.log(m) / (2 * math.log(n))
    tau = c_tau * L * log_ndm / math.sqrt(m)
    users = problem.phase_users()
    lams = lam * 2 ** (exponent * np.arange(1, problem.phases + 1))
    steps = c_steps * (1 + (np.sqrt(beta / lams) if accelerated else beta / lams)) * log_ndm
    log_users = np.log(users**2 * m**2 / delta) + eps
    printed = kappa * 500 * log_users * (1 / eps + users * eps / np.sqrt(steps * math.log(1 / delta)))
    # eps = inf (no privacy): no noise, K_i = n_i
    noise = kappa * 1000 * tau * np.sqrt(steps) * (math.log(n * d / delta) / eps + 1) / users
    condition = (n ** (1 - q), 100 * (math.log(20 * n * m * d / delta) + eps) / (eps * (1 - 2 ** -q)))
    capped = np.minimum(printed, users)
    cap_ok = np.where(printed > users, users >= kappa * 500 * (np.log(users**2 * m**2 / delta) / eps + 1), True)
    return AcceleratedSchedule(lam, exponent, tau, users, lams, steps, printed, capped, noise, condition, cap_ok, m)


def restarts(problem: Problem, strong_convexity: float, most: int = 8) -> tuple[tuple[Problem, ...], float]:
    """Remark 3.6 (FKT20 Sec. 5.1's reduction) for a mu-strongly convex population risk: k runs of
    Alg. 3, run j on n_j = floor(n / k) fresh users, started at run j-1's output, with R replaced
    by D_j, a public bound on its distance to the minimiser; the runs' problems.

    [CHOICE] The paper gives no details. Thm 3.2's bound is read with constant 1 and no logs, as
    the shape of Thm C.3's lambda: a run from distance D has excess risk Delta = L D rho(n_j), rho
    = 1 / sqrt(n_j m) + sqrt(d) / (eps n_j sqrt m), so mu-strong convexity gives the next distance
    D' = sqrt(2 Delta / mu) = sqrt(D D*), with fixed point D* = 2 L rho / mu. From D_1 = R, D_j =
    R^(2^(1-j)) D*^(1 - 2^(1-j)): k is the fewest runs with D_k <= 2 D* (log2 log2 (R / D*) + 1),
    so the last run's excess L D_k rho <= mu D*^2 = (4 L^2 / mu) rho^2, Remark 3.6's (L^2 / mu)
    (1 / (n m) + d / (eps^2 n^2 m)) at n / k users. k stops short of that (at ``most`` runs, or
    where one more run would leave a phase without a user) on too few users: the caller compares
    D_k with 2 D*. Returns the runs' problems and D* of their n / k users. Everything here is
    public; privacy does not depend on mu being right (the runs read disjoint users: parallel
    composition)."""
    n, m, d, eps, lip = problem.users, problem.items, problem.dim, problem.epsilon, problem.lipschitz
    for count in range(1, most + 1):
        users = n // count
        rate = 1 / math.sqrt(users * m) + math.sqrt(d) / (eps * users * math.sqrt(m))
        fixed_point = 2 * lip * rate / strong_convexity
        radii = [problem.diameter]
        for _ in range(count - 1):
            radii.append(min(radii[-1], math.sqrt(radii[-1] * fixed_point)))
        more = dataclasses.replace(problem, users=n // (count + 1))
        if radii[-1] <= 2 * fixed_point or more.users < 2 or np.floor(more.phase_users()).min() < 1:
            break
    return tuple(dataclasses.replace(problem, users=users, diameter=r) for r in radii), fixed_point


def smoothed(problem: Problem) -> tuple[Problem, float]:
    """Thm D.3's smoothed problem for a non-smooth loss: radius r = sqrt(d) R / (eps n sqrt m), so
    beta_r = L sqrt(d) / r = (L / R) eps n sqrt m, and lambda = (L / R) / sqrt(n m)."""
    n, m, L, R = problem.users, problem.items, problem.lipschitz, problem.diameter
    beta = (L / R) * problem.epsilon * n * math.sqrt(m)
    return Problem(n, m, problem.dim, problem.epsilon, problem.delta, L, R, beta, problem.decay), \
        (L / R) / math.sqrt(n * m)


def smoothing_radius(problem: Problem) -> float:
    """Thm D.3's r = sqrt(d) R / (eps n sqrt m): f <= f_r <= f + L r (Jensen; Lemma D.1 prints the
    reverse order), so the smoothing costs at most L r = L R sqrt(d) / (eps n sqrt m), the privacy
    term of the optimal rate."""
    return math.sqrt(problem.dim) * problem.diameter / (problem.epsilon * problem.users * math.sqrt(problem.items))


def order_gradients(problem: Problem, regularization: float | None = None) -> float:
    """sum_i T_i K_i m by the log-free order calculator (spec §6 T3): T_i = ceil(1 + sqrt(beta /
    lambda_i)), K_i = n_i eps / sqrt(T_i) + 1 / eps, with Thm C.3's p and lambda (or the one given); no cap."""
    schedule = accelerated_schedule(problem, regularization=regularization)
    steps = np.ceil(1 + np.sqrt(problem.smoothness / schedule.regularizations))
    batch = schedule.phase_users * problem.epsilon / np.sqrt(steps) + 1 / problem.epsilon
    return float((steps * batch).sum() * problem.items)


def feasibility(problem: Problem, kappa: float = 1.0, algorithms: tuple = (1, 3)) -> list[str]:
    """What the profile's numbers mean at this size for Alg. 1 and / or Alg. 3, in words (spec
    §4.1): a run's output states them rather than silently running noise."""
    notes = (_phased_sgd_notes(problem, kappa) if 1 in algorithms else []) + \
        (accelerated_notes(accelerated_schedule(problem, kappa=kappa), problem.dim) if 3 in algorithms else [])
    return notes


def _phased_sgd_notes(problem: Problem, kappa: float) -> list[str]:
    sgd, diameter, root_d = phased_sgd_schedule(problem, kappa), problem.diameter, math.sqrt(problem.dim)
    notes = [f"Alg. 1: {len(sgd.phase_users)} phases of C = {sgd.groups:.4g} groups; the first phase's output "
             f"noise has norm ~ {sgd.noise_std[0] * root_d / diameter:.3g} R"
             + (" (pure noise)" if sgd.noise_std[0] * root_d > diameter else "")]
    if not sgd.feasible:
        notes.append(f"Alg. 1 is infeasible: the last phase has {sgd.group_users[-1]:.3g} users per group "
                     f"(needs >= 1), or n^(1-q) = {sgd.users_condition[0]:.4g} < {sgd.users_condition[1]:.4g}")
    return notes


def accelerated_notes(acc: AcceleratedSchedule, dim: int) -> list[str]:
    """``feasibility``'s notes on one Alg. 3 schedule."""
    root_d, notes = math.sqrt(dim), []
    capped = int((acc.batch_printed > acc.phase_users).sum())
    notes.append(f"Alg. 3: K_i > n_i in {capped} of {len(acc.phase_users)} phases (capped at n_i: every user every "
                 f"step); the first phase's gradient noise has norm ~ {acc.noise_std[0] * root_d:.3g} (tau = "
                 f"{acc.threshold:.3g})")
    if not np.all(acc.cap_condition):
        notes.append("Alg. 3: where the cap is active, n_i < 500 ln(n_i^2 m^2 e^eps / delta) / eps in "
                     f"{int((~acc.cap_condition).sum())} phases: the good event's bound does not hold there")
    if acc.users_condition[0] <= acc.users_condition[1]:
        notes.append(f"Alg. 3 needs n^(1-q) = {acc.users_condition[0]:.4g} > {acc.users_condition[1]:.4g} users")
    return notes


@dataclass(frozen=True)
class PhaseLayout:
    """Alg. 3's schedule as it runs (spec §5 item 1): n_i = floor, T_i = ceil, K_i = min(ceil(K_i), n_i)."""

    users: tuple               # n_i
    steps: tuple               # T_i
    batch: tuple               # K_i

    @property
    def gradients_per_item(self) -> int:
        """sum_i T_i K_i: times m, the gradient evaluations of a run that does not halt."""
        return int(sum(t * k for t, k in zip(self.steps, self.batch)))


def phase_layout(schedule: AcceleratedSchedule) -> PhaseLayout:
    users = np.floor(schedule.phase_users).astype(np.int64)
    steps = np.ceil(schedule.steps).astype(np.int64)
    batch = np.minimum(np.ceil(schedule.batch_printed), users).astype(np.int64)
    return PhaseLayout(tuple(map(int, users)), tuple(map(int, steps)), tuple(map(int, batch)))


def layout_noise_std(schedule: AcceleratedSchedule, layout: PhaseLayout) -> np.ndarray:
    """(l,) sigma_i of the phases as they run: the printed formula at ceil(T_i) and floor(n_i)
    (sigma_i grows as sqrt(T_i) / n_i, so the rounded sizes need up to a few % more noise)."""
    return schedule.noise_std * np.sqrt(np.asarray(layout.steps) / schedule.steps) \
        * (schedule.phase_users / np.asarray(layout.users))


def derived_batch(problem: Problem, schedule: AcceleratedSchedule) -> AcceleratedSchedule:
    """Profile D's users per step (spec §5 item 12): the good event's K_i >= (320 / eps) ln(10
    e^eps (T_i + 1) / delta) and the accuracy proof's T_i K_i >= n_i, capped at n_i. Lemma D.2's
    n_i eps / sqrt(T_i) term is dropped: it serves the subsampling credit, which D does not take
    (``derived_noise``). ``cap_condition`` is whether the good event's K_i fits in n_i."""
    eps, delta, users, steps = problem.epsilon, problem.delta, schedule.phase_users, schedule.steps
    good = 320 * (np.log(10 * (steps + 1) / delta) + eps) / eps
    wanted = np.maximum(good, users / steps)
    return dataclasses.replace(schedule, batch_printed=wanted, batch=np.minimum(wanted, users),
                               cap_condition=users >= good)


def derived_noise(problem: Problem, threshold: float, layout: PhaseLayout) -> tuple[np.ndarray, np.ndarray]:
    """Profile D's (sigma_i, z_i) per phase (spec §5 item 12): sigma_i = z_i Delta_i, Delta_i =
    c_Delta tau (7 + 3 ln(1 / zeta_i)) / K_i with zeta_i = delta / (10 e^eps T_i) (one coupling per
    step), and z_i the smallest noise multiplier for which T_i Gaussian releases are (eps / 2,
    delta / 2)-DP by the PLD accountant. No credit is taken for sampling K_i of the n_i users: each
    step's test reads the same secret batch, and the sparse vector's proof does not compose with
    amplification by sampling (the paper's Lemma A.8 step leaves that gap), so the releases are
    priced as if every step read every user. AboveThreshold's pure eps / 2 composes with them; on
    the steps where both neighbours' scores are under 0.7 K the test halts on both sides but for the
    good event's failure gamma, so delta / 2 + T_i zeta_i + (1 + e^eps) gamma <= 0.8 delta."""
    from fedray.privacy.accounting import calibrate_noise_multiplier      # dp-accounting: only when D runs

    eps, delta = problem.epsilon, problem.delta
    multipliers = np.array([calibrate_noise_multiplier(eps / 2, delta / 2, n, n, 1, t, Accountant.PLD)
                            for n, t in zip(layout.users, layout.steps)])
    sensitivity = np.array([coupled_sensitivity(threshold, k, coupling_log_failure(problem, t))
                            for t, k in zip(layout.steps, layout.batch)])
    return multipliers * sensitivity, multipliers


def stage_lengths(steps: int, smoothness: float, strong_convexity: float, variance: float,
                  initial_gap: float) -> tuple[int, ...]:
    """GL13's multi-stage AC-SA within a phase's ``steps`` oracle calls (spec §2.2): stage k runs
    N_k = ceil(max(4 sqrt(2 Ls / mu), 128 V^2 / (3 mu V_0 2^-(k+1)))) steps, the last one truncated,
    with Ls = ``smoothness``, mu = ``strong_convexity``, V^2 = ``variance`` (d sigma_i^2 +
    L^2 ln(ndm) / (K_i m)) and V_0 = ``initial_gap`` (L R). Public inputs only."""
    floor = 4 * math.sqrt(2 * smoothness / strong_convexity)
    lengths, left, k = [], int(steps), 1
    while left > 0:
        wanted = max(floor, 128 * variance / (3 * strong_convexity * initial_gap * 2.0 ** -(k + 1)))
        length = min(left, int(math.ceil(wanted)) if math.isfinite(wanted) else left)
        lengths.append(length)
        left, k = left - length, k + 1
    return tuple(lengths)


def good_event_failure(batch: int, steps: int, epsilon: float) -> float:
    """An upper bound on P(E_i^c), E_i: the pass level's and every step's Laplace noise within
    K_i / 20 (spec §6 T6(b)): exp(-K_i eps / 160) + T_i exp(-K_i eps / 320). The proof needs
    it <= delta / (10 e^eps)."""
    return math.exp(-batch * epsilon / 160) + steps * math.exp(-batch * epsilon / 320)


def privacy_conditions(problem: Problem, schedule: AcceleratedSchedule, layout: PhaseLayout,
                       profile: str = "paper") -> list[str]:
    """The conditions of Thm 3.1 / C.1 (and its proof's good event) that fail at this size, in
    words; empty when the (eps, delta) claim holds as the paper proves it. Profile derived needs
    only the good event (its noise comes from an accountant, for any eps)."""
    eps = problem.epsilon
    failed = []
    if profile == "derived":
        return good_event_failures(problem, layout)
    if eps > 10:
        failed.append(f"eps = {eps:g} > 10")
    if eps > 2:
        failed.append(f"eps / 2 = {eps / 2:g} > 1: the classic Gaussian calibration (Def. A.5) holds for budgets <= 1 "
                      "(spec §5 item 13)")
    have, need = schedule.users_condition
    if have <= need:
        failed.append(f"n^(1-q) = {have:.4g} <= 100 ln(20 n m d e^eps / delta) / (eps (1 - 2^-q)) = {need:.4g}")
    if not np.all(schedule.cap_condition):
        failed.append(f"K_i capped at n_i < 500 ln(n_i^2 m^2 e^eps / delta) / eps in "
                      f"{int((~schedule.cap_condition).sum())} of {len(layout.users)} phases")
    return failed + good_event_failures(problem, layout)


def good_event_failures(problem: Problem, layout: PhaseLayout) -> list[str]:
    """The phases where P(the Laplace noises exceed K_i / 20) > delta / (10 e^eps), in words."""
    bound = problem.delta / (10 * math.exp(min(problem.epsilon, 700.0)))
    bad = [i + 1 for i, (k, t) in enumerate(zip(layout.batch, layout.steps))
           if good_event_failure(k, t, problem.epsilon) > bound]
    if not bad:
        return []
    return [f"P(the Laplace noises exceed K_i / 20) > delta / (10 e^eps) in phases {bad[:5]}"
            + (" ..." if len(bad) > 5 else "")]
