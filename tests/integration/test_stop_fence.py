"""The stop fence of ``format("laminar")`` (docs/spark.md, "Stopping a query in the middle of a
batch"; docs/protocol.md §4): after `resolve_stopped` resolved a query stopped mid-batch, a
worker Spark abandoned before it connected (the late task) finds its batch's record gone and
writes nothing instead of creating it again; the query's next run lifts the fence when it
creates its writer, and writes the batch exactly once.

The data source's entry points are called directly (no Spark), against a real PostgreSQL and a
real Apache Kafka broker; Kafka is judged by its committed records with control batches
replayed (`laminar.kafka.log`), never by a ``read_committed`` consumer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from laminar.spark.options import parse_options
from laminar.spark.source import (
    LaminarStreamWriter,
    abort_batch,
    commit_batch,
    resolve_stopped,
    write_task,
)
from tests.integration.datasource_helpers import (
    OWNER,
    VAR,
    expected,
    kafka_rows,
    open_kafka_records,
    partition,
    pg_rows,
)

pytestmark = pytest.mark.integration

PARTS = range(4)


@pytest.fixture(params=["postgres", "kafka", "both"])
def group(
    request: pytest.FixtureRequest,
    clean_prepared_xacts: str,
    kafka_broker: Any,
    table_name: str,
    topic_name: str,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    """A group of one PostgreSQL sink, one Kafka sink, or both (``laminar.group`` named)."""
    return make_group(
        clean_prepared_xacts,
        str(request.param),
        table_name,
        topic_name,
        unique_name("g"),
        monkeypatch,
        kafka_broker,
    )


def make_group(
    dsn: str,
    kind: str,
    table: str,
    topic: str,
    group: str,
    monkeypatch: pytest.MonkeyPatch,
    broker: Any = None,
) -> dict[str, Any]:
    """The group `group` gives (``kind``: postgres, kafka or both; ``broker`` for Kafka: the
    topic is created), as the helpers below take it."""
    monkeypatch.setenv(VAR, dsn)
    raw: dict[str, str] = {"laminar.group": group}
    if kind in ("postgres", "both"):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table} (id bigint, name text)")
        raw |= {"postgres.dsn.env": VAR, "postgres.table": table}
    if kind in ("kafka", "both"):
        broker.create_topic(topic, partitions=2)
        raw |= {
            "kafka.bootstrap.servers": broker.bootstrap_servers,
            "kafka.topic": topic,
            "kafka.key.column": "id",
        }
    if kind == "kafka":
        raw["laminar.state.dsn.env"] = VAR
    return {
        "kind": kind,
        "raw": raw,
        "options": parse_options(raw),
        "group": group,
        "dsn": dsn,
        "table": table,
        "topic": topic,
        "bootstrap": None if broker is None else broker.bootstrap_servers,
    }


def batch_rows(batch: int, part: int) -> list[Any]:
    """Partition ``part`` of Spark batch ``batch`` (ids ``(4 * batch + part) * 1000 ...``)."""
    return partition(4 * batch + part)


def values(batches: range) -> list[tuple[int, str]]:
    """Every row of these batches with its exact value, sorted."""
    return [(i, f"n{i}") for i in expected(range(4 * batches.start, 4 * batches.stop))]


def task(g: dict[str, Any], batch: int, part: int, attempt: str, writer: str | None = None) -> Any:
    """A task attempt; ``writer``: the token of the writer whose task it is (Spark pickles the
    writer to its tasks), None for a caller that names none."""
    return write_task(
        g["options"],
        batch,
        OWNER,
        part,
        iter(batch_rows(batch, part)),
        attempt=attempt,
        writer=writer,
    )


def writer_tasks(g: dict[str, Any], batch: int, attempt: str, writer: Any) -> list[Any]:
    """Every task of ``batch`` from ``writer`` (a `LaminarStreamWriter`: its token), each
    prepared; their commit messages."""
    messages = [task(g, batch, p, f"{attempt}-{p}", writer.token) for p in PARTS]
    assert {r.status for m in messages for r in m.results} == {"prepared"}
    return messages


def run_batch(g: dict[str, Any], batch: int, attempt: str) -> None:
    """A whole batch as a run of the query does it: the writer's creation, every task, commit."""
    writer = LaminarStreamWriter(g["options"])
    assert commit_batch(g["options"], writer_tasks(g, batch, attempt, writer), batch)


