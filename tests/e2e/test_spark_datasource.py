"""``writeStream.format("laminar")`` over a real Spark Connect server (its own, with the DSN in its
environment and task retries on), a real PostgreSQL and a real Apache Kafka broker: tasks are
the two-phase participants, the driver-side ``commit`` decides (docs/spark.md, "The data
source"). Every record exactly once with its exact value after stops, restarts, a SIGKILLed task
worker, a retried task and a SIGKILLed ``commit`` process; nothing left prepared."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

import laminar.spark
from laminar.embedded import SparkConnectServer
from laminar.spark.source import LaminarDataSource, LaminarStreamWriter, resolve_stopped
from tests.e2e.spark_helpers import (
    DS_DSN_VAR,
    assert_exactly_once,
    client,
    read_committed,
    restarting,
    stop,
    wait_for,
    wait_terminated,
)
from tests.integration.kafka_fill import settled_logs

try:  # the fault-injecting source below travels by value to the server's Python workers
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:  # pragma: no cover - pyspark is in the dev extras
    pass

DSN_VAR = DS_DSN_VAR
ROWS_PER_BATCH = 400
PARTS = 4


class FaultySource(LaminarDataSource):
    """``format("laminar_faulty")``: the real data source with faults armed once per test (a
    marker file per fault, on the shared machine) through the crash-point machinery
    (`laminar._faults`) — the option ``test.faults`` lists them."""

    @classmethod
    def name(cls) -> str:
        return "laminar_faulty"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.faults = json.loads(options.get("test.faults", "{}"))

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        return FaultyWriter(self.sink_options, self.faults)


class FaultyWriter(LaminarStreamWriter):
    def __init__(self, options: Any, faults: dict[str, str]) -> None:
        super().__init__(options)
        self.faults = faults

    @staticmethod
    def _once(marker: str) -> bool:
        if os.path.exists(marker):
            return False
        Path(marker).write_text(f"{os.getpid()}\n")
        return True

    def write(self, iterator: Iterator[Any]) -> Any:
        from pyspark import TaskContext

        from laminar import _faults

        ctx = TaskContext.get()
        assert ctx is not None
        batch = int(ctx.getLocalProperty("streaming.sql.batchId"))
        kill = self.faults.get("kill_task")  # SIGKILL this worker after its PREPARE
        if kill and batch == 1 and ctx.partitionId() == 1 and self._once(kill):
            _faults.rearm("scaleout.task_after_prepare")
        fail = self.faults.get("fail_task")  # attempt 0 of a partition fails before writing
        if fail and batch == 2 and ctx.partitionId() == 2 and ctx.attemptNumber() == 0:
            Path(fail).write_text("failed\n")
            raise RuntimeError("injected failure of attempt 0")
        try:
            return super().write(iterator)
        finally:
            _faults.rearm("")

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        from laminar import _faults

        kill = self.faults.get("kill_commit")  # SIGKILL the commit process after the decision
        if kill and batchId == 1 and self._once(kill):
            _faults.rearm("scaleout.after_decision")
        super().commit(messages, batchId)


#: Seconds with no task session before a stopped query counts as settled (see stop_and_resolve).
QUIET_S = 10.0


@pytest.fixture(scope="module")
def ds_spark(ds_server: SparkConnectServer) -> Iterator[Any]:
    with client(ds_server.remote_url) as spark:
        laminar.spark.register(spark)
        spark.dataSource.register(FaultySource)
        yield spark


def orders(spark: Any) -> Any:
    """Batch ``b`` holds ids ``[b * ROWS_PER_BATCH, (b + 1) * ROWS_PER_BATCH)`` in 4 partitions;
    ``amount`` (numeric) and ``at`` (timestamptz) are derived from the id: exact values."""
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", ROWS_PER_BATCH)
        .option("numPartitions", PARTS)
        .load()
        .selectExpr(
            "value AS id",
            "CAST(value * 1.25 AS decimal(14, 2)) AS amount",
            "timestamp_seconds(value) AS at",
        )
    )


def sink_options(targets: str, names: dict[str, str]) -> dict[str, str]:
    options = {}
    if "kafka" in targets:
        options["kafka.bootstrap.servers"] = names["bootstrap"]
        options["topic"] = names["topic"]
        options["kafka.key.column"] = "id"
        options["kafka.transaction.timeout.ms"] = "60000"
    if "postgres" in targets:
        options["postgres.table"] = names["table"]
    options["postgres.dsn.env" if "postgres" in targets else "laminar.state.dsn.env"] = DSN_VAR
    return options


def start(
    spark: Any,
    targets: str,
    names: dict[str, str],
    ckpt: Path,
    *,
    fmt: str = "laminar",
    **extra: str,
) -> Any:
    writer = orders(spark).writeStream.format(fmt).option("checkpointLocation", str(ckpt))
    for key, value in sink_options(targets, names).items():
        writer = writer.option(key, value)
    for key, value in extra.items():
        writer = writer.option(key.replace("_", "."), value)
    return restarting(writer.trigger(processingTime="300 milliseconds").start)


def stop_and_resolve(query: Any, targets: str, names: dict[str, str], pg_dsn: str) -> None:
    """Stop the query; what the batch it interrupted left prepared is resolved as its next
    start would (`resolve_stopped`); that batch was never committed (checked after)."""
    stop(query)

    def settled() -> bool:  # the tasks Spark interrupted may still be writing: wait for them
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'laminar task'"
                " OR application_name LIKE 'laminar commit%'"
            ).fetchone()
        return row == (0,)

    # docs/spark.md (stopping a query): resolve once the stopped query's tasks have ended. A
    # worker Spark abandoned while it was still importing shows no session yet, so "ended" is
    # no task session for QUIET_S seconds in a row, not one empty look.
    quiet_since: list[float] = []

    def quiet() -> bool:
        if not settled():
            quiet_since.clear()
            return False
        quiet_since[:] = quiet_since or [time.monotonic()]
        return time.monotonic() - quiet_since[0] >= QUIET_S

    wait_for(quiet, timeout=120, what="the interrupted tasks to end")
    os.environ[DSN_VAR] = pg_dsn
    try:
        resolve_stopped(sink_options(targets, names))
    finally:
        del os.environ[DSN_VAR]


def committed_batches(ckpt: Path) -> int:
    """How many batches Spark's checkpoint records as committed."""
    commits = ckpt / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.exists() else []
    return max(done, default=-1) + 1


