"""The data source's entry points without Spark (`laminar.spark.source`): tasks' ``write``
(`write_task`), the driver's ``commit`` and ``abort`` called directly against a real PostgreSQL
and a real Apache Kafka broker — a second ``commit`` of one batch is a no-op, a replayed batch
is skipped, ``abort`` leaves nothing prepared, only the attempt Spark commits counts, and a task
still running when its stopped batch is resolved leaves no transaction open."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from laminar.errors import AbortableError, ConfigError
from laminar.spark.options import parse_options
from laminar.spark.source import LaminarStreamWriter, resolve_stopped, write_task
from tests.integration.datasource_helpers import (
    OWNER,
    VAR,
    both_stores,
    expected,
    partition,
    stores,
)
from tests.integration.kafka_fill import settled_committed, settled_logs


@pytest.fixture
def setup(
    clean_prepared_xacts: str,
    kafka_broker: Any,
    table_name: str,
    topic_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    dsn = clean_prepared_xacts
    monkeypatch.setenv(VAR, dsn)
    raw = both_stores(dsn, kafka_broker, table_name, topic_name)
    return {
        "raw": raw,
        "options": parse_options(raw),
        "dsn": dsn,
        "table": table_name,
        "topic": topic_name,
        "bootstrap": kafka_broker.bootstrap_servers,
    }


def test_commit_twice_is_a_no_op_and_a_replay_is_skipped(setup: dict[str, Any]) -> None:
    s = setup
    writer = LaminarStreamWriter(s["options"])
    messages = [
        write_task(s["options"], 0, OWNER, p, iter(partition(p)), attempt=f"0-{p}")
        for p in range(4)
    ]
    assert all(r.status == "prepared" for m in messages for r in m.results)
    writer.commit(messages, 0)
    writer.commit(messages, 0)  # Spark may call commit again for one batch id
    assert stores(s) == (expected(range(4)), expected(range(4)), [])
    # a replay of batch 0 (a restart before Spark recorded the commit): nothing is written
    replayed = [
        write_task(s["options"], 0, OWNER, p, iter(partition(p)), attempt="1") for p in range(4)
    ]
    assert {r.status for m in replayed for r in m.results} == {"skipped"}
    writer.commit(replayed, 0)
    assert stores(s) == (expected(range(4)), expected(range(4)), [])


def test_abort_rolls_the_prepared_participants_back(setup: dict[str, Any]) -> None:
    s = setup
    writer = LaminarStreamWriter(s["options"])
    first = [write_task(s["options"], 0, OWNER, p, iter(partition(p)), attempt="0") for p in (0, 1)]
    writer.abort([first[0], None], 0)  # Spark passes None for a failed task
    assert stores(s) == ([], [], [])
    # the abort fenced batch 0: a task of it that arrives late writes nothing
    late = write_task(s["options"], 0, OWNER, 1, iter(partition(1)), attempt="0-late")
    assert {r.status for r in late.results} == {"skipped"}
    assert stores(s) == ([], [], [])
    # the restart: Spark creates its writer (lifting the fence), then the batch's tasks
    writer = LaminarStreamWriter(s["options"])
    again = [write_task(s["options"], 0, OWNER, p, iter(partition(p)), attempt="1") for p in (0, 1)]
    writer.commit(again, 0)
    assert stores(s) == (expected(range(2)), expected(range(2)), [])


def test_only_the_attempt_spark_commits_counts(setup: dict[str, Any]) -> None:
    s = setup
    writer = LaminarStreamWriter(s["options"])
    stale = write_task(s["options"], 0, OWNER, 0, iter(partition(0)), attempt="0-a")
    retried = write_task(s["options"], 0, OWNER, 0, iter(partition(0)), attempt="1-b")
    other = write_task(s["options"], 0, OWNER, 1, iter(partition(1)), attempt="0-c")
    # a speculative twin's message: it is not the partition's last claimant, so nothing commits
    with pytest.raises(AbortableError, match="rolled back"):
        writer.commit([stale, other], 0)
    assert stores(s) == ([], [], [])
    # Spark's retry of the batch: the retried attempt's message commits
    retried = write_task(s["options"], 0, OWNER, 0, iter(partition(0)), attempt="2-d")
    other = write_task(s["options"], 0, OWNER, 1, iter(partition(1)), attempt="1-e")
    writer.commit([retried, other], 0)
    assert stores(s) == (expected(range(2)), expected(range(2)), [])


def test_another_query_is_refused_in_the_task(setup: dict[str, Any]) -> None:
    s = setup
    writer = LaminarStreamWriter(s["options"])
    writer.commit([write_task(s["options"], 0, OWNER, 0, iter(partition(0)), attempt="0")], 0)
    with pytest.raises(ConfigError, match="owned by query"):
        write_task(s["options"], 1, "spark:another-query", 0, iter(partition(0)), attempt="0")
    assert stores(s) == (expected(range(1)), expected(range(1)), [])


def test_a_commit_killed_after_its_decision_is_completed_by_the_replay(
    setup: dict[str, Any], tmp_path: Path
) -> None:
    s = setup
    messages = [
        write_task(s["options"], 0, OWNER, p, iter(partition(p)), attempt=f"0-{p}")
        for p in range(3)
    ]
    # the driver-side commit in a process of its own, SIGKILLed between decision and completion
    args = tmp_path / "commit.pickle"
    args.write_bytes(pickle.dumps((s["raw"], messages)))
    child = (
        "import pickle, sys\n"
        "from laminar.spark.options import parse_options\n"
        "from laminar.spark.source import commit_batch\n"
        "raw, messages = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "commit_batch(parse_options(raw), messages, 0)\n"
    )
    env = {**os.environ, "LAMINAR_CRASH_AT": "scaleout.after_decision"}
    done = subprocess.run([sys.executable, "-c", child, str(args)], env=env, timeout=120)
    assert done.returncode == -9
    with psycopg.connect(s["dsn"]) as conn:
        states = conn.execute("SELECT state FROM laminar.dt_state").fetchall()
    assert states == [("commit",)]
    # the restarted query replays batch 0: its tasks find it decided, its commit completes it
    writer = LaminarStreamWriter(s["options"])
    replayed = [
        write_task(s["options"], 0, OWNER, p, iter(partition(p)), attempt=f"1-{p}")
        for p in range(3)
    ]
    assert {r.status for m in replayed for r in m.results} == {"skipped"}
    writer.commit(replayed, 0)
    assert stores(s) == (expected(range(3)), expected(range(3)), [])


def test_a_commit_spares_its_batch_but_resolves_what_an_abandoned_one_left(
    setup: dict[str, Any],
) -> None:
    s = setup
    writer = LaminarStreamWriter(s["options"])
    writer.commit([write_task(s["options"], 0, OWNER, 0, iter(partition(0)), attempt="0")], 0)
    # a task of another epoch whose commit never comes (a straggler): prepared and left
    left = write_task(s["options"], 5, OWNER, 1, iter(partition(1)), attempt="0")
    assert {r.status for r in left.results} == {"prepared"}
    messages = [
        write_task(s["options"], 1, OWNER, p, iter(partition(p)), attempt=f"0-{p}") for p in (2, 3)
    ]
    # the commit's start-up rolls the leftover back, not the batch it is about to decide
    writer.commit(messages, 1)
    ids = sorted(expected(range(1)) + expected(range(2, 4)))
    assert stores(s) == (ids, ids, [])


def test_kafka_only_commits_once_through_the_decision_rows(setup: dict[str, Any]) -> None:
    s = setup
    raw = {k: v for k, v in s["raw"].items() if not k.startswith("postgres.")}
    options = parse_options({**raw, "laminar.state.dsn.env": VAR})
    writer = LaminarStreamWriter(options)
    for batch in (0, 1):
        messages = [
            write_task(options, batch, OWNER, p, iter(partition(p + 3 * batch)), attempt="0")
            for p in range(3)
        ]
        assert {r.status for m in messages for r in m.results} == {"prepared"}
        writer.commit(messages, batch)
        writer.commit(messages, batch)  # no PostgreSQL sink: the decision rows say it is done
    replayed = [write_task(options, 1, OWNER, p, iter(partition(p)), attempt="1") for p in (0, 1)]
    assert {r.status for m in replayed for r in m.results} == {"skipped"}
    writer.commit(replayed, 1)
    assert stores(s) == ([], expected(range(6)), [])


def test_a_task_whose_batch_is_resolved_after_its_claim_leaves_nothing_open(
    setup: dict[str, Any],
) -> None:
    """The query is stopped while a task Spark interrupted still runs: its claim is in, then
    `resolve_stopped` rolls the batch back (fencing the claimed transactional ids) before the
    task reads its rows and opens its Kafka transaction. The task must not open one after the
    fence (a transaction nobody would end, holding back every read_committed consumer): it
    ends ``skipped``, nothing is open or prepared, and the restart writes the batch once."""
    s = setup
    writer = LaminarStreamWriter(s["options"])
    writer.commit(
        [write_task(s["options"], 0, OWNER, p, iter(partition(p)), attempt="0") for p in (0, 1)], 0
    )
    resolved: list[Any] = []

    def rows_after_the_stop() -> Any:
        # read after the claim (the task's peek): the stop's resolution runs first
        resolved.append(resolve_stopped(s["raw"]))
        yield from partition(2)

    late = write_task(s["options"], 1, OWNER, 0, rows_after_the_stop(), attempt="0-late")
    assert resolved, "the batch was resolved while the task ran"
    assert {r.status for r in late.results} == {"skipped"}
    logs = settled_logs(s["bootstrap"], s["topic"], within_s=3.0)
    assert [r for log in logs.values() for r in log.open] == [], "no Kafka transaction open"
    assert stores(s) == (expected(range(2)), expected(range(2)), [])
    # the restart replays batch 1 (its writer, created first, lifts the stop fence): written once
    writer = LaminarStreamWriter(s["options"])
    again = [
        write_task(s["options"], 1, OWNER, p, iter(partition(p + 2)), attempt="1") for p in (0, 1)
    ]
    writer.commit(again, 1)
    assert stores(s) == (expected(range(4)), expected(range(4)), [])


class Interrupted(BaseException):
    """What a worker's signal handler may raise: no `Exception`, so the machine never sees it."""


