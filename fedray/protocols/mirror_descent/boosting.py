"""Seed-001 Alg. 4: boosting Alg. 3 to high probability (Thm 3.20, spec §3.4), as a driver-side
program (``fedray.core.program``).

Trust model: central DP (a trusted curator). Unit: one sample; relation: replace one.

Split (data-independent, by sample id): four quarters S1..S4 of q = floor(n / 4) samples; S1 into
I parts of floor(q / I), S2 and S3 into I J parts of floor(q / (I J)) (a remainder is left unused).
With beta the failure probability, I = ceil(log2(4 / beta)) and J = ceil(log2(8 I / beta)).

1. (x_i, y_i) = Alg. 3 on part i of S1, at (eps, delta) for that part's size.
2. x_ij minimises F(., y_i) on part ij of S2 and y_ij maximises F(x_i, .) on part ij of S3, each
   by the DP-SCO stand-in: DP Frank-Wolfe at (eps, delta) (``frank_wolfe``). The paper's
   subroutine (Asi et al. 2021, Alg. 3) is not described there; the stand-in changes Thm 3.20's
   C1 and C2 (spec §6 item 15), and every run says so.
3. G_i = max_j F_S4(x_i, y_ij) - min_j F_S4(x_ij, y_i) on S4 (F_S4 the mean over S4) and
   i* ~ exp(-eps |S4| G_i / (8 Bf)), the exponential mechanism for G_i's sensitivity 4 Bf / |S4|
   (|f| <= Bf; with |S4| = n / 4 the paper's exp(-n eps G_i / (32 Bf))). Release (x_i*, y_i*).

Privacy: every sample is read by exactly one of the (eps, delta)-DP runs or by the eps-DP
selection, and each run reads only its part and earlier outputs; by parallel composition the
program is (eps, delta)-DP. The ledger charges one such release per replica. Released: the output
pair, the index i* and the sub-runs' draw counts (functions of the public levels); every sub-run's
draws stay inside the program, and the scores G_i (read from S4) are diagnostics.

Runtime: the sub-runs of a stage run at once, replica p's part i as the sub-algorithm's replica
p I + i (stage 2: (p I + i) J + j), each reading its own range of sample ids in every round
through the oracle (one call per actor per round for every replica and part). Sub-runs draw
from their own keys: the program's, with each replica's stream key extended by (stage, part) and
its repetition by the part (``Boosting.sub_keys``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fedray.core.evaluation import Metric
from fedray.core.program import ProgramRun
from fedray.core.protocol import RoundKeys
from fedray.protocols.mirror_descent.bias_reduced_smd import BiasReducedSMD
from fedray.protocols.mirror_descent.calibration import boosting_split
from fedray.protocols.mirror_descent.evaluation import GapEvaluation
from fedray.protocols.mirror_descent.frank_wolfe import PrivateFrankWolfe
from fedray.protocols.mirror_descent.planning import Boosted
from fedray.rng import Stream

STAGE_SSP, STAGE_X, STAGE_Y = 1, 2, 3          # stream coordinates of the sub-runs' draws
VALUE_CHUNK = 4096                             # samples per block of the selection's value sums


def _take(tree, rows: np.ndarray):
    """The replicas ``rows`` of a broadcast (an array or a tuple of arrays, replicas first)."""
    return tuple(part[rows] for part in tree) if isinstance(tree, tuple) else tree[rows]


def range_sums(samples, step, broadcast, spans: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """In an actor: for each group of replicas reading the same ids [lo, hi) (``spans`` (P, 2)),
    ``step``'s sum over the samples of that range held here, as (replica rows, (rows, width))."""
    ids = samples.ids
    low, high = np.searchsorted(ids, spans[:, 0]), np.searchsorted(ids, spans[:, 1])
    pairs, inverse = np.unique(np.stack([low, high], axis=1), axis=0, return_inverse=True)
    out = []
    for group, (a, b) in enumerate(pairs):
        if b <= a:
            continue
        rows = np.flatnonzero(inverse.reshape(-1) == group)
        out.append((rows, step(_take(broadcast, rows), samples.select(np.arange(a, b)), None,
                               np.ones((rows.size, b - a), dtype=bool))))
    return out


