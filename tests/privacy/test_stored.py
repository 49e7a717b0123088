"""Accountant answers kept on disk (fedray.privacy.stored): exact, keyed by the code, never in the way."""

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedray.privacy import stored
from fedray.privacy import accounting
from fedray.privacy.accounting import (RDP_HORIZON, _rdp_curve, _rdp_epsilons, accountant_store,
                                         calibrate_noise_multiplier, participation_epsilon)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh store folder and empty in-memory caches, so every answer below comes from the
    computation or from the disk."""
    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path))
    caches = (participation_epsilon, _rdp_curve, _rdp_epsilons)
    for cache in caches:
        cache.cache_clear()
    yield stored.store_path()
    for cache in caches:
        cache.cache_clear()


def test_stored_answers_equal_computed_ones_bit_for_bit(store):
    args = (1.3, 100, 2400, 1, 35, 1.7e-7, "rdp")
    computed, = _rdp_epsilons.__wrapped__.uncached(1.3, 100, 2400, 1, RDP_HORIZON, 1.7e-7)
    first = participation_epsilon(*args)           # computed and stored
    participation_epsilon.cache_clear()
    _rdp_epsilons.cache_clear()
    second = participation_epsilon(*args)          # read back from the disk
    assert first == second == computed[34]
    assert second == pytest.approx(accounting.epsilon_of(accounting.participation_event(*args[:5]), 1.7e-7, "rdp"),
                                   rel=1e-12)
    pld = (1.3, 100, 2400, 1, 3, 1e-5, "pld")
    assert participation_epsilon(*pld) == accounting._epsilon_after.uncached(*pld)
    orders, curve = _rdp_curve.__wrapped__.uncached(1.3, 100, 2400, 1)
    _rdp_curve(1.3, 100, 2400, 1)
    _rdp_curve.cache_clear()
    stored_orders, stored_curve = _rdp_curve(1.3, 100, 2400, 1)
    assert np.array_equal(orders, stored_orders) and np.array_equal(curve, stored_curve)
    z = calibrate_noise_multiplier(2.0, 1e-5, 1000, 1000, 1, 20, "rdp")      # full batch: a quick search
    assert z == calibrate_noise_multiplier.uncached(2.0, 1e-5, 1000, 1000, 1, 20, "rdp")
    assert store.exists()


def test_a_second_call_reads_the_store_and_a_new_accountant_version_misses_it(store, monkeypatch):
    calls = []
    original = calibrate_noise_multiplier.uncached

    @functools.wraps(original)
    def counted(*args):
        calls.append(args)
        return original(*args)

    wrapped = stored.stored(counted)
    args = (1.5, 1e-5, 800, 800, 1, 10, "rdp")
    assert wrapped(*args) == wrapped(*args) == original(*args)
    assert len(calls) == 1
    # keyword and positional calls are one key
    assert wrapped(1.5, 1e-5, 800, 800, 1, 10, accountant="rdp") == original(*args) and len(calls) == 1
    monkeypatch.setattr(stored, "_version", lambda: "dp-accounting 999; fedray accounting changed")
    wrapped(*args)
    assert len(calls) == 2


def test_a_float_argument_keys_by_its_exact_value(store):
    calls = []

    @stored.stored
    def half(x: float) -> float:
        calls.append(x)
        return x / 2

    assert half(0.1) == half(np.float64(0.1)) == 0.05           # one value, one key
    assert half(np.nextafter(0.1, 1.0)) == np.nextafter(0.1, 1.0) / 2      # the next float is another
    assert len(calls) == 2


def test_an_unusable_store_is_skipped_and_a_corrupt_entry_recomputed(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(blocker))

    @stored.stored
    def double(x: float) -> float:
        return 2 * x

    assert double(1.25) == 2.5            # no store could be opened: computed all the same

    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path / "cache"))
    assert double(1.25) == 2.5
    connection = stored._connection()
    connection.execute("UPDATE answers SET value = 'not json'")
    assert double(1.25) == 2.5
    assert json.loads(json.loads(connection.execute("SELECT value FROM answers").fetchone()[0])["payload"]) == \
        {"float": 2.5}
    # a row moved under another key, or damaged, is not believed
    connection.execute("UPDATE answers SET value = ?", (stored._encode("another key", 99.0),))
    assert double(1.25) == 2.5
    damaged = connection.execute("SELECT value FROM answers").fetchone()[0].replace("2.5", "2.6")
    connection.execute("UPDATE answers SET value = ?", (damaged,))
    assert double(1.25) == 2.5


def test_a_store_others_may_write_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path))
    calls = []

    @stored.stored
    def triple(x: float) -> float:
        calls.append(x)
        return 3 * x

    triple(2.0)
    stored.store_path().chmod(0o666)
    stored._open.clear()
    assert triple(2.0) == 6.0 and len(calls) == 2          # computed again: the file is not private


def test_a_faithful_plan_uses_no_store(tmp_path, monkeypatch):
    from fedray.plan import make_plan
    from tests.conftest import compose

    monkeypatch.setenv("FEDRAY_CACHE_DIR", str(tmp_path))
    job = ["data=synthetic", "participation.silos_per_round=5", "privacy.epsilon=2.0", "privacy.l2_clip=1.0",
           "num_rounds=4"]
    make_plan(compose(*job, "runtime.faithful=true"))
    assert not stored.store_path().exists()
    make_plan(compose(*job, "privacy.epsilon=3.0"))        # answers not in memory yet
    assert stored.store_path().exists()


def _poison(path: Path, factor: float) -> int:
    """Scale every stored answer by ``factor``, each under a valid check (a store someone rewrote)."""
    import sqlite3

    connection = sqlite3.connect(path)
    rows = connection.execute("SELECT key, value FROM answers").fetchall()
    for key, text in rows:
        answer = stored._decode(key, text)
        scaled = tuple(v * factor for v in answer) if isinstance(answer, tuple) else answer * factor
        connection.execute("UPDATE answers SET value = ? WHERE key = ?", (stored._encode(key, scaled), key))
    connection.commit()
    connection.close()
    return len(rows)


def _clear_memory():
    for cache in (participation_epsilon, _rdp_curve, _rdp_epsilons):
        cache.cache_clear()


def test_two_plans_in_one_process_keep_their_own_store_setting(store):
    """A faithful plan computes its answers itself even after a plan that read the store put them in
    memory, and leaves the process as it found it: the next plan (or any caller) reads the store."""
    from fedray.plan import make_plan
    from tests.conftest import compose

    job = ["data=synthetic", "participation.silos_per_round=5", "privacy.epsilon=2.0", "privacy.l2_clip=1.0",
           "num_rounds=4", "privacy.enforce_budget=false"]
    honest = make_plan(compose(*job)).privacy.planned_epsilon
    assert _poison(store, 0.5) > 0
    _clear_memory()
    read = make_plan(compose(*job)).privacy.planned_epsilon             # from the rewritten store
    faithful = make_plan(compose(*job, "runtime.faithful=true")).privacy.planned_epsilon
    after = make_plan(compose(*job)).privacy.planned_epsilon
    np.testing.assert_allclose(read, 0.5 * honest, rtol=1e-12)
    np.testing.assert_array_equal(faithful, honest)                      # computed, not the memory's
    np.testing.assert_array_equal(after, read)                          # the store is on again
    _clear_memory()
    args = (1.3, 100, 2400, 1, 3, 1e-5, "pld")
    participation_epsilon(*args)                                        # outside any plan: stored
    assert _poison(store, 0.5) > 0
    _clear_memory()
    assert participation_epsilon(*args) == 0.5 * accounting._epsilon_after.uncached(*args)


def test_the_store_setting_is_the_calling_threads_alone(store):
    """``accountant_store(False)`` in one thread (a faithful plan) leaves another thread's calls on
    the store, and neither sees the other's answers in memory."""
    from concurrent.futures import ThreadPoolExecutor

    args = (1.3, 100, 2400, 1, 35, 1.7e-7, "rdp")
    honest = participation_epsilon(*args)
    _poison(store, 2.0)
    _clear_memory()
    with accountant_store(False), ThreadPoolExecutor(1) as other:
        elsewhere = other.submit(participation_epsilon, *args).result()   # that thread reads the store
        here = participation_epsilon(*args)
    assert elsewhere == 2.0 * honest and here == honest
    assert participation_epsilon(*args) == 2.0 * honest


