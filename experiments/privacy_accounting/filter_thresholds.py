"""Seed 002's Alg. 3 (outlier-gradient removal): the printed noise against the derived one.

Per setting of E4 (m = 64 items, d = 10, L = 1, R = 2, delta = 1e-5; n and eps as run there),
the first phase's threshold tau, users n_1, steps T_1, the printed sigma_1 = 1000 tau sqrt(T_1)
ln(n d e^eps / delta) / (eps n_1) (profile paper), the derived profile's K_1 (the good event's
batch) and its sigma_1 = z c_Delta tau (7 + 3 ln(1 / zeta)) / K_1 with z from the PLD accountant
for T_1 Gaussian releases at (eps / 2, delta / 2) and c_Delta = 120 (the spec's conservative
value for Lemma B.2 / C.2's unstated constant), their ratio, and what c_Delta = 40 (the kept
points' diameter 4 tau over the |S| >= 0.1 K kept ones, the sketch's own arithmetic without its
cross-set allowance) would give. Neither derived value is a proved guarantee: the paper states
the filtered mean's sensitivity only as O(tau log(1/zeta) / K).

    python experiments/privacy_accounting/filter_thresholds.py
"""

from __future__ import annotations

from fedray.protocols.user_level.phased_parameters import (
    COUPLING_CONSTANT, Problem, accelerated_schedule, derived_batch, derived_noise, layout_noise_std, phase_layout,
)

SETTINGS = [(2000, 1.0), (8000, 1.0), (32000, 1.0), (8000, 4.0)]


def row(users: int, epsilon: float) -> dict:
    problem = Problem(users, 64, 10, epsilon, 1e-5, 1.0, 2.0, 1.0)
    printed = accelerated_schedule(problem)
    paper_sigma = layout_noise_std(printed, phase_layout(printed))[0]
    schedule = derived_batch(problem, printed)
    layout = phase_layout(schedule)
    sigma, _ = derived_noise(problem, schedule.threshold, layout)
    return {"n": users, "eps": epsilon, "tau": printed.threshold, "n_1": layout.users[0], "T_1": layout.steps[0],
            "K_1": layout.batch[0], "paper": paper_sigma, "derived": sigma[0], "ratio": paper_sigma / sigma[0],
            "derived_40": sigma[0] * 40.0 / COUPLING_CONSTANT}


def main() -> None:
    print(f"{'n':>6}{'eps':>5}{'tau':>8}{'n_1':>7}{'T_1':>5}{'K_1':>6}{'sigma paper':>13}{'sigma derived':>15}"
          f"{'paper/derived':>15}{'c_Delta=40':>12}")
    for users, epsilon in SETTINGS:
        r = row(users, epsilon)
        print(f"{r['n']:>6}{r['eps']:>5g}{r['tau']:>8.3f}{r['n_1']:>7}{r['T_1']:>5}{r['K_1']:>6}{r['paper']:>13.4g}"
              f"{r['derived']:>15.4g}{r['ratio']:>15.3g}{r['derived_40']:>12.4g}")


if __name__ == "__main__":
    main()