def check_exactly_once(targets: str, names: dict[str, str], pg_dsn: str, ckpt: Path) -> int:
    batches = committed_batches(ckpt)
    with psycopg.connect(pg_dsn) as conn:
        decided = conn.execute(
            "SELECT max(epoch) FROM laminar.sink_epochs WHERE sink_id LIKE %s",
            (f"%{names['table']}",),
        ).fetchone()
        decided_kafka = conn.execute(
            "SELECT max(epoch) FROM laminar.txn_state WHERE transactional_id LIKE %s",
            (f"%{names['topic']}.p%",),
        ).fetchone()
    # a stop during the commit of batch B may leave B decided (and completed) before Spark
    # recorded it: the restart's replay would skip it; it counts once, like any other
    last = max(
        e
        for e in (
            decided[0] if decided else None,
            decided_kafka[0] if decided_kafka else None,
            batches - 1,
        )
        if e is not None
    )
    assert last <= batches, "at most the batch in flight is ahead of Spark's commit log"
    batches = last + 1
    expected = set(range(batches * ROWS_PER_BATCH))
    if "postgres" in targets:
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute(f"SELECT id, amount, at FROM {names['table']}").fetchall()
        assert_exactly_once([int(r[0]) for r in rows], expected, "PostgreSQL")
        for id_, amount, at in rows:
            assert amount == Decimal(id_) * Decimal("1.25")
            assert int(at.timestamp()) == id_
    if "kafka" in targets:
        records = read_committed(names["bootstrap"], names["topic"])
        values = [json.loads(r.value) for r in records]
        assert_exactly_once([int(v["id"]) for v in values], expected, "Kafka")
        for v, r in zip(values, records, strict=True):
            assert Decimal(str(v["amount"])) == Decimal(v["id"]) * Decimal("1.25")
            assert r.key == str(v["id"]).encode()
        logs = settled_logs(names["bootstrap"], names["topic"])
        assert not any(log.open for log in logs.values()), "no Kafka transaction left open"
    with psycopg.connect(pg_dsn) as conn:
        prepared = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (f"%{names['table']}%",)
        ).fetchall()
        open_dt = conn.execute("SELECT dtid, state FROM laminar.dt_state").fetchall()
    assert prepared == [], "nothing is left prepared"
    assert [d for d in open_dt if names["group"] in d[0]] == [], "every epoch concluded"
    return batches


