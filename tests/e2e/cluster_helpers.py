"""Helpers of the tests on the Spark standalone cluster (`laminar.embedded.SparkCluster`): a data
source that slows its tasks down and tells where they are, the query, the kills, and the judge.

``format("laminar_cluster_test")`` is the real data source (`LaminarDataSource`) whose tasks
leave marker files — ``start-…`` when ``write`` is called, ``mid-…`` once the first Arrow batch
is written (the task's Kafka transaction is open, its COPY under way), ``done-…`` with the
participants' statuses when it returns — named ``<batch>-<part>-<attempt>-<pid>``, and sleep
(``sleep_s`` after each Arrow batch: a task is "mid-task" for seconds; ``late_s`` before
connecting, for the batches listed: a Python worker that is still starting when the query
stops). This module travels by value to the executors' Python (``register_pickle_by_value``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from laminar.spark.source import LaminarDataSource, LaminarStreamWriter
from tests.e2e.spark_helpers import alive, assert_exactly_once, stop, wait_for
from tests.integration.kafka_fill import settled_committed, settled_logs

try:  # the data source below travels by value to the executors' Python workers
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:  # pragma: no cover - pyspark is in the dev extras
    pass

FORMAT = "laminar_cluster_test"


class MarkedSource(LaminarDataSource):
    """``format("laminar_cluster_test")``: `LaminarDataSource` with the option ``test.plan``
    (JSON: ``dir``, ``sleep_s``, ``late_s``, ``late_batches``; module docstring)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.plan = json.loads(options.get("test.plan", "{}"))

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        return MarkedWriter(self.sink_options, self.plan)


class MarkedWriter(LaminarStreamWriter):
    def __init__(self, options: Any, plan: dict[str, Any]) -> None:
        super().__init__(options)
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> Any:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        batch = int(ctx.getLocalProperty("streaming.sql.batchId"))
        tag = f"{batch}-{ctx.partitionId()}-{ctx.attemptNumber()}-{os.getpid()}"
        marks = Path(self.plan["dir"])
        (marks / f"start-{tag}").write_text(f"{time.time()}\n")
        if batch in self.plan.get("late_batches", []):
            time.sleep(float(self.plan["late_s"]))
        sleep_s = float(self.plan.get("sleep_s", 0.0))

        def slowed() -> Iterator[Any]:
            for i, arrow_batch in enumerate(iterator):
                yield arrow_batch
                if i == 0:
                    (marks / f"mid-{tag}").write_text(f"{time.time()}\n")
                time.sleep(sleep_s)

        message = super().write(slowed())
        statuses = sorted({r.status for r in message.results})
        (marks / f"done-{tag}").write_text(json.dumps(statuses))
        return message


@dataclass(frozen=True)
class Mark:
    """One marker file: what a task attempt reached."""

    stage: str
    batch: int
    part: int
    attempt: int
    pid: int

    @property
    def task(self) -> tuple[int, int, int, int]:
        return (self.batch, self.part, self.attempt, self.pid)


def marks(directory: Path, stage: str | None = None) -> list[Mark]:
    """The markers in ``directory`` (of one ``stage``, or all)."""
    found = []
    for path in directory.iterdir():
        name, _, rest = path.name.partition("-")
        if stage is not None and name != stage:
            continue
        batch, part, attempt, pid = (int(x) for x in rest.split("-"))
        found.append(Mark(name, batch, part, attempt, pid))
    return sorted(found, key=lambda m: (m.batch, m.part, m.attempt, m.stage))


def done_statuses(directory: Path, mark: Mark) -> list[str] | None:
    """What a task attempt's participants reported (its ``done`` marker), None if it never
    returned."""
    path = directory / f"done-{mark.batch}-{mark.part}-{mark.attempt}-{mark.pid}"
    return json.loads(path.read_text()) if path.exists() else None


# -- the query ----------------------------------------------------------------------------------


@dataclass
class Pipeline:
    """One ``format("laminar_cluster_test")`` query's stores and options: a rate source whose
    batch ``b`` holds ids ``[b * rows, (b + 1) * rows)`` in ``parts`` partitions, written to a
    topic and a table atomically."""

    bootstrap: str
    topic: str
    table: str
    dsn: str
    dsn_var: str
    checkpoint: Path
    marks: Path
    rows: int = 800
    parts: int = 4
    plan: dict[str, Any] = field(default_factory=dict)

    @property
    def group(self) -> str:
        """A substring of the group id (the default group names the table)."""
        return self.table

    def options(self) -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": self.bootstrap,
            "topic": self.topic,
            "kafka.key.column": "id",
            "kafka.transaction.timeout.ms": "60000",
            "postgres.table": self.table,
            "postgres.dsn.env": self.dsn_var,
            "test.plan": json.dumps({"dir": str(self.marks), **self.plan}),
        }

    def start(self, spark: Any, trigger: str = "500 milliseconds") -> Any:
        orders = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", self.rows)
            .option("numPartitions", self.parts)
            .load()
            .selectExpr(
                "value AS id",
                "CAST(value * 1.25 AS decimal(14, 2)) AS amount",
                "timestamp_seconds(value) AS at",
            )
        )
        writer = orders.writeStream.format(FORMAT)
        writer = writer.option("checkpointLocation", str(self.checkpoint))
        for key, value in self.options().items():
            writer = writer.option(key, value)
        return writer.trigger(processingTime=trigger).start()


