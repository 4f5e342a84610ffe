"""Shared helpers of the atomic-group integration tests (not a test module)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from confluent_kafka import Producer

import laminar
from laminar._core import CrashPoint
from tests.integration.kafka_fill import settled_committed as read_committed
from tests.integration.kafka_fill import settled_logs
from tests.integration.kafka_helpers import ids_of

ROWS_PER_EPOCH = 20
WRITER = Path(__file__).with_name("atomic_crash_writer.py")


def epoch_table(epoch: int, rows: int = ROWS_PER_EPOCH) -> pa.Table:
    """Rows with ids unique across epochs: epoch * 1000 + i."""
    ids = [epoch * 1000 + i for i in range(rows)]
    return pa.table({"id": ids, "name": [f"row-{i}" for i in ids], "epoch": [epoch] * rows})


def write_like_spark(
    writer: laminar.ExactlyOnceWriter,
    checkpoint: str | Path,
    epochs: int,
    batch: Callable[[int], pa.Table],
    *,
    pause_s: float = 0.0,
) -> None:
    """What a crash-test writer process does, as Spark would: ``checkpoint`` lists the epochs
    whose ``foreachBatch`` returned, and the writer resumes at the first one not listed (Spark
    replays the batch that did not return); each epoch's outcome is printed, then ``done``."""
    done = Path(checkpoint)
    finished = [int(x) for x in done.read_text().split()] if done.exists() else []
    for epoch in range(max(finished, default=-1) + 1, epochs):
        time.sleep(pause_s)
        result = writer.write_epoch(epoch, batch(epoch))
        with done.open("a") as f:
            f.write(f"{epoch}\n")
        print(f"epoch {epoch}: {'committed' if result.committed else 'skipped'}", flush=True)
    writer.close()
    print("done", flush=True)


def create_table(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint, name text, epoch bigint)")


def make_group(
    bootstrap: str, topic: str, dsn: str, table: str, tid: str, *, routed: bool = False, **kw: Any
) -> laminar.ExactlyOnceWriter:
    """The atomic pair of the crash tests; ``routed``: the Kafka sink takes Spark's Kafka-sink
    shape (no key column: the batch's ``key``, ``topic``, ``partition`` and ``headers``)."""
    # A crash writer subprocess may be given a short transaction.timeout.ms (the transaction-
    # timeout tests) and a compression codec (the crash tests on a compressed topic) through
    # the environment.
    timeout_ms = os.environ.get("LAMINAR_TEST_TRANSACTION_TIMEOUT_MS")
    codec = os.environ.get("LAMINAR_TEST_KAFKA_COMPRESSION")
    # The Avro crash tests (test_avro_crash.py): values and keys in Avro, this registry.
    registry = os.environ.get("LAMINAR_TEST_AVRO_REGISTRY")
    avro: dict[str, Any] = (
        {"value_format": "avro", "key_format": "avro", "schema_registry": {"url": registry}}
        if registry and not routed
        else {}
    )
    kafka = laminar.KafkaSink(
        bootstrap,
        topic,
        tid,
        key=None if routed else "id",
        commit_timeout_s=5.0,
        init_timeout_s=15.0,
        transaction_timeout_ms=int(timeout_ms) if timeout_ms else None,
        producer_config={"compression.type": codec} if codec else None,
        **avro,
    )
    postgres = laminar.PostgresSink(dsn, table)
    kw.setdefault("retry_backoff_s", 0.1)
    return laminar.exactly_once(kafka, postgres, **kw)


