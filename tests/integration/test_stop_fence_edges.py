"""The stop fence of ``format("laminar")`` at its edges (docs/spark.md, "Stopping a query in the
middle of a batch"; docs/protocol.md §4): `resolve_stopped` and the writer's lift on a group that
never ran, run twice, a database at schema version 2 or without the ``laminar`` schema, a task
running concurrently, a new query on the fenced group, a group id with odd characters
(test_stop_fence.py: the common path).

The data source's entry points are called directly (no Spark), against a real PostgreSQL and a
real Apache Kafka broker; every row is checked once with its exact value, and nothing may be
left prepared (`pg_prepared_xacts`) or undecided (``dt_state``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from laminar.errors import ConfigError
from laminar.metadata import MIGRATIONS, SCHEMA_VERSION, applied_version, ensure_schema
from laminar.spark.source import LaminarStreamWriter, resolve_stopped, write_task
from tests.integration.test_stop_fence import (
    PARTS,
    batch_rows,
    check_stores,
    fence_of,
    left_behind,
    make_group,
    run_batch,
    stop_mid_batch,
    task,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def pg_group(
    clean_prepared_xacts: str,
    table_name: str,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    """A PostgreSQL-only group in the session's test database."""
    return make_group(
        clean_prepared_xacts, "postgres", table_name, "", unique_name("g"), monkeypatch
    )


@pytest.fixture
def fresh_db(postgres: Any, unique_name: Callable[[str], str]) -> str:
    """A new database on the session's server: no ``laminar`` schema at all."""
    return str(postgres.create_database(unique_name("db").replace("-", "_")[:60]))


def test_resolve_stopped_on_a_group_that_never_ran(
    fresh_db: str, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    g = make_group(fresh_db, "postgres", "public.t", "", unique_name("g"), monkeypatch)
    resolve_stopped(g["raw"])
    assert fence_of(g) == 0, "nothing committed: the first epoch is fenced"
    late = task(g, 0, 0, "0-late")
    assert {r.status for r in late.results} == {"skipped"}
    assert left_behind(g) == ([], [])
    run_batch(g, 0, "1")
    assert fence_of(g) is None
    check_stores(g, range(1))


def test_resolve_stopped_twice_in_a_row(pg_group: dict[str, Any]) -> None:
    g = pg_group
    stop_mid_batch(g, 1)
    resolve_stopped(g["raw"])
    assert fence_of(g) == 1, "a second resolution keeps the same fence"
    assert left_behind(g) == ([], [])
    assert {r.status for r in task(g, 1, 3, "0-late").results} == {"skipped"}
    run_batch(g, 1, "1")
    run_batch(g, 2, "1")
    check_stores(g, range(3))


def test_a_database_at_schema_version_2(
    fresh_db: str, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(fresh_db) as conn:
        assert ensure_schema(conn, migrations=MIGRATIONS[:2]) == 2
    g = make_group(fresh_db, "postgres", "public.t", "", unique_name("g"), monkeypatch)
    LaminarStreamWriter(g["options"])  # the lift finds no table: no fence, no error
    with psycopg.connect(fresh_db) as conn:
        assert applied_version(conn) == 2, "the writer's lift does not migrate"
    resolve_stopped(g["raw"])
    with psycopg.connect(fresh_db) as conn:
        assert applied_version(conn) == SCHEMA_VERSION, "resolve_stopped migrates to the last"
    assert fence_of(g) == 0
    run_batch(g, 0, "1")
    run_batch(g, 1, "1")
    check_stores(g, range(2))


def test_the_writers_lift_without_the_laminar_schema(
    fresh_db: str, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    g = make_group(fresh_db, "postgres", "public.t", "", unique_name("g"), monkeypatch)
    LaminarStreamWriter(g["options"])
    with psycopg.connect(fresh_db) as conn:
        assert applied_version(conn) is None
    run_batch(g, 0, "0")
    check_stores(g, range(1))


@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.1, 0.2, 0.3, 0.5])
def test_resolve_stopped_concurrently_with_tasks(pg_group: dict[str, Any], delay_s: float) -> None:
    """Tasks of the stopped batch run in threads while `resolve_stopped` runs: whatever order
    they meet in, nothing is left prepared or undecided, and the next run writes once — also
    when a worker of the stopped batch is still on its way when the restart writes (the
    restart's writer reserves the fence for its tasks: test_stop_fence.py,
    ``test_a_stopped_worker_after_the_restarts_task_of_its_partition_writes_nothing``)."""
    g = pg_group
    run_batch(g, 0, "0")
    stopped = LaminarStreamWriter(g["options"]).token
    errors: list[BaseException] = []

    def worker(part: int) -> None:
        try:
            task(g, 1, part, f"0-{part}", stopped)
        except BaseException as e:  # a task may fail; it must leave nothing behind
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(p,)) for p in PARTS]
    for t in threads:
        t.start()
    time.sleep(delay_s)  # the resolution meets the tasks at another step each time
    resolve_stopped(g["raw"])
    for t in threads:
        t.join(60)
    assert left_behind(g) == ([], [])
    run_batch(g, 1, "1")
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "every task of the stopped batch ended"
    check_stores(g, range(2))


