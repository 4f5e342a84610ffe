"""Schema drift between epochs (issue 11, defect 2): a running writer re-validates the table's
definition in every epoch's transaction (under the table's ROW EXCLUSIVE lock, so it cannot
change until commit) and re-plans when it changed; an incompatible change is a ConfigError
before any byte is sent — never values written in the old column types."""

from __future__ import annotations

import datetime as dt
import json
import threading
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa
import pytest

import laminar
from laminar import ConfigError, DataError
from laminar.kafka.log import read_partition
from tests.integration.pg_helpers import create_table, query, sink_epoch

pytestmark = pytest.mark.integration


def alter(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


def rows(epoch: int, n: int = 3) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([epoch * 10 + i for i in range(n)], pa.int64()),
            "a": pa.array([42 + i for i in range(n)], pa.int64()),
            "d": pa.array([i for i in range(n)], pa.int32()),
        }
    )


def test_a_type_change_that_the_batch_cannot_fill_is_refused_before_any_row(
    pg_dsn: str, table_name: str
) -> None:
    """The reported case: int8 → float8 and int4 → date while the writer runs. The writer used
    to keep sending int8/int4 binary (42 stored as 2.08e-322 and 2000-02-12)."""
    table = create_table(pg_dsn, table_name, "(id int8, a int8, d int4)")
    sink = laminar.PostgresSink(pg_dsn, table)
    writer = laminar.exactly_once(sink)
    try:
        writer.write_epoch(0, rows(0))
        alter(
            pg_dsn,
            f"ALTER TABLE {table} ALTER COLUMN a TYPE float8,"
            " ALTER COLUMN d TYPE date USING date '2000-01-01' + d",
        )
        with pytest.raises(ConfigError, match=r"column 'a'.*double precision|column 'd'.*date"):
            writer.write_epoch(1, rows(1))
        assert sink_epoch(pg_dsn, sink.sink_id) == 0  # nothing of epoch 1 committed
        fixed = pa.table(
            {
                "id": pa.array([10], pa.int64()),
                "a": pa.array([42.5], pa.float64()),
                "d": pa.array([dt.date(2024, 2, 29)], pa.date32()),
            }
        )
        assert writer.write_epoch(1, fixed).committed
    finally:
        writer.close()
    assert query(pg_dsn, f"SELECT id, a, d FROM {table} ORDER BY id") == [
        (0, 42.0, dt.date(2000, 1, 1)),
        (1, 43.0, dt.date(2000, 1, 2)),
        (2, 44.0, dt.date(2000, 1, 3)),
        (10, 42.5, dt.date(2024, 2, 29)),
    ]


def test_a_compatible_type_change_is_replanned_and_written_exactly(
    pg_dsn: str, table_name: str
) -> None:
    """int8 → numeric(20, 2) and int4 → int8: the same Arrow batch now needs other binary
    encodings; the writer re-plans and the values are exact."""
    table = create_table(pg_dsn, table_name, "(id int8, a int8, d int4)")
    writer = laminar.exactly_once(laminar.PostgresSink(pg_dsn, table))
    try:
        writer.write_epoch(0, rows(0, 1))
        alter(pg_dsn, f"ALTER TABLE {table} ALTER COLUMN a TYPE numeric(20, 2)")
        writer.write_epoch(1, rows(1, 1))
        alter(pg_dsn, f"ALTER TABLE {table} ALTER COLUMN d TYPE int8")
        writer.write_epoch(2, rows(2, 1))
    finally:
        writer.close()
    assert query(pg_dsn, f"SELECT id, a, d FROM {table} ORDER BY id") == [
        (0, Decimal("42.00"), 0),
        (10, Decimal("42.00"), 0),
        (20, Decimal("42.00"), 0),
    ]


def test_added_and_dropped_columns_are_seen_without_a_restart(pg_dsn: str, table_name: str) -> None:
    table = create_table(pg_dsn, table_name, "(id int8, a int8, d int4)")
    writer = laminar.exactly_once(laminar.PostgresSink(pg_dsn, table))
    try:
        writer.write_epoch(0, rows(0, 1))
        alter(pg_dsn, f"ALTER TABLE {table} ADD COLUMN note text")
        writer.write_epoch(1, rows(1, 1).append_column("note", pa.array(["hello"])))
        alter(pg_dsn, f"ALTER TABLE {table} DROP COLUMN d")
        with pytest.raises(ConfigError, match=r"no column 'd'.*id \(bigint\), a \(bigint\), note"):
            writer.write_epoch(2, rows(2, 1))
        writer.write_epoch(2, rows(2, 1).drop_columns(["d"]))
    finally:
        writer.close()
    assert query(pg_dsn, f"SELECT id, a, note FROM {table} ORDER BY id") == [
        (0, 42, None),
        (10, 42, "hello"),
        (20, 42, None),
    ]


def test_a_table_dropped_and_created_again_is_read_again(pg_dsn: str, table_name: str) -> None:
    table = create_table(pg_dsn, table_name, "(id int8, a int8, d int4)")
    writer = laminar.exactly_once(laminar.PostgresSink(pg_dsn, table))
    try:
        writer.write_epoch(0, rows(0, 1))
        alter(pg_dsn, f"DROP TABLE {table}; CREATE TABLE {table} (id int8, a numeric, d int8)")
        writer.write_epoch(1, rows(1, 1))
    finally:
        writer.close()
    assert query(pg_dsn, f"SELECT id, a, d FROM {table}") == [(10, Decimal(42), 0)]


