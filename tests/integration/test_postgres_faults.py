"""PostgresSink under faults, against a real PostgreSQL: processes killed at every protocol step,
connections terminated mid-epoch and during COMMIT, a COMMIT whose reply is lost, server
restarts, lock timeouts and deadlocks. Every test ends by proving each epoch landed exactly once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import laminar
from laminar import AbortableError, InDoubtError, PostgresSink, TransactionState
from laminar._core import CrashPoint
from laminar.postgres import _recovery as _pg_recovery
from laminar.postgres import _steps as _pg_steps
from laminar.postgres import sink as postgres
from tests.integration.pg_helpers import (
    CommitReplyDropper,
    backend_pids,
    batch,
    count_by_epoch,
    create_table,
    duplicates,
    query,
    run_child,
    sink_epoch,
    terminate,
    wait_for,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def table(pg_dsn: str, table_name: str) -> str:
    return create_table(pg_dsn, table_name)


def assert_exactly_once(dsn: str, table: str, epochs: range, rows: int = 5) -> None:
    assert count_by_epoch(dsn, table) == dict.fromkeys(epochs, rows)
    assert duplicates(dsn, table) == 0


# -- the process dies (SIGKILL) at each step -------------------------------------------------------


#: The points a lone (one-phase) PostgreSQL sink reaches — every point of the enum's "postgres"
#: protocol but those of PREPARE TRANSACTION (test_postgres_2pc.py) — and whether the epoch is
#: committed by then.
ONE_PHASE = [
    (p.name, p.decided) for p in CrashPoint.for_protocol("postgres") if p.after != "sink_prepare"
]


@pytest.mark.parametrize(("point", "committed_before_crash"), ONE_PHASE)
def test_sigkill_at_each_step_then_recovery_is_exactly_once(
    pg_dsn: str, table: str, point: str, committed_before_crash: bool
) -> None:
    """The writer is killed during epoch 1; a new process replays epoch 1 (as Spark does) and
    goes on. Before COMMIT nothing of epoch 1 survives; after it, the replay is skipped."""
    sink = PostgresSink(pg_dsn, table)
    crashed = run_child(sink, [0, 1, 2], crash_at=f"{point}@2")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert crashed.stdout.split() == ["0", "committed"]
    expected = {0: 5, 1: 5} if committed_before_crash else {0: 5}
    assert count_by_epoch(pg_dsn, table) == expected  # nothing partial is visible
    resumed = run_child(sink, [1, 2])
    assert resumed.returncode == 0, resumed.stderr
    replay = "skipped" if committed_before_crash else "committed"
    assert resumed.stdout.split() == ["1", replay, "2", "committed"]
    assert_exactly_once(pg_dsn, table, range(3))
    assert sink_epoch(pg_dsn, sink.sink_id) == 2


# -- fault injection at a protocol step, in this process -------------------------------------------


@pytest.fixture
def at_step(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, Callable[[], None]], None]]:
    """``at_step(name, action)``: run ``action`` the first time the sink reaches crash point
    ``name`` (instead of killing the process)."""
    actions: dict[str, Callable[[], None]] = {}

    def hook(name: str) -> None:
        action = actions.pop(name, None)
        if action is not None:
            action()

    monkeypatch.setattr(postgres, "crash_point", hook)
    monkeypatch.setattr(_pg_steps, "crash_point", hook)
    monkeypatch.setattr(_pg_recovery, "crash_point", hook)  # the sink is split over modules

    def register(name: str, action: Callable[[], None]) -> None:
        actions[name] = action

    return register


def terminate_sink_backend(dsn: str, sink_id: str) -> Callable[[], None]:
    def action() -> None:
        [pid] = backend_pids(dsn, f"laminar {sink_id}")
        terminate(dsn, pid)
        wait_for(lambda: pid not in backend_pids(dsn, f"laminar {sink_id}"), what="backend exit")

    return action


def test_connection_terminated_mid_copy_is_abortable_and_retried(
    pg_dsn: str, table: str, at_step: Any
) -> None:
    sink = PostgresSink(pg_dsn, table, sink_id="terminated-mid-copy")
    writer = laminar.exactly_once(sink, retry_backoff_s=0.01)
    writer.write_epoch(0, batch(0))
    at_step("postgres.mid_copy", terminate_sink_backend(pg_dsn, sink.sink_id))
    result = writer.write_epoch(1, batch(1))
    assert result.committed
    assert result.attempts == 2
    assert_exactly_once(pg_dsn, table, range(2))
    assert sink.metrics.aborts == 1
    writer.close()


def test_connection_terminated_mid_epoch_surfaces_as_abortable(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table, sink_id="terminated-lifecycle")
    assert sink.begin_transaction(0)
    terminate_sink_backend(pg_dsn, sink.sink_id)()
    with pytest.raises(AbortableError) as info:
        sink.write(batch(0))
    assert info.value.requires_abort
    assert info.value.epoch == 0
    assert isinstance(info.value.__cause__, psycopg.OperationalError)
    # no silent reconnect inside the epoch: a new session would hold neither the claim nor rows
    with pytest.raises(AbortableError, match="connection holding epoch 0's transaction was lost"):
        sink.write(batch(0))
    with pytest.raises(AbortableError, match="was lost"):
        sink.commit_transaction(0)
    assert count_by_epoch(pg_dsn, table) == {}
    sink.abort_transaction(0)  # the transaction died with the session
    assert sink.begin_transaction(0)  # reconnects
    sink.write(batch(0))
    sink.commit_transaction(0)
    assert_exactly_once(pg_dsn, table, range(1))
    sink.close()


def test_connection_terminated_before_commit_is_in_doubt_then_resolved(
    pg_dsn: str, table: str, at_step: Any
) -> None:
    sink = PostgresSink(pg_dsn, table, sink_id="terminated-at-commit")
    sink.init_transactions()
    assert sink.begin_transaction(0)
    sink.write(batch(0))
    at_step("postgres.before_commit", terminate_sink_backend(pg_dsn, sink.sink_id))
    with pytest.raises(InDoubtError) as info:
        sink.commit_transaction(0)
    assert info.value.epoch == 0
    assert sink.transaction_state == TransactionState.Failed(0)
    assert sink.metrics.commit_failures == 1
    # recovery reads laminar.sink_epochs: the session died before COMMIT, so not committed
    assert sink.recover() is None
    assert sink.transaction_state == TransactionState.Idle()
    record = sink.tracker.record(0)
    assert record is not None
    assert record.state == "Aborted"
    assert record.resolved_by_recovery
    # ... and the coordinator does the same on its own, then retries
    writer = laminar.exactly_once(sink, retry_backoff_s=0.01)
    at_step("postgres.before_commit", terminate_sink_backend(pg_dsn, sink.sink_id))
    result = writer.write_epoch(0, batch(0))
    assert result.committed
    assert result.attempts == 2
    assert_exactly_once(pg_dsn, table, range(1))
    writer.close()


def test_a_lost_commit_reply_is_resolved_as_committed_without_a_rewrite(
    postgres: Any, pg_dsn: str, table: str
) -> None:
    proxy = CommitReplyDropper(postgres.host, postgres.port)
    try:
        sink = PostgresSink(proxy.dsn(pg_dsn), table, sink_id="lost-commit-reply")
        writer = laminar.exactly_once(sink)
        writer.write_epoch(0, batch(0))
        proxy.arm()
        result = writer.write_epoch(1, batch(1))
        assert proxy.cuts == 1
        # the commit happened, its reply was lost: in doubt, recovered as committed, not rewritten
        assert result.committed
        assert result.attempts == 1
        assert sink.metrics.commit_failures == 1
        record = sink.tracker.record(1)
        assert record is not None
        assert record.state == "Committed"
        assert record.resolved_by_recovery
        assert_exactly_once(pg_dsn, table, range(2))
        assert writer.write_epoch(1, batch(1)).skipped
        writer.close()
    finally:
        proxy.close()


def test_a_lost_commit_reply_from_a_new_process_point_of_view(
    postgres: Any, pg_dsn: str, table: str
) -> None:
    proxy = CommitReplyDropper(postgres.host, postgres.port)
    try:
        sink = PostgresSink(proxy.dsn(pg_dsn), table, sink_id="lost-commit-new-process")
        sink.begin_transaction(0)
        sink.write(batch(0))
        proxy.arm()
        with pytest.raises(InDoubtError):
            sink.commit_transaction(0)
        # another process (Spark restarted the query) replays epoch 0: it learns the outcome
        fresh = PostgresSink(pg_dsn, table, sink_id="lost-commit-new-process")
        assert laminar.exactly_once(fresh).write_epoch(0, batch(0)).skipped
        assert sink.recover() == 0
        assert_exactly_once(pg_dsn, table, range(1))
        sink.close()
        fresh.close()
    finally:
        proxy.close()


# -- the server restarts ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "immediate"])
@pytest.mark.parametrize("step", ["postgres.mid_copy", "postgres.before_commit"])
def test_server_restarted_during_an_epoch(
    postgres_factory: Any, table_name: str, at_step: Any, mode: str, step: str
) -> None:
    server = postgres_factory()
    table = create_table(server.dsn, table_name)
    sink = PostgresSink(server.dsn, table)
    writer = laminar.exactly_once(sink, retries=5, retry_backoff_s=0.2)
    writer.write_epoch(0, batch(0))
    at_step(step, lambda: server.restart(mode))
    result = writer.write_epoch(1, batch(1, rows=50))
    assert result.committed
    assert result.attempts == 2
    assert count_by_epoch(server.dsn, table) == {0: 5, 1: 50}
    assert duplicates(server.dsn, table) == 0
    writer.close()


def test_nothing_partial_is_visible_after_a_crash_restart(
    postgres_factory: Any, table_name: str
) -> None:
    server = postgres_factory()
    table = create_table(server.dsn, table_name)
    sink = PostgresSink(server.dsn, table, slice_bytes=4096)
    sink.begin_transaction(0)
    sink.write(batch(0, rows=5000))  # several COPY statements already sent
    server.kill()  # SIGKILL the postmaster and backends: a machine crash
    server.start()
    assert count_by_epoch(server.dsn, table) == {}
    assert sink_epoch(server.dsn, sink.sink_id) is None
    # the epoch's last statement fails on the dead session: known not committed, so abortable
    with pytest.raises(AbortableError):
        sink.commit_transaction(0)
    sink.abort_transaction(0)
    assert sink.recover() is None
    assert laminar.exactly_once(sink).write_epoch(0, batch(0, rows=5000)).committed
    assert count_by_epoch(server.dsn, table) == {0: 5000}
    sink.close()


# -- locks: timeouts and deadlocks -----------------------------------------------------------------


def test_a_lock_timeout_is_abortable(pg_dsn: str, table: str) -> None:
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, options="-c lock_timeout=200ms")
    sink = PostgresSink(dsn, table)
    sink.init_transactions()
    with psycopg.connect(pg_dsn) as blocker:
        blocker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(AbortableError, match=r"55P03.*lock_timeout") as info:
            laminar.exactly_once(sink, retries=1, retry_backoff_s=0.01).write_epoch(0, batch(0))
        assert info.value.retriable
        blocker.rollback()
    assert sink.transaction_state == TransactionState.Idle()
    assert laminar.exactly_once(sink).write_epoch(0, batch(0)).committed
    assert_exactly_once(pg_dsn, table, range(1))
    sink.close()


def test_a_deadlock_is_abortable_and_the_epoch_is_retried(pg_dsn: str, table: str) -> None:
    """The sink holds its epoch row and waits for the table; another session holds the table
    and waits for the epoch row. PostgreSQL breaks the cycle by failing the sink (40P01)."""
    sink = PostgresSink(pg_dsn, table, sink_id="deadlocked")
    laminar.exactly_once(sink).write_epoch(0, batch(0))  # the epoch row exists
    with psycopg.connect(pg_dsn) as other:
        other.execute("SET deadlock_timeout = '30s'")  # the sink's backend detects it first
        assert sink.begin_transaction(1)  # holds the sink_epochs row
        other.execute(f"LOCK TABLE {table} IN SHARE MODE")  # blocks COPY
        waited: dict[str, Any] = {}

        def take_the_row() -> None:
            try:
                other.execute(
                    "SELECT epoch FROM laminar.sink_epochs WHERE sink_id = %s FOR UPDATE",
                    (sink.sink_id,),
                )
                other.commit()
                waited["ok"] = True
            except psycopg.Error as e:
                waited["error"] = e

        thread = threading.Thread(target=take_the_row)
        thread.start()
        wait_for(
            lambda: bool(
                query(
                    pg_dsn,
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                )[0][0]
            ),
            what="the other session to wait for the epoch row",
        )
        with pytest.raises(AbortableError, match="40P01") as info:
            sink.write(batch(1))
        sink.abort_transaction(1)
        thread.join(30)
        assert waited == {"ok": True}
        assert isinstance(info.value.__cause__, psycopg.errors.DeadlockDetected)
    assert laminar.exactly_once(sink).write_epoch(1, batch(1)).committed
    assert_exactly_once(pg_dsn, table, range(2))
    sink.close()


def test_a_cancelled_statement_is_abortable(pg_dsn: str, table: str) -> None:
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, options="-c statement_timeout=150ms")
    sink = PostgresSink(dsn, table)
    sink.init_transactions()
    with psycopg.connect(pg_dsn) as blocker:
        blocker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        assert sink.begin_transaction(0)
        with pytest.raises(AbortableError, match="57014"):
            sink.write(batch(0))
        sink.abort_transaction(0)
    assert laminar.exactly_once(sink).write_epoch(0, batch(0)).committed
    sink.close()
