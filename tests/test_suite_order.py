"""The suite's own ordering under xdist (``deal_long_tests`` in conftest): each worker starts with
its share of the long tests, and a module's long tests stay on one worker."""

import pytest

from tests.conftest import deal_group, deal_long_tests, dealt_first


def _chunks(order: list, workers: int) -> list[list]:
    """The contiguous chunks xdist's work-stealing scheduler deals out first: chunk k holds
    ``n // (workers - k)`` of the tests left."""
    chunks, left = [], list(order)
    for k in range(workers):
        size = len(left) // (workers - k)
        chunks.append(left[:size])
        left = left[size:]
    return chunks


def _deal(names: list[str], workers: int) -> list[str]:
    return deal_long_tests(names, workers, lambda name: name.startswith("long"), lambda name: name.split(".")[0])


def test_each_worker_starts_with_its_long_tests_and_a_modules_stay_together():
    """Catches the order before the fix (every long test in the first worker's chunk, run one after
    another while the other workers ran short tests) and a dealing that splits a module's long
    tests (two workers would each start that module's cluster)."""
    names = ["long_a.1", "long_a.2", "long_b.1", "long_c.1", "long_d.1"] + [f"short.{i}" for i in range(40)]

    for workers in (2, 3, 4):
        order = _deal(names, workers)
        chunks = _chunks(order, workers)

        assert sorted(order) == sorted(names)                               # nothing lost or repeated
        assert all(any(name.startswith("long") for name in chunk) for chunk in chunks), (workers, chunks)
        assert all(chunk[:sum(n.startswith("long") for n in chunk)] == [n for n in chunk if n.startswith("long")]
                   for chunk in chunks)                                      # long tests first in a chunk
        (holder,) = [i for i, chunk in enumerate(chunks) if "long_a.1" in chunk]
        assert "long_a.2" in chunks[holder]
        assert [n for n in order if n.startswith("short")] == [f"short.{i}" for i in range(40)]


def test_more_long_tests_than_a_chunk_holds_are_all_kept():
    """Catches a dealing that drops tests when a chunk's long tests outnumber its share."""
    names = [f"long_{i}.1" for i in range(6)] + ["short.0"]
    order = _deal(names, 4)
    assert sorted(order) == sorted(names)


class _Item:
    def __init__(self, nodeid: str, *marks):
        self.nodeid, self.marks = nodeid, {m.name: m for m in marks}

    def get_closest_marker(self, name):
        return self.marks.get(name)


def test_tests_that_share_a_calibration_are_dealt_to_one_worker_whatever_their_modules():
    """Catches a dealing that groups ``same_worker`` tests by module (two workers would compute
    the same RDP calibration at once) or leaves them among the short tests (stolen apart)."""
    shared = pytest.mark.same_worker("small").mark
    items = ([_Item("tests/a.py::t1", shared), _Item("tests/b.py::t2", shared),
              _Item("tests/c.py::t3", pytest.mark.long.mark)] + [_Item(f"tests/d.py::s{i}") for i in range(20)])
    assert [deal_group(i) for i in items[:3]] == ["small", "small", "tests/c.py"]
    order = deal_long_tests(items, 2, dealt_first, deal_group)
    first, second = order[:len(order) // 2], order[len(order) // 2:]
    assert [i.nodeid for i in first[:2]] == ["tests/a.py::t1", "tests/b.py::t2"] and second[0].nodeid == "tests/c.py::t3"
