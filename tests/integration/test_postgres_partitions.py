"""Scale-out participants of one epoch that write the same key (issue 29), against a real
PostgreSQL: the second partition's upsert waits for the first one's transaction, which — once
prepared — holds the row until the epoch's decision, and the decision waits for the second
partition. Before, that wait never ended (the batch hung; PostgreSQL sees no deadlock). Now the
waiting partition is refused with a `DataError` naming both partitions and the fix, whether the
first one has prepared, is still writing, or waits for the second in turn; a wait for any other
transaction is left alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from laminar import DataError, PostgresSink
from laminar.postgres._names import make_gid
from laminar.postgres._partners import FIRST_LOOK_S
from tests.integration.pg_helpers import create_table, query

pytestmark = pytest.mark.integration

#: How long a refused write may take at most (its first look comes after FIRST_LOOK_S; the
#: bound leaves room for a loaded machine). Before the fix it never returned.
REFUSED_WITHIN_S = 30.0


def rows(ids: list[int], part: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "part": pa.array([part] * len(ids))})


@pytest.fixture
def table(clean_prepared_xacts: str, table_name: str) -> str:
    return create_table(clean_prepared_xacts, table_name, "(id int8 PRIMARY KEY, part int8)")


@pytest.fixture
def sink_id(table_name: str) -> str:
    return f"partners-{table_name}"


@pytest.fixture
def participants(
    clean_prepared_xacts: str, table: str, sink_id: str
) -> Iterator[Callable[..., PostgresSink]]:
    made: list[PostgresSink] = []

    def make(part: int, **kwargs: Any) -> PostgresSink:
        options = {"mode": "upsert", "key": "id", **kwargs}
        sink = PostgresSink(
            clean_prepared_xacts, table, sink_id=sink_id, two_phase_part=part, **options
        )
        sink.init_transactions()
        made.append(sink)
        return sink

    yield make
    for sink in made:
        sink.close()


def write_in_thread(sink: PostgresSink, data: pa.Table) -> dict[str, Any]:
    """``sink.write(data)`` in a thread; the result (``error`` or ``done``) once it returns, or
    an AssertionError when it is still waiting after `REFUSED_WITHIN_S` (its statement is then
    cancelled, so that the test ends instead of hanging with it)."""
    out: dict[str, Any] = {}
    pid, dsn = sink._session.connection().info.backend_pid, sink.resolved_dsn

    def run() -> None:
        started = time.monotonic()
        try:
            sink.write(data)
            out["done"] = True
        except BaseException as e:
            out["error"] = e
        out["took"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(REFUSED_WITHIN_S)
    if thread.is_alive():
        query(dsn, "SELECT pg_cancel_backend(%s)", (pid,))
        thread.join(10)
        raise AssertionError(f"the write still waited after {REFUSED_WITHIN_S:.0f} s")
    return out


def test_a_key_a_prepared_partition_wrote_is_refused_not_waited_for(
    clean_prepared_xacts: str, table: str, sink_id: str, participants: Callable[..., PostgresSink]
) -> None:
    first, second = participants(0), participants(1)
    assert first.begin_transaction(0)
    first.write(rows([1, 2], 0))
    first.prepare_transaction()
    assert second.begin_transaction(0)
    out = write_in_thread(second, rows([3, 2], 1))
    error = out.get("error")
    assert isinstance(error, DataError), out
    message = str(error)
    assert "partition 1 of epoch 0 waits for a row that partition 0" in message
    assert repr(make_gid(sink_id, 0, 0)) in message
    assert "df.repartition('id')" in message
    assert out["took"] >= FIRST_LOOK_S
    # the refused partition's transaction is rolled back; the prepared one is untouched
    assert second.transaction_state.name == "Idle"
    prepared = query(clean_prepared_xacts, "SELECT gid FROM pg_prepared_xacts")
    assert prepared == [(make_gid(sink_id, 0, 0),)]


def test_a_key_a_partition_is_still_writing_is_refused(
    clean_prepared_xacts: str, table: str, participants: Callable[..., PostgresSink]
) -> None:
    first, second = participants(0), participants(1)
    assert first.begin_transaction(0)
    first.write(rows([1], 0))  # not prepared: its session holds the row, and the epoch's tag
    assert second.begin_transaction(0)
    out = write_in_thread(second, rows([1], 1))
    assert isinstance(out.get("error"), DataError), out
    assert "waits for a row that another partition (PostgreSQL session" in str(out["error"])
    # the partition that was first goes on: prepared and committed, its row is the table's
    first.prepare_transaction()
    first.commit_transaction(0)
    assert query(clean_prepared_xacts, f"SELECT id, part FROM {table}") == [(1, 0)]


def test_two_partitions_waiting_for_each_other_are_refused_not_a_deadlock(
    clean_prepared_xacts: str, table: str, participants: Callable[..., PostgresSink]
) -> None:
    """Each has written one key the other writes next (two Arrow batches of a task): found
    before PostgreSQL's deadlock check picks a victim, or named from its deadlock error."""
    first, second = participants(0), participants(1)
    assert first.begin_transaction(0)
    assert second.begin_transaction(0)
    first.write(rows([1], 0))
    second.write(rows([2], 1))
    results: list[dict[str, Any]] = []
    threads = [
        threading.Thread(target=lambda s=s, d=d: results.append(write_in_thread(s, d)))
        for s, d in ((first, rows([2], 0)), (second, rows([1], 1)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(REFUSED_WITHIN_S + 5)
    assert len(results) == 2
    errors = [r["error"] for r in results if "error" in r]
    assert errors, results
    for error in errors:  # never "deadlock detected" (an AbortableError, retried in vain)
        assert isinstance(error, DataError), error
        assert "waits for a row that another partition" in str(error)


def test_a_wait_for_another_writer_is_not_refused(
    clean_prepared_xacts: str, table: str, participants: Callable[..., PostgresSink]
) -> None:
    """A transaction that is not a partition of the epoch (here: another application's
    UPDATE) is waited for, as always."""
    query(clean_prepared_xacts, f"INSERT INTO {table} VALUES (1, 9) RETURNING id")
    with psycopg.connect(clean_prepared_xacts) as other:
        other.execute(f"UPDATE {table} SET part = 8 WHERE id = 1")
        sink = participants(0)
        assert sink.begin_transaction(0)
        timer = threading.Timer(3 * FIRST_LOOK_S + 1.0, other.commit)
        timer.start()
        out = write_in_thread(sink, rows([1], 0))
        timer.join()
    assert out.get("done"), out
    assert out["took"] >= 3 * FIRST_LOOK_S  # it waited, and was looked at, without a refusal
    sink.prepare_transaction()
    sink.commit_transaction(0)
    assert query(clean_prepared_xacts, f"SELECT id, part FROM {table}") == [(1, 0)]


def test_append_mode_partitions_colliding_in_a_unique_index_are_refused(
    clean_prepared_xacts: str, table: str, participants: Callable[..., PostgresSink]
) -> None:
    """The same wait in append mode: two partitions' COPY of one primary key."""
    first, second = (
        participants(0, mode="append", key=None),
        participants(1, mode="append", key=None),
    )
    assert first.begin_transaction(0)
    first.write(rows([5], 0))
    first.prepare_transaction()
    assert second.begin_transaction(0)
    out = write_in_thread(second, rows([5], 1))
    assert isinstance(out.get("error"), DataError), out
    assert "waits for a row that partition 0" in str(out["error"])
    assert "by the unique index's columns" in str(out["error"])
