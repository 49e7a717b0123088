"""The shuffler (seed-004 T6): a permutation of the participating messages, uniform, identity-free,
order-invariant for the server's aggregate, and fed by ObjectRefs inside Ray."""

import itertools
from dataclasses import fields

import numpy as np
import pytest
from scipy import stats

from fedray.protocols.isrl_dp.base import masked_mean
from fedray.runtime.shuffler import ShuffledMessages, Shuffler
from fedray.runtime.silo_group import RoundReply


def _blocks(num_replicas=3, sizes=(2, 0, 3, 4), dim=(2, 1), seed=0):
    """Blocks whose message rows are unique (value = 100 * global silo + replica), random masks."""
    rng = np.random.default_rng(seed)
    blocks, start = [], 0
    for size in sizes:
        silos = np.arange(start, start + size)
        base = 100.0 * silos[None, :] + np.arange(num_replicas)[:, None]             # (P, S_g)
        messages = base[..., None, None] + np.zeros((num_replicas, size) + dim)
        mask = rng.random((num_replicas, size)) < 0.7
        blocks.append(RoundReply(silos, messages, mask, {"train_loss_mean": np.ones((num_replicas, size))}))
        start += size
    return blocks


def _participating_rows(blocks, p):
    return np.concatenate([b.messages[p][b.mask[p]] for b in blocks])


def test_output_is_a_permutation_of_the_participating_messages():
    blocks = _blocks()
    out = Shuffler(7, np.array([0, 1, 2])).shuffle(5, *blocks)
    for p in range(3):
        rows = _participating_rows(blocks, p)
        assert out.counts[p] == len(rows)
        got = out.messages[p, : out.counts[p]]
        np.testing.assert_array_equal(
            np.sort(got.reshape(len(got), -1), axis=0), np.sort(rows.reshape(len(rows), -1), axis=0)
        )
        assert np.all(out.messages[p, out.counts[p]:] == 0)      # padding only after the real rows
        assert out.mask[p].tolist() == [True] * out.counts[p] + [False] * (out.messages.shape[1] - out.counts[p])


def test_no_sender_identity_survives():
    out = Shuffler(7, np.array([0, 1, 2])).shuffle(5, *_blocks())
    assert isinstance(out, ShuffledMessages)
    assert {f.name for f in fields(out)} == {"messages", "counts"}    # no silo ids, masks or metrics
    # The row order does not follow the silo order: over rounds, the first row's sender varies.
    firsts = {Shuffler(7, np.array([0, 1, 2])).shuffle(r, *_blocks()).messages[0, 0, 0, 0] for r in range(30)}
    assert len(firsts) > 2


def test_permutations_of_four_messages_are_uniform():
    # Chi-square over the 4! = 24 orders of 4 participating messages, 12_000 independent streams.
    num = 12_000
    messages = np.broadcast_to(np.arange(4.0)[None, :, None], (num, 4, 1))
    out = Shuffler(11, np.arange(num)).shuffle(0, (messages, np.ones((num, 4), dtype=bool)))
    index = {perm: i for i, perm in enumerate(itertools.permutations(range(4)))}
    observed = np.bincount([index[tuple(row)] for row in out.messages[:, :, 0].astype(int)], minlength=24)
    assert stats.chisquare(observed).pvalue > 1e-3
    # ... and over rounds for one replica (the round is a stream coordinate too).
    shuffler = Shuffler(11, np.array([0]))
    orders = [tuple(shuffler.shuffle(r, (messages[:1], np.ones((1, 4), dtype=bool))).messages[0, :, 0].astype(int))
              for r in range(4800)]
    assert stats.chisquare(np.bincount([index[o] for o in orders], minlength=24)).pvalue > 1e-3


def test_server_aggregate_is_invariant_to_order_and_layout():
    blocks = _blocks(sizes=(3, 2, 4), dim=(3, 1), seed=2)
    rng = np.random.default_rng(3)
    blocks = [RoundReply(b.silo_ids, rng.normal(size=b.messages.shape), b.mask, None) for b in blocks]
    direct, counts = masked_mean(np.concatenate([b.messages for b in blocks], axis=1),
                                 np.concatenate([b.mask for b in blocks], axis=1))
    shuffler = Shuffler(1, np.array([0, 0, 1]))
    out = shuffler.shuffle(9, *blocks)
    mean, shuffled_counts = masked_mean(out.messages, out.mask)
    np.testing.assert_allclose(mean, direct, rtol=1e-12, atol=1e-15)
    assert np.array_equal(shuffled_counts, counts)
    # One actor holding all silos instead of three: the same rows in the same silo order, so the
    # same permutation, bit for bit.
    merged = (np.concatenate([b.messages for b in blocks], axis=1), np.concatenate([b.mask for b in blocks], axis=1))
    again = shuffler.shuffle(9, merged)
    assert np.array_equal(again.messages, out.messages)


def test_deterministic_in_seed_and_round():
    blocks = _blocks(num_replicas=2, sizes=(5, 5))
    a = Shuffler(3, np.array([0, 1])).shuffle(4, *blocks)
    assert np.array_equal(a.messages, Shuffler(3, np.array([0, 1])).shuffle(4, *blocks).messages)
    assert not np.array_equal(a.messages, Shuffler(3, np.array([0, 1])).shuffle(5, *blocks).messages)
    assert not np.array_equal(a.messages, Shuffler(4, np.array([0, 1])).shuffle(4, *blocks).messages)


