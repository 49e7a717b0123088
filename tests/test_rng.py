"""Seeded streams: a silo's draws depend on (seed, stream, repetition, round, silo) only."""

import itertools

import numpy as np
import pytest
from scipy import stats

from hypothesis import given, settings
from hypothesis import strategies as st

from fedray.rng import BLOCK, VECTORISED_FROM, SiloDraws, Stream, generator, generators

SIZES = np.array([30, 12, 30, 25] * 50)  # 200 silos, unbalanced


def test_a_silos_draws_do_not_depend_on_who_else_is_in_the_call():
    everyone = np.arange(200)
    some = np.array([3, 63, 64, 130, 199])
    full = SiloDraws(7, np.array([0, 1]), 4, everyone, width=30)
    part = SiloDraws(7, np.array([0, 1]), 4, some, width=30)
    assert np.array_equal(full.standard_normal((3,))[:, some], part.standard_normal((3,)))
    assert np.array_equal(full.without_replacement(SIZES, 5)[:, some], part.without_replacement(SIZES[some], 5))
    assert np.array_equal(full.with_replacement(SIZES, 6)[:, some], part.with_replacement(SIZES[some], 6))
    assert np.array_equal(full.epoch_slice(SIZES, 4, 2)[:, some], part.epoch_slice(SIZES[some], 4, 2))


def test_streams_differ_by_round_repetition_and_silo():
    a = SiloDraws(7, np.array([0, 1]), 4, np.arange(BLOCK + 2), width=30).standard_normal((2,))
    b = SiloDraws(7, np.array([0, 1]), 5, np.arange(BLOCK + 2), width=30).standard_normal((2,))
    assert not np.array_equal(a, b)
    assert not np.array_equal(a[0], a[1])
    assert len({tuple(row) for row in a[0]}) == BLOCK + 2


def test_without_replacement_is_a_uniform_subset_of_the_real_records():
    counts = np.zeros(12)
    for r in range(600):
        idx = SiloDraws(1, np.array([0]), r, np.array([1]), width=30).without_replacement(np.array([12]), 4)[0, 0]
        assert len(set(idx)) == 4 and idx.max() < 12
        counts[idx] += 1
    assert stats.chisquare(counts).pvalue > 1e-3


def test_with_replacement_stays_in_range_and_is_uniform():
    idx = SiloDraws(2, np.array([0]), 0, np.arange(200), width=30).with_replacement(SIZES, 400)[0]
    assert np.all(idx < SIZES[:, None]) and np.all(idx >= 0)
    assert stats.chisquare(np.bincount(idx[1], minlength=12)).pvalue > 1e-3


def test_epoch_slices_are_disjoint_and_cover_each_record_once():
    draws = SiloDraws(3, np.array([0]), 0, np.arange(4), width=30)
    slices = np.concatenate([draws.epoch_slice(SIZES[:4], 6, r) for r in range(2)], axis=-1)[0]
    for s in range(4):
        assert len(set(slices[s])) == 12 and slices[s].max() < SIZES[s]
    with pytest.raises(ValueError, match="floor"):
        draws.epoch_slice(SIZES[:4], 6, 4)


