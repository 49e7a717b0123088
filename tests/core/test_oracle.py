"""The oracle's unit sums are bit-identical whatever the actors' split of the units."""

import numpy as np
import pytest

from fedray.core.oracle import BLOCK, block_partials, sum_partials


def _split_sum(rows: np.ndarray, cuts: list[int]) -> np.ndarray:
    ids = np.arange(rows.shape[0])
    parts = []
    for lo, hi in zip([0, *cuts], [*cuts, rows.shape[0]]):
        parts += block_partials(ids[lo:hi], rows[lo:hi], rows.shape[0])
    return sum_partials(parts)


@pytest.mark.parametrize("num_units", [1, BLOCK - 1, BLOCK, 3 * BLOCK + 17])
def test_any_split_gives_the_same_bits(num_units):
    rng = np.random.default_rng(num_units)
    rows = rng.standard_normal((num_units, 3, 2)) * 10.0 ** rng.integers(-8, 8, size=(num_units, 1, 1))
    one = _split_sum(rows, [])
    for trial in range(20):
        cuts = sorted(set(rng.integers(1, num_units, size=rng.integers(1, 6)).tolist())) if num_units > 1 else []
        assert np.array_equal(one, _split_sum(rows, cuts)), cuts
    # a real sum (not bit-equal to a plain reduction in general, but equal to rounding)
    np.testing.assert_allclose(one, rows.sum(axis=0), rtol=1e-9, atol=1e-9 * np.abs(rows).sum())


def test_a_split_actor_sends_rows_only_for_the_blocks_it_shares():
    rows = np.ones((3 * BLOCK, 2))
    ids = np.arange(BLOCK // 2, 3 * BLOCK)
    parts = block_partials(ids, rows[ids], 3 * BLOCK)
    assert [(p.block, p.whole, p.rows.shape[0] if not p.whole else None) for p in parts] == \
        [(0, False, BLOCK // 2), (1, True, None), (2, True, None)]
