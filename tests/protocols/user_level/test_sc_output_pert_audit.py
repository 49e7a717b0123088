"""Black-box audit of SCOutputPert's release decision (issue 39, finding 1) on the worst-case
neighbours: the same users, except that one user's m items are all +1 (its mean item moves to the
extreme). Exact mode, n = 300 users of m = 10^10 items, d = 1, (eps, delta) = (1, 1e-5); each of
200 replicas draws its own deletion budget R1 and noise.

The test thresholds the "released" bit (say "x'" when nothing is released) and turns Clopper-Pearson
upper bounds on its two error rates into a lower bound on epsilon (``fedray.privacy.audit``). Alg. 1
(``on_unstable=search``, the default) must stay below the claimed epsilon = 1; the abort variant
(``on_unstable=abort_not_private``, which releases nothing when S = {} is not stable) releases on
every replica of x and on none of x', and the same audit finds epsilon > 1.
"""

from dataclasses import dataclass, replace

import numpy as np

from fedray.data import BinomialUserMeans
from fedray.plan import make_plan
from fedray.privacy.audit import clopper_pearson_upper, epsilon_lower_bound
from fedray.runtime.driver import run
from tests.conftest import compose

MEANS = ["experiment=sc_output_pert_means", "data.spec.num_silos=300", "repetitions=200", "progress=false"]
CONFIDENCE = 0.95


@dataclass(frozen=True)
class ExtremeUser(BinomialUserMeans):
    """BinomialUserMeans with user ``extreme``'s m items all +1/sqrt(d) (its mean item too)."""

    extreme: int = 0

    def load(self, seed: int, trial: int = 0, silo_ids=None):
        federation = super().load(seed, trial, silo_ids)
        ids = np.arange(self.num_silos) if silo_ids is None else np.asarray(silo_ids)
        federation.x_train[ids == self.extreme] = 1.0 / np.sqrt(self.dim)
        return federation


def release_rates(*overrides: str) -> tuple[int, int, int]:
    """Replicas (of 200) that released on x and on its neighbour x', and the replica count."""
    plan = make_plan(compose(*MEANS, *overrides))
    neighbour = replace(plan, dataset=ExtremeUser(**vars(plan.dataset)))
    counts = [int(run(p, inline=True).history[0]["released"].sum()) for p in (plan, neighbour)]
    return counts[0], counts[1], plan.num_replicas


def audit(released: int, released_prime: int, trials: int, delta: float = 1e-5) -> float:
    """Epsilon lower bound (confidence 95%) of the test "x' when nothing is released":
    FPR = P_x(no release), FNR = P_x'(release), each bounded one-sided at 2.5%."""
    alpha = (1 - CONFIDENCE) / 2
    fpr_hi = clopper_pearson_upper(trials - released, trials, alpha)
    fnr_hi = clopper_pearson_upper(released_prime, trials, alpha)
    return float(epsilon_lower_bound(fpr_hi, fnr_hi, delta))


def test_the_release_decision_is_private_on_the_worst_case_neighbours():
    released, released_prime, trials = release_rates()
    lower = audit(released, released_prime, trials)
    assert lower <= 1.0, (f"released on {released} of {trials} replicas for x, {released_prime} of {trials} for x' "
                          f"(one user's items all +1): epsilon >= {lower:.2f} at 95% confidence, claimed 1")


def test_the_audit_catches_the_abort_on_failure_variant():
    released, released_prime, trials = release_rates("algorithm.on_unstable=abort_not_private")
    assert (released, released_prime) == (trials, 0)
    assert audit(released, released_prime, trials) > 3.5