def run_on_ranges(oracle, algorithm, state, spans_of, keys: RoundKeys) -> tuple[Any, np.ndarray]:
    """Run a curator algorithm (``broadcast``/``silo_step``/``server_step``/``done``/``releases``)
    whose replica r reads the sample ids ``spans_of(state, round)[r]`` = [lo, hi) each round, its
    server step given round t's keys (``keys.at(t)``); (the end state, (P,) the releases of every
    round run per replica)."""
    rounds, released = 0, np.zeros((), dtype=np.int64)
    while not np.all(algorithm.done(state)):
        spans = np.asarray(spans_of(state, rounds), dtype=np.int64)
        summed = None
        for parts in oracle.map(range_sums, algorithm.silo_step, algorithm.broadcast(state), spans):
            for rows, part in parts:
                if summed is None:
                    summed = np.zeros((spans.shape[0],) + part.shape[1:])
                summed[rows] += part
        released = released + np.asarray(algorithm.releases(state), dtype=np.int64)
        state = algorithm.server_step(state, summed, keys.at(rounds))
        rounds += 1
    return state, released


def value_sums(samples, lo: int, hi: int, points: np.ndarray, columns: int) -> np.ndarray | None:
    """In an actor: sum over its samples with ids in [lo, hi) of grad_y f(x, .; z) for each row x
    of ``points`` (R, dx). Every game here is linear in y (bilinear, or sum_i y_i l_i), so
    F_S(x, y) = <y, this sum> / |S|."""
    ids = samples.ids
    a, b = int(np.searchsorted(ids, lo)), int(np.searchsorted(ids, hi))
    total = None
    for start in range(a, b, VALUE_CHUNK):
        chunk = samples.select(np.arange(start, min(b, start + VALUE_CHUNK)))
        part = chunk.gradient_sums(points, np.full((points.shape[0], columns), 1.0 / columns))[1]
        total = part if total is None else total + part
    return total


