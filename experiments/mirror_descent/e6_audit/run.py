"""E6: the replay audit of seed 001's vertex sampling (spec §5 E6, §7 test 8): the exact privacy
loss of every released draw of Alg. 1 on a pair of neighbouring datasets.

A worst-case pair: the padded bilinear game's samples (``fedray.data.PaddedMatrixGame``, L0 = 1)
with one sample set to the payoff L0 s 1^T in S and to -L0 s 1^T in S', s = (+1, -1, +1, ...):
whichever vertex y is drawn, that sample's gradient A y moves by exactly 2 L0 in every
coordinate, with both signs (a shift softmax does not cancel), and likewise for A^T x with the
roles swapped (the payoff's columns differ only in sign, rows are s_i 1^T). Any payoff with
entries in [-L0, L0] is in the data universe, so the pair is a legitimate neighbouring pair. The
replaced sample sits in the first batch (``first``: its effect reaches every later draw) or in
the middle one (``middle``). S' replays S's released
draws (``fedray.protocols.mirror_descent.audit.replay_audit``): at every step both runs take the
same query points, and the two score vectors give the exact log-likelihood ratio of the next
draws. Deterministic given the draws; 20 replicas give 20 draw paths.

Per cell: the largest score gap over the bound 2 tau L0 / B, the largest per-draw loss over the
bound 4 tau L0 / B, the realised losses composed as Thm 3.5's quantity against the plan's
composed epsilon (Cor. 3.6 at the per-draw bound) and the target eps. Writes results.csv and
figure.png next to this file.

    python experiments/mirror_descent/e6_audit/run.py
    python experiments/mirror_descent/e6_audit/run.py --quick
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from fedray.data import PaddedMatrixGame  # noqa: E402
from fedray.privacy.composition import pure_advanced_composition  # noqa: E402
from fedray.core.protocol import RoundKeys  # noqa: E402
from fedray.protocols.mirror_descent.audit import replay_audit  # noqa: E402
from fedray.protocols.mirror_descent.calibration import bound_schedule, draw_epsilon, sgd_schedule  # noqa: E402
from fedray.protocols.mirror_descent.simplex import VertexDraws  # noqa: E402
from fedray.protocols.mirror_descent.smd import PrivateSMD  # noqa: E402

DELTA = 1e-6
REPLICAS = 20


def worst_case_payoff(game) -> np.ndarray:
    """L0 s 1^T with alternating signs s (module docstring); the neighbour takes its negative."""
    signs = np.where(np.arange(game.dim) % 2 == 0, 1.0, -1.0)
    return game.lipschitz * np.outer(signs, np.ones(game.dim))


def run_cell(n: int, d: int, eps: float, rule: str, where: str, replicas: int) -> tuple[dict, np.ndarray, object]:
    game = PaddedMatrixGame(num_samples=n, dim=d)
    schedule = (sgd_schedule("bilinear", n, eps, DELTA, d, d, game.lipschitz) if rule == "paper" else
                bound_schedule("bilinear", n, eps, DELTA, d, d, game.lipschitz, game.lipschitz, 0.0))
    alg = PrivateSMD(np.full(replicas, schedule.step_size), schedule.batch_size, schedule.num_steps, d, d,
                     VertexDraws(schedule.draws))
    keys = RoundKeys(0, np.zeros(replicas, dtype=np.int64), 0, np.arange(replicas)[:, None])
    samples = game.load(seed=0)
    target = 0 if where == "first" else (schedule.num_steps // 2) * schedule.batch_size
    start = time.perf_counter()
    payoff = worst_case_payoff(game)
    audit = replay_audit(alg, keys, samples.replace(target, payoff), samples.replace(target, -payoff), game.lipschitz,
                         DELTA)
    per_draw = draw_epsilon(schedule.step_size, game.lipschitz, schedule.batch_size)
    planned = float(pure_advanced_composition(per_draw, audit.draws, DELTA)[0])
    row = {"n": n, "d": d, "eps": eps, "rule": rule, "replaced": where, "T": schedule.num_steps, "B": schedule.batch_size,
           "tau": schedule.step_size, "replicas": replicas,
           "score_gap_over_bound_max": float((audit.score_gap / audit.score_bound).max()),
           "draw_loss_over_bound_max": float((audit.draw_loss / audit.draw_bound).max()),
           "draw_loss_over_bound_mean": float((audit.draw_loss[:-1] / audit.draw_bound).mean()),
           "composed_realised_max": float(audit.composed.max()), "composed_planned": planned, "target_eps": eps,
           "seconds": time.perf_counter() - start}
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    return row, audit.draw_loss / audit.draw_bound, audit


def figure(curves: list[tuple[str, np.ndarray]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    for label, ratio in curves:
        steps = np.arange(1, ratio.shape[0] + 1) / ratio.shape[0]
        ax.plot(steps, ratio.max(axis=1), label=label, lw=1)
    ax.axhline(1.0, color="k", ls="--", lw=1, label="per-draw bound 4 tau L0 / B")
    ax.set(xlabel="step / T", ylabel="exact per-draw loss / bound (max over replicas)", ylim=(0, 1.1))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 1e4, d = 16, 5 replicas")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    n, dims, replicas = (10**4, (16,), 5) if args.quick else (10**5, (16, 256), REPLICAS)
    rows, curves = [], []
    started = time.perf_counter()
    for d in dims:
        for eps in (1.0, 3.0):
            for rule in ("paper", "bound"):
                for where in ("first", "middle"):
                    row, ratio, _ = run_cell(n, d, eps, rule, where, replicas)
                    rows.append(row)
                    if where == "first" and eps == 3.0:
                        curves.append((f"d = {d}, eps = 3, {rule} rule", ratio))
    with open(args.out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    figure(curves, args.out / "figure.png")
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
