"""A Ctrl-C inside ``interrupts.deferred()`` is raised at the next ``check`` (a safe point), never
where it landed; real SIGINTs sent to this process."""

import os
import signal
import threading

import pytest

from fedray.runtime import interrupts


@pytest.fixture(autouse=True)
def python_default_handler():
    """Each test starts from Python's own SIGINT handler, whatever an earlier test in this process
    left (a command-line job run in-process ignores SIGINT once its run is recorded)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)     # delivered to the main thread before os.kill returns


def test_a_ctrl_c_waits_for_the_next_check():
    landed = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            _ctrl_c()
            landed.append("after the signal")        # the code it landed in runs on
            assert interrupts.pending()
            interrupts.check()
            landed.append("after the check")
    assert landed == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_lock_taken_when_the_ctrl_c_lands_is_released():
    """The deadlock's shape: a lock acquired, the signal, then the release. Raised at once, the
    interrupt would skip the release; deferred, the lock is free when it is raised."""
    lock = threading.Lock()
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            lock.acquire()
            _ctrl_c()
            lock.release()
            interrupts.check()
    assert lock.acquire(blocking=False)


def test_an_unchecked_ctrl_c_is_raised_when_the_block_ends():
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            _ctrl_c()
    assert not interrupts.pending()


def test_after_ignore_a_ctrl_c_is_dropped_and_stays_ignored():
    previous = signal.getsignal(signal.SIGINT)
    try:
        with interrupts.deferred():
            interrupts.ignore()
            _ctrl_c()
            interrupts.check()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        _ctrl_c()                                    # ignored after the block too
    finally:
        signal.signal(signal.SIGINT, previous)


def test_outside_the_main_thread_nothing_is_deferred():
    seen = []

    def job():
        with interrupts.deferred():
            seen.append(signal.getsignal(signal.SIGINT))
            interrupts.check()
    worker = threading.Thread(target=job)
    worker.start()
    worker.join()
    assert seen == [signal.default_int_handler]