def make_pipeline(
    kafka_broker: Any, pg_dsn: str, dsn_var: str, unique_name: Any, tmp_path: Path, **kwargs: Any
) -> Pipeline:
    """A fresh topic (3 partitions) and table, a checkpoint and a marker directory."""
    topic, table = unique_name("topic"), unique_name("tbl")
    kafka_broker.create_topic(topic, partitions=3)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint, amount numeric(14, 2), at timestamptz)")
    markers = tmp_path / "marks"
    markers.mkdir()
    return Pipeline(
        kafka_broker.bootstrap_servers,
        topic,
        table,
        pg_dsn,
        dsn_var,
        tmp_path / "ckpt",
        markers,
        **kwargs,
    )


def committed_batches(checkpoint: Path) -> int:
    """How many batches Spark's checkpoint records as committed."""
    commits = checkpoint / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.exists() else []
    return max(done, default=-1) + 1


def wait_for_new_mid_task(
    p: Pipeline, seen: set[tuple[int, int, int, int]], query: Any, *, min_batch: int = 0
) -> Mark:
    """The next task attempt (not in ``seen``) that is mid-task now: its ``mid`` marker is
    there, its ``done`` marker is not, its Python worker runs."""
    found: list[Mark] = []

    def mid_task() -> bool:
        for mark in marks(p.marks, "mid"):
            if mark.task in seen or mark.batch < min_batch:
                continue
            if done_statuses(p.marks, mark) is None and alive(mark.pid):
                found.append(mark)
                return True
        return False

    what = "a task in the middle of its write"
    wait_for(mid_task, query=query, timeout=240, what=what, interval=0.1)
    return found[0]


# -- the judge ------------------------------------------------------------------------------------


@dataclass
class Leftovers:
    """What a stopped query left in the stores: prepared gids of the table, unconcluded
    distributed transactions of the group, records in open Kafka transactions."""

    prepared: list[str]
    undecided: list[tuple[str, str]]
    open_records: int

    @property
    def clean(self) -> bool:
        return not self.prepared and not self.undecided and not self.open_records


def leftovers(p: Pipeline, *, settle_s: float = 0.0) -> Leftovers:
    """`Leftovers` now (``settle_s``: how long to let commit markers in flight land)."""
    with psycopg.connect(p.dsn) as conn:
        prepared = [
            str(r[0])
            for r in conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (f"%{p.table}%",)
            )
        ]
        exists = conn.execute("SELECT to_regclass('laminar.dt_state')").fetchone()
        undecided = (
            [
                (str(d), str(s))
                for d, s in conn.execute(
                    "SELECT dtid, state FROM laminar.dt_state WHERE dtid LIKE %s",
                    (f"%{p.group}%",),
                )
            ]
            if exists is not None and exists[0] is not None
            else []
        )
    logs = settled_logs(p.bootstrap, p.topic, within_s=settle_s)
    return Leftovers(prepared, undecided, sum(len(log.open) for log in logs.values()))


def task_sessions(dsn: str) -> int:
    """PostgreSQL sessions of tasks still writing (``laminar task``)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'laminar task'"
        ).fetchone()
    return int(row[0]) if row else 0


def judge(p: Pipeline) -> int:
    """Every row of every batch the query committed exactly once in PostgreSQL and among the
    topic's committed records (control batches replayed, `laminar.kafka.log`), each with its
    exact value; nothing prepared, nothing undecided, no open Kafka transaction. Returns the
    number of rows."""
    batches = committed_batches(p.checkpoint)
    with psycopg.connect(p.dsn) as conn:
        decided = conn.execute(
            "SELECT max(epoch) FROM laminar.sink_epochs WHERE sink_id LIKE %s", (f"%{p.table}",)
        ).fetchone()
    # a stop during the commit of batch B may leave B committed before Spark recorded it: its
    # replay would skip it; it counts once, like any other
    last = max(batches - 1, -1 if decided is None or decided[0] is None else int(decided[0]))
    assert last <= batches, "at most the batch in flight is ahead of Spark's commit log"
    expected = set(range((last + 1) * p.rows))
    with psycopg.connect(p.dsn) as conn:
        rows = conn.execute(f"SELECT id, amount, at FROM {p.table}").fetchall()
    assert_exactly_once([int(r[0]) for r in rows], expected, "PostgreSQL")
    for id_, amount, at in rows:
        assert amount == Decimal(id_) * Decimal("1.25"), (id_, amount)
        assert int(at.timestamp()) == id_, (id_, at)
    records = settled_committed(p.bootstrap, p.topic)
    values = [json.loads(r.value) for r in records]
    assert_exactly_once([int(v["id"]) for v in values], expected, "Kafka")
    for v, r in zip(values, records, strict=True):
        assert Decimal(str(v["amount"])) == Decimal(v["id"]) * Decimal("1.25"), v
        assert r.key == str(v["id"]).encode(), (r.key, v)
    left = leftovers(p, settle_s=10.0)
    assert left.clean, f"left behind: {left}"
    return len(expected)


def stop_query(query: Any) -> float:
    """``query.stop()`` — a plain stop, nothing else —; the seconds it took."""
    started = time.monotonic()
    stop(query)
    return time.monotonic() - started