def selection_probabilities(scores: np.ndarray, epsilon: float, size: int, value_bound: float) -> np.ndarray:
    """(P, I) the exponential mechanism's law of i* for scores G (P, I) on ``size`` samples:
    G_i moves by at most 4 Bf / size when one sample is replaced, so P[i] ~ exp(-eps G_i / (2 * 4 Bf
    / size)) is eps-DP."""
    logits = -epsilon * size * scores / (8 * value_bound)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class Boosting:
    """The program (module docstring). ``ssp`` holds Alg. 3's parameters for a part of S1,
    ``sco_rounds`` and ``sco_epsilon`` the stand-in's rounds and per-draw epsilon for a part of S2
    or S3."""

    epsilon: float                 # the selection's budget
    num_units: int
    runs: int                      # I
    checks: int                    # J
    rows: int
    columns: int
    value_bound: float             # Bf
    lipschitz: float
    ssp_step_size: float
    ssp_levels: int
    ssp_sampler: Any            # LeveledBatches of a part of S1
    sco_rounds: int
    sco_epsilon: float
    constants: dict = field(default_factory=dict)

    recipe: ClassVar[Boosted] = Boosted()

    @property
    def sizes(self) -> tuple[int, int, int]:
        return boosting_split(self.num_units, self.runs, self.checks)

    @staticmethod
    def sub_keys(keys: RoundKeys, stage: int, parts: int) -> RoundKeys:
        """The keys of a stage's P parts sub-runs (replica p's part i is sub-replica p parts + i), at
        round 0: stream keys (replica's key, stage, part), repetitions (replica's repetition) parts + part
        (which key the public levels of stage 1's runs)."""
        p = keys.streams.shape[0]
        tail = np.stack([np.full(p * parts, stage), np.tile(np.arange(parts), p)], axis=1)
        streams = np.concatenate([np.repeat(keys.streams, parts, axis=0), tail], axis=1)
        repetitions = np.repeat(keys.repetitions, parts) * parts + np.tile(np.arange(parts), p)
        return RoundKeys(keys.seed, repetitions, 0, streams)

    def candidates(self, oracle, keys: RoundKeys) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stage 1: (x_i (P, I, dx), y_i (P, I, dy), (P,) the draws each replica's I runs released)."""
        p, runs = keys.streams.shape[0], self.runs
        _, part, _ = self.sizes
        sub = self.sub_keys(keys, STAGE_SSP, runs)
        algorithm = BiasReducedSMD(step_size=np.full(p * runs, self.ssp_step_size), levels=self.ssp_levels,
                                   rows=self.rows, columns=self.columns, sampler=self.ssp_sampler,
                                   num_rounds=int(self.ssp_sampler.stop))
        offsets = np.tile(np.arange(runs), p) * part

        def spans(state, round_index: int) -> np.ndarray:
            out = np.repeat(offsets[:, None], 2, axis=1)
            for v, rep in enumerate(sub.repetitions):
                units = self.ssp_sampler.batch(sub.seed, int(rep), round_index, part)
                if units is not None and state.level[v] >= 0:
                    out[v] = offsets[v] + np.array(units)
            return out

        state, released = run_on_ranges(oracle, algorithm, algorithm.init(np.zeros((p * runs, 1)), sub), spans, sub)
        packed = algorithm.output(state)["output"]
        return (packed[:, :self.rows].reshape(p, runs, self.rows),
                packed[:, self.rows:].reshape(p, runs, self.columns), released.reshape(p, runs).sum(axis=1))

    def checked(self, oracle, x: np.ndarray, y: np.ndarray, keys: RoundKeys) -> tuple[np.ndarray, np.ndarray]:
        """Stage 2: (x_ij (P, I, J, dx) against y_i on S2, y_ij (P, I, J, dy) against x_i on S3)."""
        p, runs, checks = x.shape[0], self.runs, self.checks
        quarter, _, part = self.sizes
        parts = runs * checks
        out = []
        for player, stage, start, opponent, width in (("x", STAGE_X, quarter, y, self.rows),
                                                       ("y", STAGE_Y, 2 * quarter, x, self.columns)):
            algorithm = PrivateFrankWolfe(round_epsilon=self.sco_epsilon, num_samples=part, num_steps=self.sco_rounds,
                                          rows=width, lipschitz=self.lipschitz, player=player,
                                          opponent=np.repeat(opponent.reshape(p * runs, -1), checks, axis=0))
            lows = start + np.tile(np.arange(parts), p) * part
            spans = np.stack([lows, lows + part], axis=1)
            sub = self.sub_keys(keys, stage, parts)
            state, _ = run_on_ranges(oracle, algorithm, algorithm.init(np.zeros((p * parts, 1)), sub),
                                     lambda *_: spans, sub)
            out.append(state.theta.reshape(p, runs, checks, width))
        return out[0], out[1]

    def scores(self, oracle, x, y, x_checks, y_checks) -> np.ndarray:
        """(P, I) G_i on S4 (module docstring)."""
        quarter = self.sizes[0]
        p, runs, checks = x_checks.shape[:3]
        points = np.concatenate([x.reshape(-1, self.rows), x_checks.reshape(-1, self.rows)])
        parts = [part for part in oracle.map(value_sums, 3 * quarter, 4 * quarter, points, self.columns)
                 if part is not None]
        grads = sum(parts) / quarter                                                   # (R, dy)
        at_candidates = grads[:p * runs].reshape(p, runs, 1, self.columns)
        at_checks = grads[p * runs:].reshape(p, runs, checks, self.columns)
        best_response_y = (at_candidates * y_checks).sum(axis=-1).max(axis=2)          # max_j F(x_i, y_ij)
        best_response_x = (at_checks * y[:, :, None, :]).sum(axis=-1).min(axis=2)       # min_j F(x_ij, y_i)
        return best_response_y - best_response_x

    def run(self, oracle, keys: RoundKeys) -> ProgramRun:
        x, y, released = self.candidates(oracle, keys)
        x_checks, y_checks = self.checked(oracle, x, y, keys)
        scores = self.scores(oracle, x, y, x_checks, y_checks)
        p = scores.shape[0]
        probabilities = selection_probabilities(scores, self.epsilon, self.sizes[0], self.value_bound)
        chosen = np.array([keys.generator(Stream.SERVER, r).choice(self.runs, p=probabilities[r]) for r in range(p)])
        rows = np.arange(p)
        output = np.concatenate([x[rows, chosen], y[rows, chosen]], axis=1)
        metrics = {"chosen_run": Metric(chosen.astype(np.float64), released=True),
                   "alg3_draws": Metric(released.astype(np.float64), released=True),     # public levels only
                   "score_chosen": Metric(scores[rows, chosen], released=False),
                   "score_best": Metric(scores.min(axis=1), released=False)}
        return ProgramRun({"output": output}, np.ones((p, 1), dtype=np.int64), metrics)

    def evaluate(self, models: np.ndarray, federation) -> dict:
        return GapEvaluation(self.rows).shard_parts(models, federation)

    def combine(self, parts: list[dict]) -> dict:
        return GapEvaluation(self.rows).combine(parts, self.num_units)

