"""A query written for Spark's own Kafka sink, moved to Laminar by its one changed line: the
DataFrame shaped the way Spark's Kafka docs show (``key``, ``value`` = ``to_json(struct(*))``, a
``topic`` column routing to two topics, a ``headers`` column), written through
``foreachBatch(laminar.exactly_once(KafkaSink(...)))`` over Spark Connect, stopped and restarted
from its checkpoint. Each record exactly once on its own topic with its exact key, value and
headers, among the committed records replayed by `laminar.kafka.log` (docs/kafka.md, "Spark's
Kafka-sink shape")."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import laminar
from tests.e2e.spark_helpers import restarting, wait_terminated, write_json_files
from tests.integration.kafka_fill import settled_committed


def shaped(spark: Any, source: Path, home: str, other: str) -> Any:
    orders = (
        spark.readStream.schema("id long, amount double")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
    )
    return orders.selectExpr(
        "CAST(id AS STRING) AS key",
        "to_json(struct(*)) AS value",
        f"CASE WHEN id % 3 = 0 THEN '{other}' ELSE '{home}' END AS topic",
        "array(named_struct('key', 'source', 'value', CAST(CONCAT('file-', id) AS BINARY)))"
        " AS headers",
    )


def test_spark_kafka_shape_to_two_topics_exactly_once_across_restart(
    spark_client: Any, kafka_broker: Any, unique_name: Any, tmp_path: Path
) -> None:
    home, other = unique_name("orders"), unique_name("big")
    kafka_broker.create_topic(home, partitions=2)
    kafka_broker.create_topic(other, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    tid = unique_name("tx")
    sink = laminar.KafkaSink(bootstrap, home, tid, commit_timeout_s=10, init_timeout_s=20)
    source, checkpoint = tmp_path / "in", str(tmp_path / "checkpoint")
    next_id = 0
    for _run in range(2):
        next_id = write_json_files(source, next_id, files=2, rows_per_file=30)
        query = restarting(
            shaped(spark_client, source, home, other)
            .writeStream.foreachBatch(laminar.exactly_once(sink))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start
        )
        wait_terminated(query)
        assert query.exception() is None

    want: dict[str, Counter[tuple[Any, ...]]] = {home: Counter(), other: Counter()}
    for n in range(next_id):
        value = json.dumps({"id": n, "amount": n % 97 + 0.5}, separators=(",", ":")).encode()
        want[other if n % 3 == 0 else home][(str(n).encode(), value, f"file-{n}".encode())] += 1
    epochs: set[bytes] = set()
    for topic in (home, other):
        got: Counter[tuple[Any, ...]] = Counter()
        for r in settled_committed(bootstrap, topic, tid):
            (name, source_header), (sink_name, sink_id) = r.headers[0], r.headers[1]
            assert (name, sink_name, sink_id) == ("source", "laminar.sink", tid.encode())
            assert r.headers[2][0] == "laminar.epoch"
            epochs.add(r.headers[2][1] or b"")
            got[(r.key, r.value, source_header)] += 1
        assert got == want[topic], topic
    assert epochs == {b"0", b"1", b"2", b"3"}  # one file per batch, two runs of two
