import numpy as np
import pytest
from scipy import stats

from fedray.errors import ConfigError
from fedray.core.sampling import PoissonParticipation, UniformParticipation


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