def test_the_key_covers_every_fedray_module_the_stored_functions_read():
    """SOURCES lists the modules whose code the answers depend on: the accounting modules import no
    other fedray module (one that did would have to join SOURCES)."""
    import ast

    here = REPO / "fedray" / "privacy"
    for name in stored.SOURCES:
        tree = ast.parse((here / name).read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        fedray_modules = {m for m in imported if m.startswith("fedray")}
        allowed = {"fedray.privacy", "fedray.privacy.stored", "fedray.privacy.replace_one_pld", "fedray.data.download"}
        assert fedray_modules <= allowed, (name, fedray_modules - allowed)


def test_arguments_other_than_numbers_and_strings_are_refused():
    @stored.stored
    def size(values) -> float:
        return float(len(values))

    with pytest.raises(TypeError, match="numbers and strings"):
        size([1, 2])


@pytest.mark.slow
def test_planning_the_main_job_again_imports_no_dp_accounting(tmp_path):
    """The start-up claim: with the answers stored, planning needs neither dp-accounting nor scipy.stats."""
    script = (
        "import sys\n"
        "from tests.conftest import compose\n"
        "from fedray.plan import make_plan\n"
        "plan = make_plan(compose('data=synthetic', 'participation.silos_per_round=5', 'privacy=paper', 'privacy.epsilon=2.0', 'num_rounds=30'))\n"
        "print(plan.privacy.planned_epsilon.max())\n"
        "print(sorted({m.split('.')[0] + '.' + m.split('.')[1] if m.startswith('scipy.') else m.split('.')[0]\n"
        "              for m in sys.modules if m.startswith(('dp_accounting', 'scipy.stats'))}))\n"
    )
    env = {**os.environ, "FEDRAY_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    first, second = (run.stdout.splitlines() for run in runs)
    assert first[0] == second[0]                          # the same planned epsilon, from the store
    assert "dp_accounting" in first[1]                    # computed the first time
    assert second[1] == "[]"


def test_a_ledger_reads_one_stored_answer_per_run_of_rdp_counts(store):
    """A new count every round: counts 1..64 are one stored answer, 65..128 the next, 129 a third."""
    epsilons = [participation_epsilon(1.3, 100, 2400, 1, count, 1e-5, "rdp") for count in range(1, 130)]
    assert _rdp_epsilons.cache_info().misses == 3 and _rdp_epsilons.cache_info().hits == 126
    assert np.all(np.diff(epsilons) > 0)
    longer, = _rdp_epsilons.uncached(1.3, 100, 2400, 1, 4 * RDP_HORIZON, 1e-5)
    assert np.array_equal(epsilons, longer[:129])       # a count's epsilon does not depend on its run