def test_an_identity_always_column_added_later_is_refused(pg_dsn: str, table_name: str) -> None:
    table = create_table(pg_dsn, table_name, "(id int8 NOT NULL, a int8, d int4)")
    writer = laminar.exactly_once(laminar.PostgresSink(pg_dsn, table))
    try:
        writer.write_epoch(0, rows(0, 1))
        alter(pg_dsn, f"ALTER TABLE {table} ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY")
        with pytest.raises(ConfigError, match="GENERATED ALWAYS AS IDENTITY"):
            writer.write_epoch(1, rows(1, 1))
    finally:
        writer.close()


def test_the_definition_cannot_change_while_an_epoch_is_open(pg_dsn: str, table_name: str) -> None:
    """The epoch's transaction holds the table's ROW EXCLUSIVE lock from its first write to its
    commit: an ALTER TABLE waits (here: times out) instead of changing the types under it."""
    table = create_table(pg_dsn, table_name, "(id int8, a int8, d int4)")
    sink = laminar.PostgresSink(pg_dsn, table)
    sink.init_transactions()
    outcome: list[BaseException | None] = []
    try:
        assert sink.begin_transaction(0)
        sink.write(rows(0))

        def try_alter() -> None:
            try:
                with psycopg.connect(pg_dsn, autocommit=True) as conn:
                    conn.execute("SET lock_timeout = '500ms'")
                    conn.execute(f"ALTER TABLE {table} ALTER COLUMN a TYPE float8")
                outcome.append(None)
            except psycopg.Error as e:
                outcome.append(e)

        thread = threading.Thread(target=try_alter)
        thread.start()
        thread.join(10)
        sink.commit_transaction(0)
    finally:
        sink.close()
    assert isinstance(outcome[0], psycopg.errors.LockNotAvailable)
    assert query(pg_dsn, f"SELECT a FROM {table} ORDER BY id") == [(42,), (43,), (44,)]


def test_after_a_value_the_server_refuses_the_table_is_read_again(
    pg_dsn: str, table_name: str
) -> None:
    table = create_table(pg_dsn, table_name, "(id int8, a int8 CHECK (a < 100), d int4)")
    sink = laminar.PostgresSink(pg_dsn, table)
    writer = laminar.exactly_once(sink)
    try:
        bad = rows(0, 1).set_column(1, "a", pa.array([500], pa.int64()))
        with pytest.raises(DataError):
            writer.write_epoch(0, bad)
        assert sink._readiness.info is None  # the cached definition is dropped, not trusted
        alter(pg_dsn, f"ALTER TABLE {table} ALTER COLUMN a TYPE numeric")
        writer.write_epoch(0, rows(0, 1))
    finally:
        writer.close()
    assert query(pg_dsn, f"SELECT a FROM {table}") == [(Decimal(42),)]


def test_an_atomic_group_refuses_an_incompatible_change_before_kafka_gets_a_byte(
    kafka_broker: Any, kafka_bootstrap: str, pg_dsn: str, unique_name: Any
) -> None:
    """In an atomic group Kafka used to hold 100 while PostgreSQL held 4.94e-322. The table is
    checked before the Kafka transaction opens; after a compatible change both stores agree."""
    topic, name = unique_name("drift"), unique_name("drift")
    kafka_broker.create_topic(topic, partitions=1)
    table = create_table(pg_dsn, name, "(id int8, name text, amount int8)")
    tid = f"drift-{topic}"
    kafka = laminar.KafkaSink(kafka_bootstrap, topic, tid, key="id", init_timeout_s=15.0)
    writer = laminar.exactly_once(kafka, laminar.PostgresSink(pg_dsn, table), retry_backoff_s=0.01)

    def batch(epoch: int) -> pa.Table:
        return pa.table(
            {
                "id": pa.array([epoch], pa.int64()),
                "name": pa.array([f"n{epoch}"]),
                "amount": pa.array([100], pa.int64()),
            }
        )

    try:
        writer.write_epoch(0, batch(0))
        alter(pg_dsn, f"ALTER TABLE {table} ALTER COLUMN amount TYPE float8")
        with pytest.raises(ConfigError, match="amount"):
            writer.write_epoch(1, batch(1))
        alter(pg_dsn, f"ALTER TABLE {table} ALTER COLUMN amount TYPE numeric(12, 1)")
        writer.write_epoch(1, batch(1))
    finally:
        writer.close()
    assert kafka_rows_amounts(kafka_bootstrap, topic, tid) == [(0, 100), (1, 100)]
    assert query(pg_dsn, f"SELECT id, amount FROM {table} ORDER BY id") == [
        (0, Decimal(100)),
        (1, Decimal("100.0")),
    ]


def kafka_rows_amounts(bootstrap: str, topic: str, tid: str) -> list[tuple[int, int]]:
    log = read_partition(bootstrap, topic, 0)
    # nothing of the refused attempt was even produced: no aborted or open records
    assert not log.aborted
    assert not log.open
    out = []
    for record in log.committed:
        assert record.header("laminar.sink") == tid.encode()
        value = json.loads(record.value or b"null")
        out.append((value["id"], value["amount"]))
    return sorted(out)