def test_a_silo_gets_its_row_of_the_full_block_draw_of_its_generator():
    # The stream contract: silo s, repetition r draws row s % BLOCK of the (BLOCK, ...) draw of
    # generator(seed, stream, r, round, s // BLOCK), even when the call stops at the last row it needs.
    draws = SiloDraws(7, np.array([2, 0, 2]), 4, np.array([5, 70]), width=30)
    normals = draws.standard_normal((3, 2))
    for p, rep in enumerate([2, 0, 2]):
        for s, silo in enumerate([5, 70]):
            block = generator(7, Stream.NOISE, rep, 4, silo // BLOCK).standard_normal((BLOCK, 3, 2))
            assert np.array_equal(normals[p, s], block[silo % BLOCK])
    keys = generator(7, Stream.MINIBATCH, 0, 4, 1).random((BLOCK, 30))[70 % BLOCK, :12]
    chosen = draws.without_replacement(np.array([30, 12]), 5)[1, 1]           # the 5 smallest keys of 12
    assert np.array_equal(np.sort(chosen), np.sort(np.argsort(keys)[:5]))


def test_by_repetition_draws_are_the_replica_draws_once_per_repetition():
    reps = np.array([1, 0, 1, 1, 3])
    draws = SiloDraws(7, reps, 4, np.array([3, 63, 64, 130]), width=30)
    sizes = SIZES[[3, 63, 64, 130]]
    assert np.array_equal(draws.unique_reps[draws.replica_to_rep][:, 0], reps)
    pairs = [
        (draws.standard_normal((4, 2), by_repetition=True), draws.standard_normal((4, 2))),
        (draws.without_replacement(sizes, 5, by_repetition=True), draws.without_replacement(sizes, 5)),
        (draws.with_replacement(sizes, 6, by_repetition=True), draws.with_replacement(sizes, 6)),
    ]
    for once, per_replica in pairs:
        assert once.shape[0] == 3 and per_replica.shape[0] == 5
        assert np.array_equal(draws.per_replica(once), per_replica)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), stream=st.sampled_from(list(Stream)),
       rows=st.lists(st.lists(st.integers(0, 2**32 - 1), min_size=3, max_size=3), min_size=1, max_size=6),
       suffix=st.lists(st.integers(0, 2**40), max_size=3))
def test_generators_draw_exactly_what_one_generator_per_key_draws(seed, stream, rows, suffix):
    """The vectorised seeding replays numpy's SeedSequence and PCG64 seeding, word for word, for
    any key length (shorter and longer than SeedSequence's pool) and multi-word seeds; few keys
    take one generator each."""
    for width, copies in itertools.product((0, 1, 3), (1, VECTORISED_FROM)):
        keys = np.tile(np.array(rows, dtype=np.int64)[:, :width], (copies, 1))
        for row, rng in zip(keys.tolist(), generators(seed, stream, keys, *suffix)):
            expected = generator(seed, stream, *row, *suffix)
            np.testing.assert_array_equal(rng.random(3), expected.random(3))
            np.testing.assert_array_equal(rng.standard_normal(2), expected.standard_normal(2))


def test_generators_fall_back_to_one_generator_per_key_past_32_bit_coordinates():
    keys = np.tile([[2**32, 1], [5, 2**40]], (VECTORISED_FROM, 1))
    for row, rng in zip(keys.tolist(), generators(7, Stream.NOISE, keys, 3)):
        np.testing.assert_array_equal(rng.random(4), generator(7, Stream.NOISE, *row, 3).random(4))


def test_setting_word_rows_are_setting_words_row_by_row():
    """The vectorised words of a plan's stream keys: a swapped word order or a float32 cast would
    key every replica by other numbers."""
    from fedray.rng import setting_word_rows, setting_words

    values = np.array([0.0, -0.0, 1.0, 0.1, 2.5e-300, 1e32, -7.25, np.inf, 123456789.123])
    np.testing.assert_array_equal(setting_word_rows(values), [setting_words(v) for v in values])
    assert setting_word_rows(values).dtype == np.int64


def test_round_keys_generators_draw_what_each_replicas_generator_draws():
    """``RoundKeys.generators`` (one re-seeded generator) against ``RoundKeys.generator`` per
    replica, past the vectorised threshold and below it, with step-size words in the streams."""
    from fedray.core.protocol import RoundKeys
    from fedray.rng import setting_word_rows

    for count in (3, 5 * VECTORISED_FROM):
        streams = np.concatenate([np.arange(count)[:, None], setting_word_rows(np.linspace(0.1, 2, count))], axis=1)
        keys = RoundKeys(11, np.arange(count), 4, streams)
        drawn = np.stack([g.standard_normal((2, 3)) for g in keys.generators(Stream.SERVER)])
        expected = np.stack([keys.generator(Stream.SERVER, p).standard_normal((2, 3)) for p in range(count)])
        np.testing.assert_array_equal(drawn, expected)
        assert len({tuple(row.ravel()) for row in drawn}) == count