def test_a_task_interrupted_mid_write_aborts_its_kafka_transaction(setup: dict[str, Any]) -> None:
    s = setup

    def interrupted() -> Any:
        yield from partition(0)[:1]
        time.sleep(1.0)  # the producer sends them (its linger) ...
        raise Interrupted  # ... then the task is interrupted mid-write

    with pytest.raises(Interrupted):
        write_task(s["options"], 0, OWNER, 0, interrupted(), attempt="0-cut")
    logs = settled_logs(s["bootstrap"], s["topic"], within_s=3.0)
    assert [r for log in logs.values() for r in log.open] == [], "no Kafka transaction open"
    assert [r for log in logs.values() for r in log.aborted], "the task's records were sent"
    writer = LaminarStreamWriter(s["options"])
    again = [write_task(s["options"], 0, OWNER, p, iter(partition(p)), attempt="1") for p in (0, 1)]
    writer.commit(again, 0)
    assert stores(s) == (expected(range(2)), expected(range(2)), [])


def test_sparks_kafka_sink_shape_is_routed_as_format_kafka_would(
    setup: dict[str, Any], kafka_broker: Any
) -> None:
    """A DataFrame shaped for ``format("kafka")`` (key, value, topic, partition, headers) moves
    to ``format("laminar")`` unchanged: detected without ``kafka.value.format``, each row to its
    topic and partition with its headers, exactly once."""
    s = setup
    other = f"{s['topic']}-routed"
    kafka_broker.create_topic(other, partitions=3)
    raw = {k: v for k, v in s["raw"].items() if not k.startswith("postgres.")}
    raw.pop("kafka.key.column")
    options = parse_options({**raw, "laminar.state.dsn.env": VAR})
    header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

    def shaped(part: int) -> list[pa.RecordBatch]:
        ids = range(part * 1000, part * 1000 + 10)
        return [
            pa.record_batch(
                {
                    "key": [str(i) for i in ids],
                    "value": [f"v{i}".encode() for i in ids],
                    "topic": [other if i % 2 else None for i in ids],  # null: the sink's topic
                    "partition": pa.array([2 if i % 2 else None for i in ids], pa.int32()),
                    "headers": pa.array(
                        [[{"key": "h", "value": str(i).encode()}] for i in ids], header
                    ),
                }
            )
        ]

    writer = LaminarStreamWriter(options)
    messages = [write_task(options, 0, OWNER, p, iter(shaped(p)), attempt="0") for p in range(2)]
    writer.commit(messages, 0)
    home = settled_committed(s["bootstrap"], s["topic"])
    routed = settled_committed(s["bootstrap"], other)
    all_ids = [i for p in range(2) for i in range(p * 1000, p * 1000 + 10)]
    assert sorted(int(r.key) for r in home) == [i for i in all_ids if i % 2 == 0]
    assert sorted(int(r.key) for r in routed) == [i for i in all_ids if i % 2]
    for r in [*home, *routed]:
        assert r.value == f"v{int(r.key)}".encode()
        assert r.header("h") == r.key
    by_partition = settled_logs(s["bootstrap"], other)
    assert {p for p, log in by_partition.items() if log.committed} == {2}
