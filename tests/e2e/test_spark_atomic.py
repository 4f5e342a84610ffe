"""Spark Connect → Kafka + PostgreSQL *atomically* (an atomic group: docs/protocol.md §3) through
``laminar.spark``: a rate source and a file source, stop and restart from the checkpoint, the
foreachBatch worker SIGKILLed in the middle of an epoch (held at a protocol step, then killed from
here), the query restarted: every order exactly once in each store.

Kafka is counted among the topic's *committed* records with `laminar.kafka.log` (control batches
replayed, never a broker's read_committed; the session's Apache Kafka broker);
PostgreSQL by key. All tests share the session's Spark Connect server (one client session).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest

import laminar
import laminar.spark
from tests.e2e.spark_helpers import (
    ArmedForeachBatch,
    assert_exactly_once,
    held_pid,
    kafka_epochs,
    kafka_ids,
    pg_epoch,
    pg_ids,
    start_files_query,
    wait_for,
    wait_terminated,
    write_json_files,
)


def atomic_sinks(
    bootstrap: str, topic: str, dsn: str, table: str, transactional_id: str
) -> tuple[laminar.KafkaSink, laminar.PostgresSink]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint NOT NULL, amount double precision)")
    kafka = laminar.KafkaSink(
        bootstrap, topic, transactional_id, key="id", commit_timeout_s=10, init_timeout_s=20
    )
    return kafka, laminar.PostgresSink(dsn, table)


def assert_both_exactly_once(
    bootstrap: str, topic: str, dsn: str, table: str, expected: set[int], where: str
) -> None:
    assert_exactly_once(pg_ids(dsn, table), expected, f"postgres {where}")
    assert_exactly_once(kafka_ids(bootstrap, topic), expected, f"kafka {where}")


def redo_rows(dsn: str, transactional_id: str, before_epoch: int | None = None) -> int:
    """Redo-log rows of ``transactional_id`` (of epochs before ``before_epoch``, if given)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM laminar.redo WHERE transactional_id = %s"
            " AND (%s::bigint IS NULL OR epoch < %s::bigint)",
            (transactional_id, before_epoch, before_epoch),
        ).fetchone()
    return 0 if row is None else int(row[0])


def test_rate_source_into_both_across_stop_and_restart(
    spark_client: Any,
    kafka_broker: Any,
    pg_dsn: str,
    topic_name: str,
    table_name: str,
    unique_name: Any,
    tmp_path: Path,
) -> None:
    kafka_broker.create_topic(topic_name, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    kafka, postgres = atomic_sinks(bootstrap, topic_name, pg_dsn, table_name, unique_name("tx"))
    checkpoint = str(tmp_path / "checkpoint")
    runs = []
    for _ in range(2):
        orders = (
            spark_client.readStream.format("rate")
            .option("rowsPerSecond", 40)
            .option("numPartitions", 2)
            .load()
            .selectExpr("value AS id", "CAST(value % 97 AS double) + 0.5 AS amount")
        )
        query = laminar.spark.start(
            orders,
            kafka=kafka,
            postgres=postgres,
            checkpoint_location=checkpoint,
            trigger="500 milliseconds",
            check_server=not runs,  # the probe once is enough
        )
        try:
            target = (pg_epoch(pg_dsn, postgres.sink_id) or 0) + 3
            wait_for(
                lambda t=target: (pg_epoch(pg_dsn, postgres.sink_id) or 0) >= t,
                query=query,
                what=f"epoch {target} decided",
            )
        finally:
            query.stop()
        runs.append(query)

    assert runs[0].id == runs[1].id  # the same query, continued from its checkpoint
    ids = pg_ids(pg_dsn, table_name)
    # The rate source numbers rows 0, 1, 2, … without gaps: every committed batch is a range.
    assert_both_exactly_once(
        bootstrap, topic_name, pg_dsn, table_name, set(range(max(ids) + 1)), "after 2 runs"
    )
    # Each decided epoch is committed in Kafka too (its records carry the epoch header).
    last = pg_epoch(pg_dsn, postgres.sink_id)
    assert last is not None
    assert last >= 6
    assert max(kafka_epochs(bootstrap, topic_name)) == last


@pytest.mark.parametrize(
    ("point", "redo", "decided"),
    [
        # Kafka flushed (prepared), no decision yet: the next producer's init aborts it; the
        # replay of the batch writes the epoch to both stores.
        ("atomic.after_kafka_prepare", "replay", False),
        # decided (PostgreSQL committed), Kafka prepared: recovery completes Kafka's part
        # (EndTxn with the recorded producer id/epoch, else the replay) and the replay is
        # skipped.
        ("atomic.after_decision", "replay", True),
        # the same with a redo log: Kafka's part needs no replay; the log is dropped after.
        ("atomic.after_decision", "log", True),
    ],
)
def test_worker_sigkilled_mid_epoch_then_query_restarted(
    spark_client: Any,
    kafka_broker: Any,
    pg_dsn: str,
    topic_name: str,
    table_name: str,
    unique_name: Any,
    tmp_path: Path,
    point: str,
    redo: str,
    decided: bool,
) -> None:
    kafka_broker.create_topic(topic_name, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    tid = unique_name("tx")
    kafka, postgres = atomic_sinks(bootstrap, topic_name, pg_dsn, table_name, tid)
    source = tmp_path / "incoming"
    checkpoint = str(tmp_path / "checkpoint")
    hold = tmp_path / "held"
    total = write_json_files(source, 0, files=5, rows_per_file=100)
    writer = laminar.exactly_once(kafka, postgres, redo=redo, retry_backoff_s=0.1)
    real = laminar.spark.foreach_batch(writer, checkpoint_location=checkpoint)

    def start(function: Any) -> Any:
        return start_files_query(spark_client, source, checkpoint, function)

    # The third epoch (2) holds at the step; the worker's pid is in the hold file.
    crashed = start(ArmedForeachBatch(real, f"{point}@3", str(hold)))
    wait_for(lambda: held_pid(hold) is not None, query=crashed, what=f"the worker held at {point}")
    worker = held_pid(hold)
    assert worker is not None
    # Mid-epoch: epochs 0-1 everywhere; epoch 2 decided in PostgreSQL only past step 7.
    assert pg_epoch(pg_dsn, postgres.sink_id) == (2 if decided else 1)
    assert set(kafka_epochs(bootstrap, topic_name)) == {0, 1}
    if redo == "log":
        assert redo_rows(pg_dsn, tid) > 0  # epoch 2's records, kept with the decision
    os.kill(worker, signal.SIGKILL)
    error = wait_terminated(crashed)
    assert error is not None
    assert "Python worker exited unexpectedly" in str(error), error

    assert wait_terminated(start(real)) is None
    assert_both_exactly_once(
        bootstrap, topic_name, pg_dsn, table_name, set(range(total)), "after the restart"
    )
    assert pg_epoch(pg_dsn, postgres.sink_id) == 4
    assert kafka_epochs(bootstrap, topic_name) == {epoch: 100 for epoch in range(5)}
    # The redo log keeps at most the last decided epoch (dropped when the next one is decided).
    assert redo_rows(pg_dsn, tid, before_epoch=4) == 0
    with psycopg.connect(pg_dsn) as conn:
        decision = conn.execute(
            "SELECT epoch FROM laminar.txn_state WHERE transactional_id = %s", (tid,)
        ).fetchone()
    assert decision == (4,)
