"""The ``laminar`` metadata schema: created on first use, versioned, idempotent, safe when several
processes migrate at once, and refusing a database written by a newer laminar."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from laminar import ConfigError, PostgresSink
from laminar.metadata import MIGRATIONS, SCHEMA_VERSION, Migration, applied_version, ensure_schema
from tests.integration.pg_helpers import create_table, query

pytestmark = pytest.mark.integration


@pytest.fixture
def fresh_db(postgres: Any, unique_name: Callable[[str], str]) -> str:
    """A database of its own, without the laminar schema."""
    return str(postgres.create_database(unique_name("db")))


def columns_of(dsn: str, table: str) -> list[tuple[str, str, bool]]:
    return [
        (name, typ, nullable == "YES")
        for name, typ, nullable in query(
            dsn,
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE table_schema = 'laminar' AND table_name = %s ORDER BY ordinal_position",
            (table,),
        )
    ]


def test_the_v1_schema_as_created(fresh_db: str) -> None:
    with psycopg.connect(fresh_db) as conn:
        assert applied_version(conn) is None
        conn.rollback()
        assert ensure_schema(conn, migrations=MIGRATIONS[:1]) == 1
    assert columns_of(fresh_db, "schema_version") == [
        ("version", "integer", False),
        ("applied_at", "timestamp with time zone", False),
        ("description", "text", False),
    ]
    assert columns_of(fresh_db, "sinks") == [
        ("sink_id", "text", False),
        ("kind", "text", False),
        ("owner", "text", True),
        ("generation", "bigint", False),
        ("config", "jsonb", False),
        ("created_at", "timestamp with time zone", False),
        ("updated_at", "timestamp with time zone", False),
    ]
    assert columns_of(fresh_db, "sink_epochs") == [
        ("sink_id", "text", False),
        ("epoch", "bigint", False),
        ("committed_at", "timestamp with time zone", False),
        ("rows", "bigint", False),
        ("bytes", "bigint", False),
    ]
    assert query(fresh_db, "SELECT version FROM laminar.schema_version") == [(1,)]


def test_v3_adds_the_stop_fence_to_a_v2_database(fresh_db: str) -> None:
    with psycopg.connect(fresh_db) as conn:
        assert ensure_schema(conn, migrations=MIGRATIONS[:2]) == 2
        conn.execute(
            "INSERT INTO laminar.dt_state (dtid, group_id, epoch, state)"
            " VALUES ('laminar:g:1', 'g', 1, 'prepare')"
        )
        conn.commit()
    assert columns_of(fresh_db, "stop_fence") == []
    with psycopg.connect(fresh_db) as conn:
        assert ensure_schema(conn, migrations=MIGRATIONS[:3]) == 3
    assert columns_of(fresh_db, "stop_fence") == [
        ("group_id", "text", False),
        ("epoch", "bigint", False),
        ("fenced_at", "timestamp with time zone", False),
    ]
    assert query(fresh_db, "SELECT max(version) FROM laminar.schema_version") == [(3,)]
    # the v2 rows are untouched
    assert query(fresh_db, "SELECT dtid, state FROM laminar.dt_state") == [
        ("laminar:g:1", "prepare")
    ]


def test_v4_adds_the_commit_statistics_to_a_v3_database(fresh_db: str) -> None:
    from laminar._stats import BUCKETS_S, count

    with psycopg.connect(fresh_db) as conn:
        assert ensure_schema(conn, migrations=MIGRATIONS[:3]) == 3
        conn.execute("INSERT INTO laminar.stop_fence (group_id, epoch) VALUES ('g', 3)")
        conn.commit()
    assert columns_of(fresh_db, "commit_stats") == []
    with psycopg.connect(fresh_db) as conn:
        assert ensure_schema(conn, migrations=MIGRATIONS[:4]) == 4
    assert columns_of(fresh_db, "commit_stats") == [
        ("group_id", "text", False),
        ("commits", "bigint", False),
        ("aborts", "bigint", False),
        ("latency_sum_s", "double precision", False),
        ("latency_buckets", "ARRAY", False),
        ("updated_at", "timestamp with time zone", False),
    ]
    assert query(fresh_db, "SELECT group_id, epoch FROM laminar.stop_fence") == [("g", 3)]
    # counted as the writer counts: element-wise into the buckets, best effort, own transaction
    with psycopg.connect(fresh_db) as conn:
        count(conn, "g", committed_s=0.02)
        count(conn, "g", committed_s=0.02, aborted=2)
        count(conn, "g", committed_s=100.0)
        count(conn, "g", aborted=1)
        count(conn, "other", aborted=1)
        conn.execute("SELECT 1")  # a transaction open: not counted, nothing committed for it
        count(conn, "g", committed_s=1.0)
        conn.rollback()
    ((commits, aborts, total, buckets),) = query(
        fresh_db,
        "SELECT commits, aborts, latency_sum_s, latency_buckets FROM laminar.commit_stats"
        " WHERE group_id = 'g'",
    )
    assert (commits, aborts, total) == (3, 3, 100.04)
    assert len(buckets) == len(BUCKETS_S) + 1
    assert buckets[2] == 2  # 0.02 s: (0.01, 0.025]
    assert buckets[-1] == 1  # above 60 s
    assert sum(buckets) == 3
    other = "SELECT commits, aborts FROM laminar.commit_stats WHERE group_id = 'other'"
    assert query(fresh_db, other) == [(0, 1)]


def test_v5_lets_a_v4_databases_stop_fence_be_reserved(fresh_db: str) -> None:
    from laminar.engine import records
    from laminar.spark import _stop_fence

    with psycopg.connect(fresh_db) as conn:
        assert ensure_schema(conn, migrations=MIGRATIONS[:4]) == 4
        conn.execute("INSERT INTO laminar.stop_fence (group_id, epoch) VALUES ('g', 3), ('h', 4)")
        conn.commit()
        assert [f[:2] for f in records.read_stop_fences(conn, reservable=False)] == [
            ("g", 3),
            ("h", 4),
        ]
    # the writer's lift on a v4 database (no writer column to reserve it) deletes the fence
    assert _stop_fence.lift(fresh_db, "h", "w0") == 4
    assert query(fresh_db, "SELECT group_id FROM laminar.stop_fence") == [("g",)]
    assert [c[0] for c in columns_of(fresh_db, "stop_fence")] == ["group_id", "epoch", "fenced_at"]
    with psycopg.connect(fresh_db) as conn:
        assert ensure_schema(conn) == SCHEMA_VERSION == 5
        assert records.read_stop_fence(conn, "g") == (3, None), "the v4 fence kept, unreserved"
        assert records.reserve_stop_fence(conn, "g", "w1") == 3
        assert records.read_stop_fence(conn, "g") == (3, "w1")
        assert records.read_stop_fences(conn) == [], "a reserved fence is no longer in place"
        assert records.set_stop_fence(conn, "g", 2) == 3, "a new stop: the highest epoch"
        assert records.read_stop_fence(conn, "g") == (3, None), "and reserved for nobody"
        assert records.reserve_stop_fence(conn, "other", "w1") is None, "no fence: nothing"
        conn.commit()
    assert columns_of(fresh_db, "stop_fence")[-1] == ("writer", "text", True)


def test_migrating_twice_changes_nothing(fresh_db: str) -> None:
    with psycopg.connect(fresh_db) as conn:
        ensure_schema(conn)
        ensure_schema(conn)
    assert query(fresh_db, "SELECT count(*) FROM laminar.schema_version") == [(SCHEMA_VERSION,)]


def test_concurrent_first_uses_migrate_once(fresh_db: str) -> None:
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def migrate() -> None:
        try:
            with psycopg.connect(fresh_db) as conn:
                barrier.wait()
                ensure_schema(conn)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=migrate) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert query(fresh_db, "SELECT version FROM laminar.schema_version ORDER BY 1") == [
        (v,) for v in range(1, SCHEMA_VERSION + 1)
    ]


def test_an_appended_migration_applies_only_itself(fresh_db: str) -> None:
    with psycopg.connect(fresh_db) as conn:
        ensure_schema(conn, migrations=MIGRATIONS[:1])
    v2 = Migration(
        2,
        "test: an extra table",
        (
            sql.SQL("CREATE TABLE {} (k text PRIMARY KEY)").format(
                sql.Identifier("laminar", "extra")
            ),
        ),
    )
    with psycopg.connect(fresh_db) as conn:
        assert ensure_schema(conn, migrations=(MIGRATIONS[0], v2)) == 2
        assert ensure_schema(conn, migrations=(MIGRATIONS[0], v2)) == 2
    assert query(
        fresh_db, "SELECT version, description FROM laminar.schema_version ORDER BY 1"
    ) == [
        (1, MIGRATIONS[0].description),
        (2, "test: an extra table"),
    ]
    # a laminar that knows only v1 now meets a newer database
    with psycopg.connect(fresh_db) as conn, pytest.raises(ConfigError, match="newer laminar"):
        ensure_schema(conn, migrations=MIGRATIONS[:1])


def test_a_database_from_a_newer_laminar_is_refused(fresh_db: str, table_name: str) -> None:
    table = create_table(fresh_db, table_name)
    with psycopg.connect(fresh_db) as conn:
        ensure_schema(conn)
        conn.execute(
            "INSERT INTO laminar.schema_version (version, description) VALUES (99, 'future')"
        )
        conn.commit()
    sink = PostgresSink(fresh_db, table)
    with pytest.raises(
        ConfigError, match=rf"version 99, written by a newer laminar.*up to {SCHEMA_VERSION}"
    ):
        sink.init_transactions()


def test_a_sink_creates_the_schema_on_first_use(fresh_db: str, table_name: str) -> None:
    table = create_table(fresh_db, table_name)
    sink = PostgresSink(fresh_db, table)
    sink.init_transactions()
    assert query(fresh_db, "SELECT sink_id, kind FROM laminar.sinks") == [
        (sink.sink_id, "postgres")
    ]
    sink.close()


def test_a_sink_id_of_another_kind_is_refused(fresh_db: str, table_name: str) -> None:
    table = create_table(fresh_db, table_name)
    with psycopg.connect(fresh_db) as conn:
        ensure_schema(conn)
        conn.execute("INSERT INTO laminar.sinks (sink_id, kind) VALUES ('shared', 'kafka')")
        conn.commit()
    with pytest.raises(
        ConfigError, match=r"already registered in laminar\.sinks as a 'kafka' sink"
    ):
        PostgresSink(fresh_db, table, sink_id="shared").init_transactions()
