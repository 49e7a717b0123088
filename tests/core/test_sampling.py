import numpy as np
import pytest
from scipy import stats

from fedray.core.sampling import AllUnits, PoissonParticipation, SequentialBatches, UniformParticipation
from fedray.errors import ConfigError


def test_uniform_picks_m_distinct_silos_with_uniform_frequencies():
    n, m, rounds = 10, 4, 4000
    part = UniformParticipation(m)
    masks = np.stack([part.sample(7, np.array([0]), r, n)[0] for r in range(rounds)])
    assert np.all(masks.sum(axis=1) == m)
    counts = masks.sum(axis=0)
    expected = rounds * m / n
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert stats.chi2.sf(chi2, df=n - 1) > 1e-3
    # Pairwise inclusion M(M-1)/(N(N-1)) (seed-004 T5).
    pair = (masks[:, 0] & masks[:, 1]).mean()
    assert pair == pytest.approx(m * (m - 1) / (n * (n - 1)), abs=4 * np.sqrt(0.13 * 0.87 / rounds))


def test_participation_is_keyed_by_repetition_and_round():
    part = UniformParticipation(3)
    a = part.sample(1, np.array([0, 0, 1]), 5, 12)
    assert np.array_equal(a[0], a[1])
    assert np.array_equal(a, part.sample(1, np.array([0, 0, 1]), 5, 12))
    assert not np.array_equal(part.sample(1, np.array([0]), 5, 12), part.sample(1, np.array([0]), 6, 12))


def test_poisson_rate():
    part = PoissonParticipation(0.3)
    masks = np.stack([part.sample(0, np.array([0]), r, 50)[0] for r in range(400)])
    assert masks.mean() == pytest.approx(0.3, abs=0.02)


def test_bad_participation_is_a_config_error():
    with pytest.raises(ConfigError, match=r"participation.silos_per_round must be an integer in \[1, 25\]"):
        UniformParticipation(30).validate(25)
    with pytest.raises(ConfigError, match="participation.probability"):
        PoissonParticipation(1.5).validate(25)


@pytest.mark.parametrize("sampler", [UniformParticipation(3), PoissonParticipation(0.3), PoissonParticipation(1.0),
                                     AllUnits(), SequentialBatches(2)])
def test_counts_equal_the_rounds_drawn_one_by_one(sampler):
    """The budget guard's counts are what the rounds will draw, without holding an (R, P, N) schedule."""
    reps, rounds, units = np.array([0, 0, 1]), 4, 9
    drawn = sum(sampler.sample(5, reps, r, units).astype(np.int64) for r in range(rounds))
    np.testing.assert_array_equal(sampler.counts(5, reps, rounds, units), drawn)


def test_sequential_batches_are_disjoint_and_bounded():
    sampler = SequentialBatches(3)
    masks = [sampler.sample(0, np.array([0]), r, 10)[0] for r in range(3)]
    assert [np.flatnonzero(m).tolist() for m in masks] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert sampler.max_rounds(10) == 3
    with pytest.raises(ValueError, match="at most 3 rounds"):
        sampler.sample(0, np.array([0]), 3, 10)


def test_all_units_take_part_every_round_and_count_in_closed_form():
    counts = AllUnits().counts(0, np.array([0, 1]), 10**9, 4)   # no loop over a billion rounds
    assert counts.shape == (2, 4) and np.all(counts == 10**9)


def test_poisson_sampling_with_probability_one_takes_everyone_and_counts_in_closed_form():
    """q = 1 (a privacy round of every unit, an audit's 200,000 replicas): the mask the draws would
    give, all units, without a generator per repetition; just below 1 units are still drawn."""
    everyone = PoissonParticipation(1.0)
    assert np.all(everyone.sample(3, np.arange(5), 2, 7)) and everyone.sample(3, np.arange(5), 2, 7).shape == (5, 7)
    counts = everyone.counts(0, np.array([0, 1]), 10**9, 4)    # no loop over a billion rounds
    assert counts.shape == (2, 4) and np.all(counts == 10**9)
    almost = PoissonParticipation(0.9).sample(3, np.arange(50), 2, 40)
    assert 0 < (~almost).sum() < almost.size


@pytest.mark.parametrize("sampler,key", [(SequentialBatches(0), "participation.batch_size"),
                                         (UniformParticipation(2.5), "participation.silos_per_round")])
def test_bad_sampler_settings_name_their_key(sampler, key):
    with pytest.raises(ConfigError) as err:
        sampler.validate(10)
    assert err.value.key == key


def test_phased_batches_are_disjoint_consecutive_and_counted_once():
    from fedray.core.sampling import PhasedBatches

    sampler = PhasedBatches((3, 5), (2, 3))
    sampler.validate(30)
    assert [sampler.step_units(t) for t in range(5)] == [(0, 3), (3, 6), (6, 11), (11, 16), (16, 21)]
    masks = np.stack([sampler.sample(0, np.zeros(2), t, 30) for t in range(5)])
    assert masks.sum(axis=0).max() == 1 and masks[:, 0].sum() == 21
    assert sampler.counts(0, np.zeros(2), 3, 30)[0].tolist() == [1] * 11 + [0] * 19
    assert sampler.max_rounds(30) == 5 and sampler.per_round(30) == 5
    with pytest.raises(ConfigError):
        PhasedBatches((3, 5), (2, 3)).validate(20)
    with pytest.raises(ConfigError):
        PhasedBatches((3,), (2, 3)).validate(30)


@pytest.mark.slow
def test_phased_subsets_draw_k_of_each_phases_fresh_units_uniformly():
    from fedray.core.sampling import PhasedSubsets

    sampler = PhasedSubsets((10, 6), (3000, 2000), (4, 2))
    sampler.validate(20)
    reps = np.array([0, 0, 1])
    masks = np.stack([sampler.sample(5, reps, t, 20) for t in range(5000)])           # (T, P, N)
    members = sampler.members(5, 20)
    first, second = members == 0, members == 1
    assert first.sum() == 10 and second.sum() == 6 and np.array_equal(members, sampler.members(5, 20))
    assert not np.array_equal(members, sampler.members(6, 20))        # a permutation keyed by the seed
    assert np.all(masks[:3000][:, :, first].sum(axis=2) == 4) and not masks[:3000][:, :, ~first].any()
    assert np.all(masks[3000:][:, :, second].sum(axis=2) == 2) and not masks[3000:][:, :, ~second].any()
    assert not masks[:, :, members < 0].any()                        # units of no phase: never
    assert np.array_equal(masks[:, 0], masks[:, 1]) and not np.array_equal(masks[:, 0], masks[:, 2])
    for rows, size, units, phase in ((slice(0, 3000), 4, 10, first), (slice(3000, 5000), 2, 6, second)):
        counts = masks[rows, 2][:, phase].sum(axis=0)
        expected = counts.sum() / units
        assert stats.chi2.sf(((counts - expected) ** 2 / expected).sum(), df=units - 1) > 1e-3
    np.testing.assert_array_equal(sampler.counts(5, reps, 5000, 20), masks.sum(axis=0))
    assert sampler.max_rounds(20) == 5000 and sampler.per_round(20) is None
    assert PhasedSubsets((10,), (3,), (4,)).per_round(20) == 4
    for bad in (PhasedSubsets((10, 6), (3,), (4, 2)), PhasedSubsets((10, 6), (3, 2), (11, 2)),
                PhasedSubsets((15, 6), (3, 2), (4, 2))):
        with pytest.raises(ConfigError):
            bad.validate(20)
