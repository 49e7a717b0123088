"""Every dataset spec builds a subset of silos exactly as selecting them from the whole federation."""

import numpy as np
import pytest

from fedray.data import InsuranceSorted, MnistPairs, ObesityByClass

FIELDS = ("x_train", "y_train", "x_test", "y_test", "n_train", "n_test")


@pytest.mark.parametrize("spec, ids", [
    (InsuranceSorted(num_silos=10), [9, 2, 5]),
    (ObesityByClass(), [6, 0]),
    (MnistPairs(images_per_digit=60), [24, 0, 13]),
])
def test_loading_some_silos_equals_selecting_them(spec, ids, shared_data):
    part, whole = spec.load(3, 1, silo_ids=ids), spec.load(3, 1).select(np.array(ids))
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(part, name), getattr(whole, name))
