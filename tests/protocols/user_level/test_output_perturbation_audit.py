"""Black-box audit of seed 003's user-level output perturbation (``OutputPerturbation``, issue 39
item 5) on a neighbouring pair that attains its sensitivity.

The pair: n = 50 users holding their mean item (``fedray.data.BinomialUserMeans``, d = 1) under
the linear loss -y <x, W> (G = 1, no curvature) with lambda = 0.1; in D user 0's items are all -1,
in D' all +1. The ridge minimiser is the users' mean item over lambda, so the two certified
minimisers are 2 G / (lambda n) = 0.4 apart: the whole sensitivity Delta = 2G/(lambda n) +
2 tau/lambda (tau = 1e-9) but for 2e-8. The program (planned, built and run by the real code:
the solver through the oracle, then each replica's own noise) releases W^ + N(0, sigma^2) once
per replica; every replica is one draw of the audit, each call of the sampler one program run.
"""

from dataclasses import dataclass, replace

import numpy as np
import pytest

from fedray.core.protocol import RoundKeys
from fedray.data import BinomialUserMeans
from fedray.plan import make_plan
from fedray.privacy import audit_epsilon
from fedray.runtime.driver import InlineGroups
from tests.conftest import compose

EPS, DELTA, DRAWS = 1.5, 1e-5, 50_000
CONFIG = ["experiment=sc_output_pert_means", "algorithm=output_perturbation", "data.spec.num_silos=50",
          "privacy.calibration=accountant", f"privacy.epsilon={EPS}", f"privacy.delta={DELTA}", "progress=false"]


@dataclass(frozen=True)
class MovedUser(BinomialUserMeans):
    """BinomialUserMeans with every item of user ``moved`` equal to ``value`` / sqrt(d)."""

    moved: int = 0
    value: float = 1.0

    def load(self, seed: int, trial: int = 0, silo_ids=None):
        federation = super().load(seed, trial, silo_ids)
        ids = np.arange(self.num_silos) if silo_ids is None else np.asarray(silo_ids)
        federation.x_train[ids == self.moved] = self.value / np.sqrt(self.dim)
        return federation


def neighbour_programs():
    """The planned program built on D (user 0 at -1) and on D' (user 0 at +1), with their oracles."""
    plan = make_plan(compose(*CONFIG))
    programs = []
    for value in (-1.0, 1.0):
        neighbour = replace(plan, dataset=MovedUser(**vars(plan.dataset), value=value))
        oracle = InlineGroups(neighbour)
        programs.append((neighbour.protocol.build(oracle), oracle))
    return plan, programs


def release_sampler(programs, noise_scale: float):
    """``sample(flag, draws, rng)``: ``draws`` replicas of the program's release on D (flag 0) or D'
    (flag 1), with the planned sigma times ``noise_scale``."""

    def sample(flag, num_draws, rng):
        program, oracle = programs[flag]
        sigma = float(program.noise.noise_std[0]) * noise_scale
        streams = np.stack([np.full(num_draws, int(rng.integers(2**31))), np.arange(num_draws)], axis=1)
        keys = RoundKeys(int(rng.integers(2**31)), np.zeros(num_draws, dtype=np.int64), 0, streams)
        noise = replace(program.noise, noise_std=np.full(num_draws, sigma))     # apply reads the stds only
        ran = replace(program, noise=noise, num_replicas=num_draws).run(oracle, keys)
        return ran.outputs["released"][:, :, 0]

    return sample


@pytest.mark.slow
def test_the_release_stays_below_its_claim_and_half_the_noise_is_caught():
    """Catches a sensitivity or calibration too small for the release: a dropped factor 2 in
    2G/(lambda n), sigma for a larger epsilon, or replicas sharing one noise draw (then each
    neighbour's draws are constant and the audit separates them). The pair is checked to be worst
    case first (noiseless releases 0.4 apart). Measured (50,000 draws per neighbour, 95% confidence,
    delta 1e-5): the real sigma 1.033 gives a lower bound of 0.17 <= 1.5; half of it, 2.04 > 1.5.
    About 25 s."""
    plan, programs = neighbour_programs()
    assert plan.protocol.resolved["sensitivity"] == pytest.approx(0.4, abs=1e-7)
    noiseless = [release_sampler(programs, 0.0)(flag, 2, np.random.default_rng(flag)) for flag in (0, 1)]
    assert np.ptp(noiseless[0]) == 0 and noiseless[1][0, 0] - noiseless[0][0, 0] == pytest.approx(0.4, abs=1e-7)
    honest = audit_epsilon(release_sampler(programs, 1.0), DRAWS, np.random.default_rng(0), delta=DELTA)
    broken = audit_epsilon(release_sampler(programs, 0.5), DRAWS, np.random.default_rng(1), delta=DELTA)
    print(f"output perturbation eps={EPS}: honest {honest.eps_lower:.3f}, half noise {broken.eps_lower:.3f}")
    assert honest.eps_lower <= EPS
    assert broken.eps_lower > EPS
