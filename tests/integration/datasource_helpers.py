"""Helpers of the tests that call the data source's entry points directly (`laminar.spark.source`:
`write_task`, `commit_batch`, `resolve_stopped`, `LaminarStreamWriter`), without Spark: the
partitions they write and what each store holds afterwards (Kafka judged by its committed
records with control batches replayed, `laminar.kafka.log`)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]

from tests.integration.kafka_fill import settled_committed, settled_logs

#: The environment variable that names the decision database in the tests' options.
VAR = "LAMINAR_TEST_DS_DSN"
#: The owner a streaming query's tasks report (``spark:<query id>``).
OWNER = "spark:0b7c5a4e-query"


def both_stores(dsn: str, kafka_broker: Any, table: str, topic: str) -> dict[str, str]:
    """A 2-partition ``topic`` and a ``table (id, name)``, and the data source's options writing
    both atomically (the decision database named by `VAR`, which the caller sets to ``dsn``)."""
    kafka_broker.create_topic(topic, partitions=2)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint, name text)")
    return {
        "postgres.dsn.env": VAR,
        "postgres.table": table,
        "kafka.bootstrap.servers": kafka_broker.bootstrap_servers,
        "kafka.topic": topic,
        "kafka.key.column": "id",
    }


def partition(part: int, rows: int = 50) -> list[pa.RecordBatch]:
    """Partition ``part``'s rows: ids ``part * 1000 ...``, named ``n<id>``, in two batches."""
    ids = list(range(part * 1000, part * 1000 + rows))
    return [
        pa.record_batch({"id": ids[:20], "name": [f"n{i}" for i in ids[:20]]}),
        pa.record_batch({"id": ids[20:], "name": [f"n{i}" for i in ids[20:]]}),
    ]


def expected(parts: range, rows: int = 50) -> list[int]:
    """The ids of `partition` ``p`` for every ``p`` in ``parts``, sorted."""
    return sorted(i for p in parts for i in range(p * 1000, p * 1000 + rows))


def stores(s: dict[str, Any]) -> tuple[list[int], list[int], list[Any]]:
    """The ids in the PostgreSQL table and in the topic's committed records, and what is left
    prepared or undecided (gids, every ``dt_state`` row)."""
    with psycopg.connect(s["dsn"]) as conn:
        pg = sorted(int(r[0]) for r in conn.execute(f"SELECT id FROM {s['table']}"))
        left = conn.execute(
            "SELECT gid FROM pg_prepared_xacts UNION ALL SELECT dtid FROM laminar.dt_state"
        ).fetchall()
    kafka = sorted(
        int(json.loads(r.value)["id"]) for r in settled_committed(s["bootstrap"], s["topic"])
    )
    return pg, kafka, left


def pg_rows(s: dict[str, Any]) -> list[tuple[int, str]]:
    """Every row of the PostgreSQL table with its exact value, ``(id, name)``, sorted."""
    with psycopg.connect(s["dsn"]) as conn:
        return sorted(
            (int(i), str(n)) for i, n in conn.execute(f"SELECT id, name FROM {s['table']}")
        )


def kafka_rows(s: dict[str, Any]) -> list[tuple[int, str]]:
    """Every committed record of the topic as ``(id, name)`` of its JSON value (whose id is
    the record's key), sorted."""
    rows: list[tuple[int, str]] = []
    for r in settled_committed(s["bootstrap"], s["topic"]):
        value = json.loads(r.value)
        assert r.key is not None, r
        assert int(r.key) == value["id"], r
        rows.append((int(value["id"]), str(value["name"])))
    return sorted(rows)


def open_kafka_records(s: dict[str, Any]) -> list[Any]:
    """The topic's records still in an open transaction (after markers in flight landed)."""
    logs = settled_logs(s["bootstrap"], s["topic"], within_s=3.0)
    return [r for log in logs.values() for r in log.open]