def fence_row(g: dict[str, Any]) -> tuple[int, str | None] | None:
    """The group's ``stop_fence`` row: ``(epoch, writer)`` (None: no row)."""
    with psycopg.connect(g["dsn"]) as conn:
        row = conn.execute(
            "SELECT epoch, writer FROM laminar.stop_fence WHERE group_id = %s", (g["group"],)
        ).fetchone()
    return None if row is None else (int(row[0]), row[1])


def fence_of(g: dict[str, Any]) -> int | None:
    """The epoch of the group's fence in place: not lifted (reserved) by a writer since."""
    row = fence_row(g)
    return None if row is None or row[1] is not None else row[0]


def left_behind(g: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """This group's ``dt_state`` rows and laminar's prepared transactions."""
    with psycopg.connect(g["dsn"]) as conn:
        records = conn.execute(
            "SELECT dtid, state FROM laminar.dt_state WHERE group_id = %s", (g["group"],)
        ).fetchall()
        prepared = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'laminar:%%'"
        ).fetchall()
    return records, prepared


def check_stores(g: dict[str, Any], batches: range) -> None:
    """Every row of ``batches`` once with its exact value in each store of the group, nothing
    left prepared, undecided or open."""
    want = values(batches)
    if g["kind"] in ("postgres", "both"):
        assert pg_rows(g) == want
    if g["kind"] in ("kafka", "both"):
        assert kafka_rows(g) == want
        assert open_kafka_records(g) == [], "no Kafka transaction open"
    assert left_behind(g) == ([], [])


def stop_mid_batch(g: dict[str, Any], batch: int) -> str:
    """The batches before ``batch`` commit; ``batch`` starts (its writer, tasks 0 and 1
    prepare) and the query is stopped; `resolve_stopped` rolls it back and fences the group.
    Returns the stopped batch's writer token (what its abandoned workers carry)."""
    for before in range(batch):
        run_batch(g, before, "0")
    writer = LaminarStreamWriter(g["options"])
    early = [task(g, batch, p, f"0-{p}", writer.token) for p in (0, 1)]
    assert {r.status for m in early for r in m.results} == {"prepared"}
    resolve_stopped(g["raw"])
    assert left_behind(g) == ([], []), "the stopped batch is rolled back and concluded"
    return str(writer.token)


def test_an_abandoned_worker_after_resolve_stopped_writes_nothing(group: dict[str, Any]) -> None:
    g = group
    stopped = stop_mid_batch(g, 1)
    assert fence_of(g) == 1, "the stopped batch's epoch (batch 1 + epoch base 0)"
    # the worker Spark abandoned at the stop runs task 2 of batch 1 now
    late = task(g, 1, 2, "0-late", stopped)
    assert {r.status for r in late.results} == {"skipped"}
    assert all(r.records == 0 and r.prepared_state == "" for r in late.results)
    assert left_behind(g) == ([], []), "no record created, nothing prepared"
    check_stores(g, range(1))
    # the restart: its writer lifts the fence, its tasks write batch 1 again, its commit decides
    run_batch(g, 1, "1")
    assert fence_of(g) is None
    check_stores(g, range(2))


def test_a_stopped_worker_after_the_restarts_writer_writes_nothing(group: dict[str, Any]) -> None:
    """The restart's writer reserves the fence for its own tasks: the stopped batch's abandoned
    worker arriving before them neither creates the record nor claims; they write the batch."""
    g = group
    stopped = stop_mid_batch(g, 1)
    writer = LaminarStreamWriter(g["options"])  # the restart's writer: the fence is lifted
    assert fence_of(g) is None
    assert fence_row(g) == (1, writer.token), "reserved for the restart's writer"
    late = task(g, 1, 2, "0-late", stopped)
    assert {r.status for r in late.results} == {"skipped"}
    assert left_behind(g) == ([], []), "no record created, nothing prepared"
    writer.commit(writer_tasks(g, 1, "1", writer), 1)
    check_stores(g, range(2))


