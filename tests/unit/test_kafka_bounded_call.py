"""The bound around librdkafka's transactional calls (librdkafka #5456): a call that does not
return is given up, its producer kept alive until it does; errors and results pass through."""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref

import pytest

from laminar.kafka import _calls as calls


class Blocking:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.returned = threading.Event()

    def send_offsets_to_transaction(self, *args: object) -> None:
        self.release.wait(30)
        self.returned.set()

    def commit_transaction(self, timeout: float) -> None:
        raise ValueError(f"refused after {timeout}")

    def abort_transaction(self, timeout: float) -> None:
        return None


def test_a_stuck_call_is_given_up_and_its_producer_kept_until_it_returns() -> None:
    producer = Blocking()
    with pytest.raises(calls.StuckCallError):
        calls.bounded_call(producer, "send_offsets_to_transaction", (), 0.01)
    assert producer in calls.ABANDONED
    producer.release.set()
    assert producer.returned.wait(10)
    for _ in range(100):
        if producer not in calls.ABANDONED:
            break
        threading.Event().wait(0.05)
    assert producer not in calls.ABANDONED


def test_errors_and_returns_pass_through() -> None:
    producer = Blocking()
    with pytest.raises(ValueError, match=r"refused after 1\.5"):
        calls.bounded_call(producer, "commit_transaction", (1.5,), 1.5)
    calls.bounded_call(producer, "abort_transaction", (1.0,), 1.0)
    assert producer not in calls.ABANDONED


def test_the_helper_threads_are_reused() -> None:
    producer = Blocking()
    calls.bounded_call(producer, "abort_transaction", (1.0,), 1.0)
    threads = threading.active_count()
    for _ in range(50):
        calls.bounded_call(producer, "abort_transaction", (1.0,), 1.0)
    assert threading.active_count() == threads


def test_a_forked_child_starts_its_own_helper_threads() -> None:
    producer = Blocking()
    calls.bounded_call(producer, "abort_transaction", (1.0,), 1.0)  # an idle helper here
    pid = os.fork()
    if pid == 0:  # the child: the parent's helper thread does not exist here
        try:
            calls.bounded_call(producer, "abort_transaction", (1.0,), 0.5)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


class Owner:
    """What holds a producer in a sink: the producer's callbacks reach it, and its marker
    reader with it."""

    def __init__(self) -> None:
        self.producer = Blocking()


def _commit(owner: Owner) -> None:
    calls.bounded_call(owner.producer, "commit_transaction", (1.0,), 1.0)


def test_a_failed_call_leaves_nothing_of_its_caller_alive_in_the_helper_thread() -> None:
    # the error's traceback holds the caller's frames (the sink): the idle helper thread kept
    # the job, and the sink with its clients reconnecting, until its next job
    def fail() -> weakref.ref[Owner]:
        owner = Owner()
        with pytest.raises(ValueError, match="refused"):
            _commit(owner)
        return weakref.ref(owner)

    gone = fail()
    for _ in range(200):  # the helper lets go just after it hands the result over
        gc.collect()
        if gone() is None:
            break
        time.sleep(0.01)
    assert gone() is None