def make_names(kafka_broker: Any, unique_name: Any, pg_dsn: str, targets: str) -> dict[str, str]:
    topic, table = unique_name("topic"), unique_name("tbl")
    names = {"bootstrap": kafka_broker.bootstrap_servers, "topic": topic, "table": table}
    if "kafka" in targets:
        kafka_broker.create_topic(topic, partitions=3)
    if "postgres" in targets:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table} (id bigint, amount numeric(14, 2), at timestamptz)")
    names["group"] = table if "postgres" in targets else topic
    return names


# Kafka alone (a decision database of its own: laminar.state.dsn.env) is run through the same
# entry points without Spark (tests/integration/test_spark_datasource_protocol.py) and on the
# Spark cluster with Kafka + PostgreSQL (test_spark_cluster_faults.py)
@pytest.mark.parametrize("targets", ["postgres", "kafka+postgres"])
def test_rate_source_lands_exactly_once_across_a_restart(
    ds_spark: Any, kafka_broker: Any, pg_dsn: str, unique_name: Any, tmp_path: Path, targets: str
) -> None:
    names = make_names(kafka_broker, unique_name, pg_dsn, targets)
    ckpt = tmp_path / "ckpt"
    for run in (1, 2):
        query = start(ds_spark, targets, names, ckpt)
        try:
            wait_for(
                lambda n=2 * run: committed_batches(ckpt) >= n,  # type: ignore[misc]
                query=query,
                what="batches",
            )
        finally:
            stop_and_resolve(query, targets, names, pg_dsn)
    assert check_exactly_once(targets, names, pg_dsn, ckpt) >= 4


def test_killed_task_worker_failed_attempt_and_killed_commit(
    ds_spark: Any, kafka_broker: Any, pg_dsn: str, unique_name: Any, tmp_path: Path
) -> None:
    """Batch 1: a task's worker SIGKILLed after its PREPARE, and the commit process SIGKILLed
    after the decision (the query fails): Spark then calls ``abort``, which completes the
    decided batch (never rolls it back); the restart's replay of batch 1 writes nothing, then
    in batch 2 a partition's attempt 0 fails and Spark retries it."""
    targets = "kafka+postgres"
    names = make_names(kafka_broker, unique_name, pg_dsn, targets)
    ckpt = tmp_path / "ckpt"
    faults = {
        "kill_task": str(tmp_path / "killed-task"),
        "kill_commit": str(tmp_path / "killed-commit"),
        "fail_task": str(tmp_path / "failed"),
    }
    options = {"fmt": "laminar_faulty", "test_faults": json.dumps(faults)}
    query = start(ds_spark, targets, names, ckpt, **options)
    error = wait_terminated(query, timeout=120)
    assert error is not None, "the query fails when its commit process dies"
    assert Path(faults["kill_task"]).exists()
    assert committed_batches(ckpt) == 1
    with psycopg.connect(pg_dsn) as conn:
        decided = conn.execute(
            "SELECT state FROM laminar.dt_state WHERE dtid LIKE %s", (f"%{names['table']}%",)
        ).fetchall()
        prepared = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE %s", (f"%{names['table']}%",)
        ).fetchone()
        committed = conn.execute(
            "SELECT epoch FROM laminar.sink_epochs WHERE sink_id LIKE %s", (f"%{names['table']}",)
        ).fetchone()
    assert decided == [], "the decided batch was completed and concluded by Spark's abort"
    assert prepared == (0,), "nothing waits for the restart"
    assert committed == (1,), "batch 1 is committed, ahead of Spark's commit log"
    query = start(ds_spark, targets, names, ckpt, **options)  # batch 1 replayed: skipped
    try:
        wait_for(lambda: committed_batches(ckpt) >= 4, query=query, what="4 batches")
    finally:
        stop_and_resolve(query, targets, names, pg_dsn)
    assert Path(faults["fail_task"]).exists()
    check_exactly_once(targets, names, pg_dsn, ckpt)


def test_bad_options_are_config_errors_at_start(ds_spark: Any, tmp_path: Path) -> None:
    writer = orders(ds_spark).writeStream.format("laminar").option("postgres.table", "x")
    with pytest.raises(Exception, match=r"postgres\.dsn\.env"):
        writer.option("checkpointLocation", str(tmp_path / "c")).start().awaitTermination(60)
    writer = orders(ds_spark).writeStream.format("laminar").option("postgres.dsn", "host=x")
    with pytest.raises(Exception, match=r"postgres\.dsn\.env"):
        writer.option("checkpointLocation", str(tmp_path / "d")).start().awaitTermination(60)
