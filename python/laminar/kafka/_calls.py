"""A time bound around librdkafka's transactional calls, on reused daemon threads.

librdkafka's transactional calls (``send_offsets_to_transaction``, ``commit_transaction``,
``abort_transaction``) take a timeout but can ignore it when the coordinator went away
(confluentinc/librdkafka#5456, #5511). `bounded_call` therefore runs the call on a helper thread
and waits for it at most the timeout plus a grace period; a call that does not return is given up
(`StuckCallError`) and its producer kept referenced in `ABANDONED` until the call returns, so the
handle is never destroyed under it.

The helper threads are kept and reused: starting a thread per call cost about 0.1 ms, a tenth of
an abort (the step gates of benches/bench_step_ratios.py measure it). They are daemon threads, so
a call stuck in librdkafka never holds up the interpreter's exit, and a forked child (a Spark
Python worker) starts with none, since the parent's threads do not exist there.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from laminar._faults import fail_point

#: Producers given up on while a call into them was stuck. Kept referenced until that call
#: returns, so the handle is never destroyed under it.
ABANDONED: set[Any] = set()


class StuckCallError(Exception):
    """A librdkafka call did not return within its timeout plus a grace period."""


class _Job:
    __slots__ = ("args", "call", "done", "error", "producer")

    def __init__(self, producer: Any, call: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.producer: Any = producer
        self.call: Callable[..., object] | None = call
        self.args = args
        self.done = threading.Event()
        self.error: BaseException | None = None


class _Worker:
    """One daemon thread running the jobs handed to it, back in the idle list after each."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="laminar-kafka-call", daemon=True).start()

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            try:
                if job.call is not None:
                    job.call(*job.args)
            except BaseException as e:  # handed to the caller's thread
                job.error = e
            finally:
                ABANDONED.discard(job.producer)
                job.producer = job.call = None  # a finished job keeps no producer alive
                with _LOCK:
                    _IDLE.append(self)
                job.done.set()
            # An idle thread keeps nothing of its last job: a failed call's error, raised on in
            # the caller's thread, carries the caller's frames in its traceback — the sink, its
            # producer and its marker reader, alive (and reconnecting) until this thread's next
            # job, which may never come.
            del job


_LOCK = threading.Lock()
_IDLE: list[_Worker] = []
#: What an injected failure of each call is (the rest: a time-out).
_INJECTED = {"send_offsets_to_transaction": KafkaError.COORDINATOR_NOT_AVAILABLE}


def _after_fork_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()
    _IDLE.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def bounded_call(
    producer: Any,
    method: str,
    args: tuple[Any, ...],
    timeout_s: float,
    *,
    grace_s: float | None = None,
) -> None:
    """``producer.<method>(*args)`` on a helper thread, waited for at most ``timeout_s`` plus
    ``grace_s`` (the sink's, from the core's budget rule: docs/kafka.md "Budgets"; without it
    half the time-out, 2 to 10 s). Raises what the call raised, or `StuckCallError`. (The
    failover tests fail the call here with librdkafka's own retriable error:
    `laminar._faults.fail_point`.)"""
    if fail_point(f"kafka.{method}"):
        code = _INJECTED.get(method, KafkaError._TIMED_OUT)
        raise KafkaException(KafkaError(code, "injected (LAMINAR_FAIL_AT)", retriable=True))
    if fail_point("kafka.stuck"):
        raise StuckCallError(method)
    job = _Job(producer, getattr(producer, method), args)
    with _LOCK:
        worker = _IDLE.pop() if _IDLE else None
    if worker is None:
        worker = _Worker()
    worker.jobs.put(job)
    grace = min(10.0, max(2.0, timeout_s / 2)) if grace_s is None else grace_s
    if not job.done.wait(timeout_s + grace):
        ABANDONED.add(producer)
        if job.done.is_set():  # finished in between
            ABANDONED.discard(producer)
        else:
            raise StuckCallError(method)
    error = job.error
    # The error's traceback holds this frame: it must not hold the producer too, or a producer
    # given up could be destroyed wherever the error is dropped — with an exception in flight,
    # its callbacks then fail (`retire`).
    del job, producer
    if error is not None:
        raise error


def retire(producer: Any) -> None:
    """Destroy a producer given up on, on a daemon thread: its destruction may wait on a hung
    broker (not the writer's time), and its callbacks must not run in a thread that has an
    exception in flight (confluent-kafka then raises ``SystemError`` from the next one). A
    producer whose call is still stuck is destroyed when that call returns (`ABANDONED`)."""
    if producer is None or producer in ABANDONED:
        return
    threading.Thread(
        target=_destroy, args=(producer,), name="laminar-kafka-retire", daemon=True
    ).start()


def _destroy(producer: Any) -> None:
    with contextlib.suppress(KafkaException, RuntimeError, BufferError):
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.poll(0)
