"""PostgresSink as a two-phase-commit participant (PREPARE TRANSACTION), against a real server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import psycopg
import pytest

import laminar
from laminar import (
    ConfigError,
    IllegalStateError,
    InDoubtError,
    PostgresSink,
    PreparedTxnState,
    TransactionState,
)
from laminar._core import CrashPoint
from laminar.postgres._steps import claim_epoch
from tests.integration.pg_helpers import (
    REPO,
    CommitReplyDropper,
    batch,
    count_by_epoch,
    create_table,
    query,
    sink_epoch,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def table(clean_prepared_xacts: str, table_name: str) -> str:
    return create_table(clean_prepared_xacts, table_name)


def prepared_gids(dsn: str) -> list[str]:
    return [r[0] for r in query(dsn, "SELECT gid FROM pg_prepared_xacts ORDER BY gid")]


def test_prepare_then_commit_prepared(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table, sink_id="2pc:commit")  # ':' in the id is escaped
    assert sink.begin_transaction(3)
    sink.write(batch(3, rows=4))
    before = int(time.time() * 1000)
    state = sink.prepare_transaction()
    assert isinstance(state, PreparedTxnState)
    assert (state.transactional_id, state.epoch, state.record_count) == ("2pc:commit", 3, 4)
    assert before <= state.created_at_ms <= int(time.time() * 1000)
    assert sink.transaction_state == TransactionState.Prepared(3)
    assert prepared_gids(pg_dsn) == ["laminar:2pc%3Acommit:3:0"]
    assert count_by_epoch(pg_dsn, table) == {}  # durable, invisible
    [listed] = sink.prepared_transactions()
    assert (listed.gid, listed.sink_id, listed.epoch, listed.part) == (
        "laminar:2pc%3Acommit:3:0",
        "2pc:commit",
        3,
        0,
    )
    assert listed.age_s >= 0
    assert listed.database == "laminar"
    sink.commit_transaction(3)  # COMMIT PREPARED
    assert prepared_gids(pg_dsn) == []
    assert count_by_epoch(pg_dsn, table) == {3: 4}
    assert sink_epoch(pg_dsn, "2pc:commit") == 3
    assert sink.last_committed_epoch() == 3
    assert not sink.begin_transaction(3)
    sink.close()


def test_prepare_then_rollback_prepared_leaves_the_epoch_retryable(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table, sink_id="2pc-abort")
    assert sink.begin_transaction(0)
    sink.write(batch(0))
    sink.prepare_transaction()
    sink.abort_transaction(0)  # ROLLBACK PREPARED
    assert prepared_gids(pg_dsn) == []
    assert count_by_epoch(pg_dsn, table) == {}
    assert sink_epoch(pg_dsn, "2pc-abort") is None
    assert laminar.exactly_once(sink).write_epoch(0, batch(0)).committed
    sink.close()


def test_a_prepared_transaction_survives_a_server_restart(
    postgres_factory: Any, table_name: str
) -> None:
    server = postgres_factory()
    table = create_table(server.dsn, table_name)
    sink = PostgresSink(server.dsn, table, sink_id="2pc-restart")
    sink.begin_transaction(7)
    sink.write(batch(7))
    sink.prepare_transaction()
    gid = sink.gid(7)
    sink.close()  # leaves the prepared transaction for the coordinator
    server.restart()
    other = PostgresSink(server.dsn, table, sink_id="2pc-restart")
    other.init_transactions()  # logs a warning about the pending gid
    assert [p.gid for p in other.prepared_transactions()] == [gid]
    assert count_by_epoch(server.dsn, table) == {}
    assert other.commit_prepared(gid)
    assert not other.commit_prepared(gid)  # already resolved
    assert count_by_epoch(server.dsn, table) == {7: 5}
    assert other.last_committed_epoch() == 7
    other.close()


def test_prepared_transactions_hold_the_epoch_row(pg_dsn: str, table: str) -> None:
    """A pending prepared epoch keeps its row lock: a second writer cannot claim past it
    until the decision; after ROLLBACK PREPARED it can."""
    first = PostgresSink(pg_dsn, table, sink_id="2pc-hold")
    first.begin_transaction(0)
    first.write(batch(0, tag="first"))
    first.prepare_transaction()
    gid = first.gid(0)
    first.close()
    second = PostgresSink(
        psycopg.conninfo.make_conninfo(pg_dsn, options="-c lock_timeout=200ms"),
        table,
        sink_id="2pc-hold",
    )
    with pytest.raises(laminar.AbortableError, match="55P03"):
        second.begin_transaction(0)
    assert second.rollback_prepared(gid)
    assert laminar.exactly_once(second).write_epoch(0, batch(0, tag="second")).committed
    assert query(pg_dsn, f"SELECT DISTINCT split_part(payload, '-', 1) FROM {table}") == [
        ("second",)
    ]
    second.close()


def test_gids_of_other_sinks_are_refused(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table, sink_id="2pc-mine")
    with pytest.raises(ConfigError, match="not a prepared transaction of sink"):
        sink.commit_prepared("laminar:2pc-other:0:0")
    with pytest.raises(ConfigError):
        sink.rollback_prepared("something-else")
    assert not sink.rollback_prepared(sink.gid(99))  # ours, but no such transaction
    sink.close()


def test_scale_out_partitions_prepare_in_parallel(pg_dsn: str, table: str) -> None:
    """Partitions of one epoch (two_phase_part) prepare without waiting on each other; the
    coordinator records the epoch in its decision transaction and commits each participant."""
    parts = [PostgresSink(pg_dsn, table, sink_id="scale-out", two_phase_part=p) for p in range(3)]
    for p, sink in enumerate(parts):
        assert sink.begin_transaction(0)
        sink.write(batch(0, rows=4, start=p * 4))
    for sink in parts:  # all open at once: no shared row lock between partitions
        sink.prepare_transaction()
    assert len(prepared_gids(pg_dsn)) == 3
    with psycopg.connect(pg_dsn) as coordinator:  # the decision
        assert claim_epoch(coordinator, "scale-out", 0)
        coordinator.commit()
    for p, sink in enumerate(parts):
        assert sink.gid(0) == f"laminar:scale-out:0:{p}"
        sink.commit_transaction(0)
    assert count_by_epoch(pg_dsn, table) == {0: 12}
    # a replay of the decided epoch is skipped by every partition
    replay = PostgresSink(pg_dsn, table, sink_id="scale-out", two_phase_part=1)
    assert not replay.begin_transaction(0)
    assert replay.begin_transaction(1)
    with pytest.raises(IllegalStateError, match="commits only through prepare"):
        replay.commit_transaction(1)
    replay.abort_transaction(1)
    for sink in [*parts, replay]:
        sink.close()


#: The points of a participant's PREPARE TRANSACTION (the core's list: docs/engine.md §6).
AROUND_PREPARE = [p for p in CrashPoint.for_protocol("postgres") if p.after == "sink_prepare"]


@pytest.mark.parametrize("point", [p.name for p in AROUND_PREPARE])
def test_a_participant_killed_around_prepare(pg_dsn: str, table: str, point: str) -> None:
    sink = PostgresSink(pg_dsn, table, sink_id=f"2pc-kill-{point}")
    code = textwrap.dedent(
        f"""
        import laminar
        from tests.integration.pg_helpers import batch
        sink = laminar.PostgresSink({pg_dsn!r}, {table!r}, sink_id={sink.sink_id!r})
        sink.begin_transaction(0)
        sink.write(batch(0))
        sink.prepare_transaction()
        """
    )
    env = dict(os.environ, LAMINAR_CRASH_AT=point)
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, check=False, timeout=60)
    assert done.returncode == -signal.SIGKILL
    pending = sink.prepared_transactions()
    if CrashPoint.parse(point).position == "within":
        assert pending == []  # the session died: its transaction is gone
    else:
        assert [p.gid for p in pending] == [sink.gid(0)]  # survives its process
        assert count_by_epoch(pg_dsn, table) == {}
        assert sink.rollback_prepared(sink.gid(0))  # no decision: roll back (Vitess rule)
    assert laminar.exactly_once(sink).write_epoch(0, batch(0)).committed
    assert count_by_epoch(pg_dsn, table) == {0: 5}
    sink.close()


def test_max_prepared_transactions_zero_is_a_clear_config_error(
    postgres_factory: Any, table_name: str
) -> None:
    server = postgres_factory(max_prepared_transactions=0)
    table = create_table(server.dsn, table_name)
    participant = PostgresSink(server.dsn, table, two_phase_part=0)
    with pytest.raises(ConfigError, match=r"max_prepared_transactions is 0.*restart PostgreSQL"):
        participant.init_transactions()
    sink = PostgresSink(server.dsn, table)
    assert sink.begin_transaction(0)
    sink.write(batch(0))
    with pytest.raises(ConfigError, match="ALTER SYSTEM SET max_prepared_transactions"):
        sink.prepare_transaction()
    # the epoch was rolled back and stays writable in one phase
    assert sink.transaction_state == TransactionState.Idle()
    assert laminar.exactly_once(sink).write_epoch(0, batch(0)).committed
    assert count_by_epoch(server.dsn, table) == {0: 5}
    sink.close()


def test_a_lost_commit_prepared_reply_is_resolved_by_recovery(
    postgres: Any, pg_dsn: str, table: str
) -> None:
    proxy = CommitReplyDropper(postgres.host, postgres.port)
    try:
        sink = PostgresSink(proxy.dsn(pg_dsn), table, sink_id="2pc-lost-reply")
        sink.begin_transaction(0)
        sink.write(batch(0))
        sink.prepare_transaction()
        proxy.arm()
        with pytest.raises(InDoubtError, match="COMMIT PREPARED"):
            sink.commit_transaction(0)
        assert proxy.cuts == 1
        assert sink.transaction_state == TransactionState.Failed(0)
        assert prepared_gids(pg_dsn) == []  # it did commit
        assert sink.recover() == 0
        assert sink.transaction_state == TransactionState.Idle()
        assert count_by_epoch(pg_dsn, table) == {0: 5}
        sink.close()
    finally:
        proxy.close()


def test_a_commit_prepared_after_a_server_restart_is_completed_by_recovery(
    postgres_factory: Any, table_name: str
) -> None:
    server = postgres_factory()
    table = create_table(server.dsn, table_name)
    sink = PostgresSink(server.dsn, table, sink_id="2pc-restart-commit")
    sink.begin_transaction(0)
    sink.write(batch(0))
    sink.prepare_transaction()
    server.restart()  # the session is gone; the prepared transaction is not
    with pytest.raises(InDoubtError):
        sink.commit_transaction(0)
    assert prepared_gids(server.dsn) == [sink.gid(0)]
    assert sink.recover() == 0  # completes the decision that was being sent: COMMIT PREPARED
    assert prepared_gids(server.dsn) == []
    assert count_by_epoch(server.dsn, table) == {0: 5}
    assert laminar.exactly_once(sink).write_epoch(0, batch(0)).skipped
    sink.close()