def test_a_new_query_refused_on_the_group_lifts_the_fence_and_resolve_stopped_cleans_up(
    pg_group: dict[str, Any],
) -> None:
    """Any writer's creation lifts the fence, before the owner guard refuses a new query (a new
    checkpoint) on the fenced group — for that writer's tasks only: the stopped query's
    abandoned worker arriving after that writes nothing. A caller of `write_task` naming no
    writer is not told apart and prepares (the documented limit, docs/spark.md); a second
    `resolve_stopped` rolls it back and fences again; the stopped query's restart then writes
    every row once."""
    g = pg_group
    stopped = stop_mid_batch(g, 1)
    LaminarStreamWriter(g["options"])  # a new query (a new checkpoint) on the same options
    with pytest.raises(ConfigError):
        write_task(g["options"], 0, "spark:another-query", 0, iter(batch_rows(0, 0)), attempt="x")
    # the stopped query's abandoned worker arrives now: the fence is the new writer's
    assert {r.status for r in task(g, 1, 2, "0-late", stopped).results} == {"skipped"}
    # a caller naming no writer is not told apart from the new query's tasks: it prepares
    late = task(g, 1, 2, "0-late")
    assert {r.status for r in late.results} == {"prepared"}
    resolve_stopped(g["raw"])
    assert left_behind(g) == ([], [])
    assert fence_of(g) == 1
    run_batch(g, 1, "1")
    check_stores(g, range(2))


@pytest.mark.parametrize("kind", ["postgres", "both"])
def test_a_group_id_with_odd_characters(
    kind: str,
    clean_prepared_xacts: str,
    kafka_broker: Any,
    table_name: str,
    topic_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = f"g:1 'q\" %s ü/{table_name}"
    g = make_group(
        clean_prepared_xacts,
        kind,
        table_name,
        topic_name,
        group,
        monkeypatch,
        kafka_broker,
    )
    stop_mid_batch(g, 1)
    assert fence_of(g) == 1
    assert {r.status for r in task(g, 1, 2, "0-late").results} == {"skipped"}
    run_batch(g, 1, "1")
    check_stores(g, range(2))


def test_a_task_that_prepares_after_the_resolution(pg_group: dict[str, Any]) -> None:
    """A task of the stopped batch created its record before the fence and is held in its
    write (the table locked by another session) while `resolve_stopped` runs; it prepares after
    the resolution. Nothing may be left prepared or undecided afterwards, and the next run
    writes every row once."""
    g = pg_group
    run_batch(g, 0, "0")
    LaminarStreamWriter(g["options"])
    outcome: list[Any] = []

    def worker() -> None:
        try:
            outcome.append(task(g, 1, 0, "0-0"))
        except BaseException as e:
            outcome.append(e)

    with psycopg.connect(g["dsn"]) as blocker:
        blocker.execute(f"LOCK TABLE {g['table']} IN ACCESS EXCLUSIVE MODE")
        t = threading.Thread(target=worker)
        t.start()
        deadline = time.monotonic() + 30
        while left_behind(g)[0] == [] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left_behind(g)[0] != [], "the task created its record"
        time.sleep(0.5)
        # the resolution waits for the task's claim (its share lock on the record): in a thread
        resolver = threading.Thread(target=lambda: outcome.append(resolve_stopped(g["raw"])))
        resolver.start()
        time.sleep(1.0)
    t.join(60)
    resolver.join(60)
    assert not t.is_alive()
    assert not resolver.is_alive()
    assert left_behind(g) == ([], []), outcome
    run_batch(g, 1, "1")
    check_stores(g, range(2))
