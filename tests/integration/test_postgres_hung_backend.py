"""A PostgreSQL backend that hangs mid-epoch — SIGSTOPped: its socket open, the kernel still
acknowledging what the writer sends, nothing answering (libpq has no client-side query time-out)
— ends in a bounded, retriable error (`AbortableError`, or `InDoubtError` for a COMMIT in flight),
not a writer blocked forever: the sink's deadline on every answer (``statement_timeout_s``,
`laminar.postgres._deadline`, docs/postgres.md "A hung server"). After SIGCONT the batch's replay
writes the epoch once: the hung backend's transaction either commits (a COMMIT it had read) or
rolls back (its client gone), and the epoch's row lock keeps the replay off it until it has.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

import laminar
import laminar.engine.loop as driver_module
from laminar._core import CrashPoint
from laminar.errors import InDoubtError, LaminarError
from laminar.postgres import sink as postgres_module
from tests.integration.atomic_helpers import (
    assert_exact_values,
    assert_nothing_open,
    create_table,
    epoch_table,
)
from tests.integration.pg_helpers import backend_pids, count_by_epoch, duplicates

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

#: The sink's budget for one answer of the server, and the writer's retries of a failed epoch:
#: each attempt meets the hung backend (or its locks) once.
STATEMENT_TIMEOUT_S = 2.0
RETRIES = 1
#: What a write may take before its error: every attempt's deadline, plus slack for the rest.
WITHIN_S = STATEMENT_TIMEOUT_S * (RETRIES + 1) + 3.0


class Hang:
    """SIGSTOPs the backend of the connection named ``application_name`` when the crash point
    ``step`` is reached (through ``module``'s ``crash_point``), and SIGCONTs it on `resume`."""

    def __init__(self, dsn: str, application_name: str, module: Any, step: str) -> None:
        self.dsn, self.application_name = dsn, application_name
        self.module, self.real = module, module.crash_point
        self.point = CrashPoint.parse(step)
        self.pids: list[int] = []

    def __call__(self, reached: CrashPoint | str) -> None:
        point = CrashPoint.parse(reached) if isinstance(reached, str) else reached
        if point == self.point and not self.pids:
            self.pids = backend_pids(self.dsn, self.application_name)
            assert len(self.pids) == 1, f"backends of {self.application_name!r}: {self.pids}"
            os.kill(self.pids[0], signal.SIGSTOP)
        self.real(reached)

    def resume(self) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):  # ended since: a COMMIT, a terminate
                os.kill(pid, signal.SIGCONT)


@pytest.fixture
def hangs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Hang]]:
    """Installs each `Hang` appended; SIGCONTs every stopped backend afterwards, whatever
    happened."""
    installed: list[Hang] = []
    try:
        yield installed
    finally:
        for hang in installed:
            hang.resume()


def install(hangs: list[Hang], monkeypatch: pytest.MonkeyPatch, hang: Hang) -> None:
    hangs.append(hang)
    monkeypatch.setattr(hang.module, "crash_point", hang)


def write_failing(writer: Any, epoch: int) -> tuple[LaminarError, float]:
    started = time.monotonic()
    with pytest.raises(LaminarError) as caught:
        writer.write_epoch(epoch, epoch_table(epoch))
    return caught.value, time.monotonic() - started


@pytest.mark.parametrize(
    "step",
    ["atomic.after_kafka_prepare", "atomic.after_decision_rows"],
    ids=["rows", "decision-commit"],
)
def test_a_hung_decision_backend_ends_in_a_retriable_error_and_the_replay_writes_once(
    kafka_broker: Any,
    pg_dsn: str,
    topic_name: str,
    table_name: str,
    unique_name: Any,
    clean_prepared_xacts: str,
    hangs: list[Hang],
    monkeypatch: pytest.MonkeyPatch,
    step: str,
) -> None:
    """The atomic pair's decision connection (its PostgreSQL rows, its decision) hangs before
    the rows are written, or with the decision's COMMIT in flight."""
    kafka_broker.create_topic(topic_name, partitions=2)
    create_table(pg_dsn, table_name)
    bootstrap = kafka_broker.bootstrap_servers
    kafka = laminar.KafkaSink(bootstrap, topic_name, unique_name("tx"), key="id")
    postgres = laminar.PostgresSink(pg_dsn, table_name, statement_timeout_s=STATEMENT_TIMEOUT_S)
    writer = laminar.exactly_once(kafka, postgres, retries=RETRIES, retry_backoff_s=0.1)
    writer.write_epoch(0, epoch_table(0))
    hang = Hang(pg_dsn, f"laminar group {writer.group_id}"[:63], driver_module, step)
    install(hangs, monkeypatch, hang)

    error, took = write_failing(writer, 1)
    assert hang.pids, f"{step} was never reached"
    assert error.retriable, repr(error)
    assert took < WITHIN_S, f"{took:.1f} s for a hung backend: {error!r}"
    assert "given up" in str(error), str(error)  # the deadline, or the backend it left
    hang.resume()

    writer.write_epoch(1, epoch_table(1))  # Spark's replay of the batch
    writer.write_epoch(2, epoch_table(2))
    writer.close()
    print(f"{step}: {type(error).__name__} after {took:.1f} s")
    assert_exact_values(bootstrap, topic_name, pg_dsn, table_name, epochs=3)
    assert_nothing_open(bootstrap, topic_name, pg_dsn)


def test_a_hung_backend_during_a_lone_sinks_commit_is_in_doubt_then_written_once(
    pg_dsn: str, table_name: str, hangs: list[Hang], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone PostgresSink's own session hangs with its COMMIT in flight: the outcome is unknown
    (`InDoubtError`, retriable); after SIGCONT the replay finds the epoch committed once, or
    writes it."""
    create_table(pg_dsn, table_name)
    sink = laminar.PostgresSink(pg_dsn, table_name, statement_timeout_s=STATEMENT_TIMEOUT_S)
    writer = laminar.exactly_once(sink, retries=RETRIES, retry_backoff_s=0.1)
    writer.write_epoch(0, epoch_table(0))
    hang = Hang(pg_dsn, f"laminar {sink.sink_id}"[:63], postgres_module, "postgres.before_commit")
    install(hangs, monkeypatch, hang)

    error, took = write_failing(writer, 1)
    assert hang.pids, "postgres.before_commit was never reached"
    assert isinstance(error, InDoubtError), repr(error)  # recovery resolves it
    assert took < WITHIN_S, f"{took:.1f} s for a hung backend: {error!r}"
    hang.resume()

    for epoch in (1, 2):
        writer.write_epoch(epoch, epoch_table(epoch))
    writer.close()
    print(f"lone sink, COMMIT in flight: {type(error).__name__} after {took:.1f} s")
    assert count_by_epoch(pg_dsn, table_name) == {0: 20, 1: 20, 2: 20}
    assert duplicates(pg_dsn, table_name) == 0
