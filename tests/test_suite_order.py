"""The suite's own ordering under xdist (``deal_long_tests`` in conftest): each worker starts with
its share of the long tests, and a module's long tests stay on one worker."""

from tests.conftest import deal_long_tests


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