def run_writer(
    args: list[str], crash_at: str | None, *, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("LAMINAR_CRASH_AT", None)
    if crash_at:
        env["LAMINAR_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, str(WRITER), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def killed(result: subprocess.CompletedProcess[str]) -> bool:
    return result.returncode == -signal.SIGKILL


def kill_at_step_and_restart(args: list[str], point: str) -> subprocess.CompletedProcess[str]:
    """Kill the writer at the epoch step ``point``'s second occurrence (epoch 1), restart it and
    return the restarted run, checked: the kill came after epoch 0's commit, and the restart
    ran to the end beginning with epoch 1 — skipped (a replay) when killed after the decision,
    committed otherwise."""
    crashed = run_writer(args, f"{point}@2")
    assert killed(crashed), crashed.stdout + crashed.stderr[-2000:]
    assert crashed.stdout.splitlines() == ["epoch 0: committed"]
    restarted = run_writer(args, None)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr[-2000:]
    first = "skipped" if CrashPoint.parse(point).decided else "committed"
    assert restarted.stdout.splitlines()[0] == f"epoch 1: {first}"
    return restarted


def kill_in_recovery_and_finish(
    args: list[str], bootstrap: str, tid: str, point: str, redo: str, decided_prepared: str
) -> None:
    """Kill the writer once the epoch 1 is decided and Kafka still prepared
    (``decided_prepared``), then again at the start-up or recovery ``point`` (the broker first
    gives the prepared transaction up when that point needs a redo), then let it finish."""
    assert killed(run_writer(args, f"{decided_prepared}@2"))
    crash = CrashPoint.parse(point)
    if crash.protocol == "recovery" and crash.after != "end_txn":
        abort_prepared(bootstrap, tid)  # so that recovery needs the redo
    second = run_writer(args, point)
    # the redo log's points are reached only with redo="log"
    redo_only = crash.after in ("produce_redo", "sink_commit")
    assert killed(second) or (redo_only and redo == "replay"), second.stdout + second.stderr[-2000:]
    final = run_writer(args, None)
    assert final.returncode == 0, final.stdout + final.stderr[-3000:]


def abort_prepared(bootstrap: str, tid: str) -> None:
    """What a broker's transaction timeout does: a new producer with the same transactional id
    aborts the prepared transaction (and bumps the producer epoch)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(15)
    del producer


def assert_exactly_once(bootstrap: str, topic: str, dsn: str, table: str, epochs: int) -> None:
    expected = {e * 1000 + i for e in range(epochs) for i in range(ROWS_PER_EPOCH)}
    with psycopg.connect(dsn) as conn:
        rows = [r[0] for r in conn.execute(f"SELECT id FROM {table}").fetchall()]
    pg = Counter(rows)
    assert not {i for i, n in pg.items() if n > 1}, "rows in PostgreSQL twice"
    missing, extra = sorted(expected - set(pg))[:5], sorted(set(pg) - expected)[:5]
    assert set(pg) == expected, f"PostgreSQL: missing {missing}, extra {extra}"
    kafka = Counter(ids_of(read_committed(bootstrap, topic)))
    assert not {i for i, n in kafka.items() if n > 1}, "records committed in Kafka twice"
    assert set(kafka) == expected, (
        f"Kafka: missing {sorted(expected - set(kafka))[:5]}, "
        f"extra {sorted(set(kafka) - expected)[:5]}"
    )


def assert_exact_values(bootstrap: str, topic: str, dsn: str, table: str, epochs: int) -> None:
    """Every row of epochs ``0 .. epochs-1`` (`epoch_table`) exactly once in each store with its
    exact value — PostgreSQL's row, Kafka's committed record (key, JSON value, epoch header;
    control batches replayed) — and nothing else."""
    want = {
        row["id"]: (row["name"], row["epoch"])
        for e in range(epochs)
        for row in epoch_table(e).to_pylist()
    }
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT id, name, epoch FROM {table}").fetchall()
    twice = [i for i, n in Counter(r[0] for r in rows).items() if n > 1]
    assert not twice, f"rows in PostgreSQL twice: {twice[:5]}"
    got = {r[0]: (r[1], r[2]) for r in rows}
    assert got == want, (
        f"PostgreSQL differs: missing {sorted(want.keys() - got.keys())[:5]}, extra "
        f"{sorted(got.keys() - want.keys())[:5]}, changed "
        f"{[i for i in want.keys() & got.keys() if want[i] != got[i]][:5]}"
    )
    records = read_committed(bootstrap, topic)
    values = [json.loads(r.value) for r in records]
    twice = [i for i, n in Counter(v["id"] for v in values).items() if n > 1]
    assert not twice, f"records committed in Kafka twice: {twice[:5]}"
    got = {v["id"]: (v["name"], v["epoch"]) for v in values}
    assert got == want, (
        f"Kafka differs: missing {sorted(want.keys() - got.keys())[:5]}, extra "
        f"{sorted(got.keys() - want.keys())[:5]}"
    )
    for r, v in zip(records, values, strict=True):
        assert r.key == str(v["id"]).encode(), (r.key, v)
        assert r.header("laminar.epoch") == str(v["epoch"]).encode(), (r.headers, v)


def assert_nothing_open(bootstrap: str, topic: str, dsn: str) -> None:
    """No prepared PostgreSQL transaction in the database, and no Kafka transaction left open in
    the topic (every transactional record resolved by a marker)."""
    with psycopg.connect(dsn) as conn:
        prepared = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall()
    assert prepared == [], f"prepared transactions left: {prepared}"
    logs = settled_logs(bootstrap, topic, within_s=30.0)
    still_open = {p: len(log.open) for p, log in logs.items() if log.open}
    assert not still_open, f"open Kafka transactions in {topic}: {still_open}"