def test_replicas_of_one_repetition_share_the_permutation():
    messages = np.broadcast_to(np.arange(6.0)[None, :, None], (2, 6, 1))
    out = Shuffler(3, np.array([5, 5])).shuffle(2, (messages, np.ones((2, 6), dtype=bool)))
    assert np.array_equal(out.messages[0], out.messages[1])


def test_replica_with_no_participant_gets_no_rows():
    messages = np.ones((2, 3, 2))
    mask = np.array([[True, False, True], [False, False, False]])
    out = Shuffler(0, np.array([0, 1])).shuffle(0, (messages, mask))
    assert out.counts.tolist() == [2, 0]
    assert out.messages.shape == (2, 2, 2)


def test_sum_output_carries_only_the_sum_and_the_message_count():
    # P_vec's count vectors: the server may see their sum (the M1 view), not each sender's counts.
    blocks = _blocks(sizes=(3, 0, 4), dim=(2, 1), seed=4)
    blocks = [RoundReply(b.silo_ids, b.messages.astype(np.int64), b.mask, None) for b in blocks]
    out = Shuffler(1, np.array([0, 1, 2]), output="sum").shuffle(3, *blocks)
    for p in range(3):
        rows = _participating_rows(blocks, p)
        assert out.counts[p] == len(rows)
        assert np.array_equal(out.messages[p, 0], rows.sum(axis=0))
        assert not out.messages[p, 1:].any()
    assert out.messages.dtype == np.int64
    with pytest.raises(ValueError) as err:
        Shuffler(1, np.array([0]), output="histogram")
    assert str(err.value).startswith("shuffler output must be one of")


@pytest.mark.parametrize(
    "blocks,key",
    [
        ((), "blocks"),
        (((np.zeros((3, 2, 1)), np.ones((3, 2), dtype=bool)),), "message block 0 mask"),
        (((np.zeros((3, 2, 1)), np.ones((2, 2), dtype=bool)),), "message block 0 messages"),
        (((np.zeros((2, 2, 1)), np.ones((2, 2), dtype=bool)), (np.zeros((2, 1, 3)), np.ones((2, 1), dtype=bool))),
         "message block 1 messages"),
        ((np.zeros(3),), "message block 0"),
    ],
)
def test_malformed_blocks_are_refused(blocks, key):
    with pytest.raises(ValueError) as err:
        Shuffler(0, np.array([0, 1])).shuffle(0, *blocks)
    assert str(err.value).startswith(f"{key} must be ")


@pytest.mark.slow
@pytest.mark.ray
def test_shuffler_actor_takes_object_refs_from_silo_group_actors(ray_local):
    """The driver's wiring: silo actors' RoundReply refs go straight into the shuffler actor."""
    ray = ray_local
    from fedray.protocols.isrl_dp import ShuffledSGD
    from fedray.data import SyntheticLinear
    from fedray.losses import Logistic
    from fedray.privacy.mechanisms import GaussianNoise
    from fedray.runtime.shuffler import ShufflerActor
    from fedray.core.protocol import RoundSpec, Routing, SampledRounds
    from fedray.data import SiloArrays
    from fedray.runtime.silo_group import RoundPayload, SiloGroup, SiloGroupActor

    dataset = SyntheticLinear(num_silos=6, samples_per_silo=30, dim=4)
    loss, reps = Logistic(), np.array([0, 1])
    algorithm = ShuffledSGD(loss, np.array([0.1, 0.1]), 1, 1.0, GaussianNoise(np.full((2, 6), 0.3)))
    protocol = SampledRounds(algorithm, None, None, SiloArrays.of, np.zeros((2, 4, 1)), 3, 6, Routing.SHUFFLE)
    blocks = [np.arange(0, 3), np.arange(3, 6)]
    actors = [SiloGroupActor.remote(dataset, 0, 0, b, reps) for b in blocks]
    ray.get([a.set_protocol.remote(protocol) for a in actors])
    participation = np.array([[True, False, True, True, False, True], [False, True, True, False, True, True]])
    spec = RoundSpec(2, participation, np.zeros((2, 4, 1)))
    payload = ray.put(RoundPayload(spec, None))

    shuffler = ShufflerActor.remote(0, reps)
    refs = [a.round.remote(payload) for a in actors]               # never ray.get by the "driver"
    shuffled = ray.get(shuffler.shuffle.remote(2, *refs))

    local_groups = [SiloGroup(dataset, 0, 0, b, reps) for b in blocks]
    for g in local_groups:
        g.set_protocol(protocol)
    local_replies = [g.round(RoundPayload(spec, None)) for g in local_groups]
    expected = Shuffler(0, reps).shuffle(2, *local_replies)
    assert isinstance(shuffled, ShuffledMessages)
    assert shuffled.counts.tolist() == [4, 4]
    assert np.array_equal(shuffled.messages, expected.messages)
    for actor in actors + [shuffler]:
        ray.kill(actor)