def test_a_stopped_worker_after_the_restarts_task_of_its_partition_writes_nothing(
    group: dict[str, Any],
) -> None:
    """The flaky interleaving of test_stop_fence_edges.py's concurrent test, made to happen: the
    stopped batch's worker of partition 2 reaches the database only after the restart's task
    2 claimed and prepared. Before the writer's reservation it claimed last (rolling the
    restart's partition back) and the restart's commit was refused ("a task attempt other than
    the collected one claimed a partition"); now it writes nothing and the commit decides."""
    g = group
    stopped = stop_mid_batch(g, 1)
    writer = LaminarStreamWriter(g["options"])
    messages = writer_tasks(g, 1, "1", writer)
    late = task(g, 1, 2, "0-late", stopped)
    assert {r.status for r in late.results} == {"skipped"}
    assert all(r.records == 0 and r.prepared_state == "" for r in late.results)
    assert commit_batch(g["options"], messages, 1)
    check_stores(g, range(2))


def test_a_task_naming_no_writer_after_the_restarts_writer_is_one_more_attempt(
    group: dict[str, Any],
) -> None:
    """A caller of `write_task` that names no writer is not told apart from the restart's
    tasks: it is one more attempt of its partition (the last claimant is the one committed)."""
    g = group
    stop_mid_batch(g, 1)
    writer = LaminarStreamWriter(g["options"])  # the restart's writer: the fence is lifted
    assert fence_of(g) is None
    late = task(g, 1, 2, "0-late")
    assert {r.status for r in late.results} == {"prepared"}
    # the restart's tasks: task 2's claim comes last and rolls the late attempt back
    writer.commit(writer_tasks(g, 1, "1", writer), 1)
    check_stores(g, range(2))


def test_a_fence_with_nothing_in_flight_covers_the_next_epoch_until_a_new_run(
    group: dict[str, Any],
) -> None:
    g = group
    run_batch(g, 0, "0")
    run_batch(g, 1, "0")
    # stopped before any task of batch 2 connected: nothing in flight
    report = resolve_stopped(g["raw"])
    assert report is not None
    assert fence_of(g) == 2, "the epoch after the last commit"
    # every task of batch 2 arrives late: none writes
    late = [task(g, 2, p, f"0-{p}") for p in PARTS]
    assert {r.status for m in late for r in m.results} == {"skipped"}
    # a task of a later epoch is not fenced: it creates its record and prepares (Spark's abort
    # of that batch rolls it back and fences that batch too, until a new run's writer)
    later = task(g, 3, 0, "0-later")
    assert {r.status for r in later.results} == {"prepared"}
    abort_batch(g["options"], [later], 3)
    assert left_behind(g) == ([], [])
    assert fence_of(g) == 3, "Spark's abort fences the batch it aborts"
    # the next run: writer, batch 2 and batch 3 commit as usual
    run_batch(g, 2, "1")
    assert fence_of(g) is None
    run_batch(g, 3, "1")
    check_stores(g, range(4))


@pytest.mark.parametrize("group", ["postgres"], indirect=True)
def test_a_task_creating_its_record_holds_the_fence_back(group: dict[str, Any]) -> None:
    """The fence lock: a task between its fence read and its record's creation (held here by a
    session taking the lock as the task's ``read_stop_fence`` does) makes `resolve_stopped`
    wait, and the record it then commits is rolled back with the stopped batch."""
    g = group
    run_batch(g, 0, "0")
    key = f"laminar stop fence {g['group']}"
    resolved: list[Any] = []
    with psycopg.connect(g["dsn"]) as conn:
        conn.execute("SELECT pg_advisory_xact_lock_shared(hashtextextended(%s, 0))", (key,))
        assert (
            conn.execute(
                "SELECT epoch FROM laminar.stop_fence WHERE group_id = %s", (g["group"],)
            ).fetchall()
            == []
        )
        resolver = threading.Thread(target=lambda: resolved.append(resolve_stopped(g["raw"])))
        resolver.start()
        time.sleep(1.0)
        assert resolver.is_alive(), "the fence waits for the task"
        assert fence_of(g) is None
        conn.execute(
            "INSERT INTO laminar.dt_state (dtid, group_id, epoch, state)"
            " VALUES (%s, %s, 1, 'prepare')",
            (f"laminar:{g['group']}:1", g["group"]),
        )
        conn.commit()
    resolver.join(60)
    assert resolved, "resolve_stopped ran once the task's transaction ended"
    assert fence_of(g) == 1
    assert left_behind(g) == ([], []), "the record committed before the fence is rolled back"
