"""A test kit for a protocol written outside fedray, in the spirit of scikit-learn's ``check_estimator``.

``check_protocol(case)`` runs every check on a ``ProtocolCase`` (a small config that selects the
protocol, and what the privacy checks need to know of it); ``checks(case)`` lists them as
``(name, check)`` pairs to parametrize a pytest test with. Each check raises ``AssertionError``
naming what failed (the privacy checks return the numbers they compared). The contract checks:

- ``config_errors_before_ray``: a misspelt algorithm key is a ``ConfigError`` from planning, which
  starts no Ray;
- ``contract``: the built protocol is a ``fedray.core.protocol.RoundProtocol`` whose operations
  include the one ``configure`` names;
- ``converges``: with privacy off the training loss moves at least half way from its start to the
  direct solver's minimum (L-BFGS on the same records, the mean over units of each unit's mean
  loss);
- ``deterministic``: one seed gives the same bits twice, another seed other bits;
- ``actor_layout``: 1 and 3 silo groups give bit-identical models and histories;
- ``only_messages``: a group's reply to a round is the protocol's client messages for its units
  and nothing else.

The privacy checks, given ``ProtocolCase.neighbours`` (one round's client messages on a worst-case
neighbouring pair: every unit's message on D and on D', each one a message the client step could
send):

- ``noise_matches_ledger``: over many replicas (independent deployments), the released model's
  change in one round (one step of a protocol of sequential steps), divided by the shift the pair
  causes (the same noise on both: it cancels), has the noise multiplier of the Gaussian the plan's
  ledger prices for a round of the pair's unit (``ledger.accountant.event``, or the calibrated
  Gaussian step a composition ledger prices, ``ComposedAccountant.priced_noise``; an accountant
  that names neither fails), within a 99.99% chi-square interval;
- ``audit``: an empirical audit (``fedray.privacy.audit``) of that release on the pair stays at or
  below the epsilon the ledger charges for the round, and (given ``ProtocolCase.weaken``, the
  same plan adding half the noise) catches the weakened variant: its lower bound exceeds the claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class ProtocolCase:
    """What the kit runs a protocol with.

    overrides: command-line overrides selecting the protocol on a small federation with privacy
    on (``hydra.searchpath=...``, ``algorithm=...``, the data, participation and privacy).
    non_private: overrides added for the privacy-off runs (convergence, determinism, layout).
    privacy_round: overrides added for the one-round privacy checks (e.g. every unit taking part,
    a budget whose per-round epsilon an audit can reach).
    neighbours: ``neighbours(plan) -> (values_d, values_d_prime)``, each (N, ...) client messages of
    one round differing in one unit's message by the most the client step allows.
    weaken: ``weaken(plan) -> plan`` whose protocol adds half the noise and whose ledger is unchanged.
    misspelt: an algorithm key and the key it should suggest.
    released: ``released(protocol, state) -> (P, ...)``, the value whose one-round change the
    privacy checks measure (default: the protocol's first output), for a protocol whose noisy
    release is not its model (a step's noisy gradient, seen in the scores it moves).
    """

    overrides: tuple[str, ...]
    non_private: tuple[str, ...] = ("privacy=none",)
    privacy_round: tuple[str, ...] = ()
    neighbours: Callable | None = None
    weaken: Callable | None = None
    misspelt: tuple[str, str] = ("stepsize", "step_size")
    noise_replicas: int = 2000
    audit_draws: int = 200_000     # per neighbour: at 100,000 a half-noise Gaussian at eps 2 was caught by 0.007
    delta: float = 1e-5
    tolerance: dict = field(default_factory=dict)
    released: Callable | None = None


def _plan(case: ProtocolCase, *extra: str):
    from fedray.api import make_plan

    return make_plan([*case.overrides, "progress=false", *extra])


def _run(plan, groups=None):
    from fedray.runtime.driver import run

    return run(plan, inline=True, groups=groups)


def config_errors_before_ray(case: ProtocolCase) -> None:
    import ray

    from fedray.errors import ConfigError

    wrong, right = case.misspelt
    before = ray.is_initialized()
    try:
        _plan(case, f"+algorithm.{wrong}=0.3")
    except ConfigError as err:
        assert err.key == f"algorithm.{wrong}" and f"did you mean algorithm.{right}?" in str(err), str(err)
    else:
        raise AssertionError(f"a misspelt algorithm.{wrong} was not refused at planning")
    assert ray.is_initialized() == before, "planning started Ray"


def contract(case: ProtocolCase) -> None:
    from fedray.core.protocol import RoundKeys, RoundProtocol
    from fedray.runtime.driver import InlineGroups

    plan = _plan(case)
    protocol = plan.protocol.build(InlineGroups(plan))
    assert isinstance(protocol, RoundProtocol), f"{type(protocol).__name__} is not a RoundProtocol"
    keys = RoundKeys(plan.seed, plan.replicas.repetitions, 0, plan.replicas.streams)
    spec = protocol.configure(protocol.init(keys), keys)
    assert spec.operation in protocol.operations, f"operation {spec.operation!r} is not registered"


def _direct_minimum(plan) -> float:
    """min_w of the mean over units of each unit's mean loss of the linear model w (L-BFGS)."""
    from scipy.optimize import minimize

    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y, loss = fed.x_train, fed.y_train, plan.loss
    mask = (np.arange(x.shape[1])[None, :] < fed.n_train[:, None]) / (fed.n_train[:, None] * x.shape[0])
    shape = (x.shape[2], loss.num_outputs)

    def objective(flat):
        z = np.einsum("snd,dc->snc", x, flat.reshape(shape))
        value = (loss.value(z, y) * mask).sum()
        r = loss.residual(z, y) * mask[..., None]
        return value, np.einsum("snd,snc->dc", x, r).ravel()

    return float(minimize(objective, np.zeros(np.prod(shape)), jac=True, method="L-BFGS-B",
                          options={"gtol": 1e-10}).fun)


def converges(case: ProtocolCase) -> None:
    plan = _plan(case, *case.non_private)
    result = _run(plan)
    start, end = float(result.history[0]["train_loss"][0]), float(result.final["train_loss"][0])
    best = _direct_minimum(plan)
    assert end - best <= 0.5 * (start - best), (f"privacy off, the training loss went from {start:.5f} to {end:.5f}; "
                                                f"the direct minimum is {best:.5f}: not half way there")


def deterministic(case: ProtocolCase) -> None:
    a = _run(_plan(case, "seed=1")).model
    assert np.array_equal(a, _run(_plan(case, "seed=1")).model), "two runs with seed 1 differ"
    assert not np.array_equal(a, _run(_plan(case, "seed=2")).model), "seeds 1 and 2 give the same model"


def actor_layout(case: ProtocolCase) -> None:
    from fedray.runtime.driver import InlineGroups

    plan = _plan(case)
    one, three = (_run(plan, InlineGroups(plan, k)) for k in (1, 3))
    assert np.array_equal(one.model, three.model), "1 and 3 silo groups give different models"
    for a, b in zip(one.history, three.history, strict=True):
        assert sorted(a) == sorted(b)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"metric {key}: 1 and 3 groups differ")


def only_messages(case: ProtocolCase) -> None:
    from dataclasses import fields

    from fedray.core.protocol import RoundKeys
    from fedray.rng import SiloDraws
    from fedray.runtime.driver import InlineGroups
    from fedray.runtime.silo_group import RoundPayload

    plan = _plan(case)
    groups = InlineGroups(plan, 2)
    protocol = plan.protocol.build(groups)
    groups.call("set_protocol", protocol)
    keys = RoundKeys(plan.seed, plan.replicas.repetitions, 0, plan.replicas.streams)
    spec = protocol.configure(protocol.init(keys), keys)
    for group, reply in zip(groups.groups, groups.call("round", RoundPayload(spec, None))):
        assert {f.name for f in fields(reply)} == {"silo_ids", "messages", "mask", "evaluation", "claim"}
        assert reply.evaluation is None and reply.claim is None, "a group sent more than its messages"
        if reply.silo_ids.size == 0:
            continue
        fed = group.apply(lambda federation: federation)
        positions = np.searchsorted(group.silo_ids, reply.silo_ids)
        draws = SiloDraws(plan.seed, plan.replicas.streams, spec.round, reply.silo_ids, width=fed.x_train.shape[1])
        shard = protocol.shard(fed, group.silo_ids).select(positions)
        expected = protocol.client_step(spec.broadcast, shard, draws, spec.participation[:, reply.silo_ids])
        if protocol.per_actor_sums:
            expected = expected.sum(axis=1, keepdims=True)
        assert np.array_equal(reply.messages, expected), "a group's messages are not the client step's"


def _one_round_releases(plan, values: np.ndarray, released: Callable | None = None) -> np.ndarray:
    """(P, k): every replica's change of the released model (or of ``released(protocol, state)``)
    in round 0 (step 0 of sequential steps) when the units send ``values`` ((N, ...), the same for
    every replica)."""
    from fedray.core.protocol import Messages, RoundKeys, SequentialSteps
    from fedray.runtime.driver import InlineGroups

    protocol = plan.protocol.build(InlineGroups(plan))
    keys = RoundKeys(plan.seed, plan.replicas.repetitions, 0, plan.replicas.streams)
    state = protocol.init(keys)
    spec = protocol.configure(state, keys)
    if isinstance(protocol, SequentialSteps):        # a block of steps: its first step, as a round
        spec = protocol.one_step(spec)
    p = plan.replicas.count
    messages = np.broadcast_to(values, (p,) + values.shape) * spec.participation.reshape(
        spec.participation.shape + (1,) * (values.ndim - 1))
    after = protocol.aggregate(state, spec, Messages(messages, spec.participation), keys).state
    if released is None:
        def released(protocol, state):
            return next(iter(protocol.output(state).values()))
    return (released(protocol, after) - released(protocol, state)).reshape(p, -1)


def _claim(plan) -> float:
    """The epsilon the plan's ledger charges for one round (each unit once)."""
    ledger = plan.privacy.ledger.fresh()
    ledger.record(np.ones(ledger.shape, dtype=bool))
    return float(ledger.epsilons().max())


def _priced_noise_multiplier(plan) -> float:
    """The noise multiplier of the Gaussian event the plan's ledger prices for one round of unit 0
    (the pair's unit), the same for every replica; its sampling and composition wrappers are read
    through. A composition ledger pricing a calibrated Gaussian step: that step's multiplier."""
    import dp_accounting

    from fedray.privacy.ledger import EventAccountant

    from fedray.privacy.ledger import ComposedAccountant
    from fedray.privacy.mechanisms import CalibratedGaussianNoise

    accountant = plan.privacy.ledger.accountant
    calibrated = accountant.priced_noise() if isinstance(accountant, ComposedAccountant) else None
    if isinstance(calibrated, CalibratedGaussianNoise):     # a calibrated step, priced by its guarantee
        multipliers = np.unique(np.asarray(calibrated.noise_multiplier, dtype=np.float64))
        assert multipliers.size == 1, f"the replicas' priced noise multipliers differ: {multipliers.tolist()}"
        return float(multipliers[0])
    assert calibrated is None, (f"the {accountant.name} accountant prices a theorem's noise "
                                f"({type(calibrated).__name__}), not a noise multiplier")
    assert isinstance(accountant, EventAccountant), (f"the {accountant.name} accountant names no event: nothing ties "
                                                     "the noise the protocol adds to what its ledger prices")
    priced = set()
    for replica in range(plan.replicas.count):
        event = accountant.event(replica, 0, 1)
        while hasattr(event, "event"):          # SampledWithoutReplacement, PoissonSampled, SelfComposed
            event = event.event
        assert isinstance(event, dp_accounting.GaussianDpEvent), f"the ledger prices {event}, not a Gaussian event"
        priced.add(float(event.noise_multiplier))
    assert len(priced) == 1, f"the replicas' priced noise multipliers differ: {sorted(priced)}"
    return priced.pop()


def noise_matches_ledger(case: ProtocolCase) -> dict:
    from scipy.stats import chi2

    assert case.neighbours is not None, "ProtocolCase.neighbours is needed for the privacy checks"
    plan = _plan(case, *case.privacy_round, f"repetitions={case.noise_replicas}")
    d, d_prime = case.neighbours(plan)
    released, shifted = _one_round_releases(plan, d, case.released), _one_round_releases(plan, d_prime, case.released)
    shift = np.linalg.norm((shifted - released)[0])         # the noise is the same on both: it cancels
    assert np.allclose(shifted - released, (shifted - released)[0]), "the pair's shift is not deterministic"
    centred = released - released.mean(axis=0)
    dof = centred.size - centred.shape[1]
    variance = (centred ** 2).sum() / dof
    lo, hi = (np.sqrt(variance * dof / chi2.ppf(q, dof)) / shift for q in (1 - 5e-5, 5e-5))
    z = _priced_noise_multiplier(plan)
    assert lo <= z <= hi, (f"the noise added is {np.sqrt(variance) / shift:.4f} times the pair's shift "
                           f"(99.99% interval [{lo:.4f}, {hi:.4f}]); the ledger prices a noise multiplier of {z:.4f}")
    return {"measured": float(np.sqrt(variance) / shift), "interval": (float(lo), float(hi)), "priced": z}


def audit(case: ProtocolCase) -> dict:
    from fedray.privacy.audit import audit_epsilon

    neighbours = case.neighbours
    assert neighbours is not None, "ProtocolCase.neighbours is needed for the privacy checks"
    base = [*case.privacy_round, f"repetitions={case.audit_draws}"]
    plans = [_plan(case, *base, f"seed={s}") for s in (11, 12)]        # D and D' draw their own noise
    claim = _claim(plans[0])

    def sampler(variant):
        def sample(flag, num_draws, rng):
            plan = variant(plans[flag])
            values = neighbours(plan)[flag]
            return _one_round_releases(plan, values, case.released)[:num_draws]
        return sample

    def keep(plan):
        return plan

    honest = audit_epsilon(sampler(keep), case.audit_draws, np.random.default_rng(0), delta=case.delta)
    assert honest.eps_lower <= claim, (f"the audit's epsilon lower bound {honest.eps_lower:.3f} exceeds the "
                                       f"ledger's claim {claim:.3f} for one round")
    found = {"claim": claim, "honest_lower": float(honest.eps_lower)}
    if case.weaken is not None:
        weak = audit_epsilon(sampler(case.weaken), case.audit_draws, np.random.default_rng(1), delta=case.delta)
        assert weak.eps_lower > claim, (f"the audit could not catch half the noise: lower bound {weak.eps_lower:.3f} "
                                        f"against the claim {claim:.3f}")
        found["half_noise_lower"] = float(weak.eps_lower)
    return found


CONTRACT = (config_errors_before_ray, contract, converges, deterministic, actor_layout, only_messages)
PRIVACY = (noise_matches_ledger, audit)


def checks(case: ProtocolCase) -> list[tuple[str, Callable[[], object]]]:
    """Every check as ``(name, check)``, the privacy ones where ``case.neighbours`` is given."""
    chosen = CONTRACT + (PRIVACY if case.neighbours is not None else ())
    return [(check.__name__, partial(check, case)) for check in chosen]


def check_protocol(case: ProtocolCase) -> None:
    """Run every check of ``checks(case)``; the first failure raises ``AssertionError``."""
    for _, check in checks(case):
        check()
