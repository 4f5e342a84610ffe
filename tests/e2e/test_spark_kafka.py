"""Spark Connect → Kafka through ``laminar.spark``: a rate source and a file source, stop and
restart from the checkpoint, the foreachBatch worker SIGKILLed at protocol steps. Every record
exactly once among the topic's *committed* records, read with `laminar.kafka.log` (control
batches replayed, whatever a broker's read_committed would show; the session's Apache Kafka
broker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import laminar
import laminar.spark
from tests.e2e.spark_helpers import (
    ArmedForeachBatch,
    assert_exactly_once,
    kafka_epochs,
    kafka_ids,
    start_files_query,
    wait_for,
    wait_terminated,
    write_json_files,
)


def kafka_sink(bootstrap: str, topic: str, transactional_id: str) -> laminar.KafkaSink:
    return laminar.KafkaSink(
        bootstrap, topic, transactional_id, key="id", commit_timeout_s=10, init_timeout_s=20
    )


def test_rate_source_exactly_once_across_stop_and_restart(
    spark_client: Any, kafka_broker: Any, topic_name: str, unique_name: Any, tmp_path: Path
) -> None:
    kafka_broker.create_topic(topic_name, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    sink = kafka_sink(bootstrap, topic_name, unique_name("tx"))
    checkpoint = str(tmp_path / "checkpoint")
    for run in range(2):
        orders = (
            spark_client.readStream.format("rate")
            .option("rowsPerSecond", 40)
            .load()
            .selectExpr("value AS id", "timestamp AS at")
        )
        query = laminar.spark.start(
            orders,
            kafka=sink,
            checkpoint_location=checkpoint,
            trigger="500 milliseconds",
            check_server=run == 0,
        )
        try:
            have = len(kafka_epochs(bootstrap, topic_name))
            wait_for(
                lambda h=have: len(kafka_epochs(bootstrap, topic_name)) >= h + 3,
                query=query,
                what="three more committed epochs",
            )
        finally:
            query.stop()

    ids = kafka_ids(bootstrap, topic_name)
    assert_exactly_once(ids, set(range(max(ids) + 1)), "kafka")
    assert len(kafka_epochs(bootstrap, topic_name)) >= 6


@pytest.mark.parametrize(
    "point",
    [
        # every record acknowledged, transaction open: the next producer's init aborts it
        "kafka.after_flush@3",
        # committed (records and marker), Spark never heard back: the replay is skipped
        "kafka.after_commit@3",
    ],
)
def test_worker_sigkilled_mid_epoch_then_query_restarted(
    spark_client: Any,
    kafka_broker: Any,
    topic_name: str,
    unique_name: Any,
    tmp_path: Path,
    point: str,
) -> None:
    kafka_broker.create_topic(topic_name, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    sink = kafka_sink(bootstrap, topic_name, unique_name("tx"))
    source = tmp_path / "incoming"
    checkpoint = str(tmp_path / "checkpoint")
    total = write_json_files(source, 0, files=5, rows_per_file=100)
    real = laminar.spark.foreach_batch(laminar.exactly_once(sink), checkpoint_location=checkpoint)

    def start(function: Any) -> Any:
        return start_files_query(spark_client, source, checkpoint, function)

    error = wait_terminated(start(ArmedForeachBatch(real, point)))
    assert error is not None
    assert "Python worker exited unexpectedly" in str(error), error
    committed_epochs = set(kafka_epochs(bootstrap, topic_name))
    assert committed_epochs == ({0, 1, 2} if "after_commit" in point else {0, 1})

    assert wait_terminated(start(real)) is None
    assert_exactly_once(kafka_ids(bootstrap, topic_name), set(range(total)), "after restart")
    assert kafka_epochs(bootstrap, topic_name) == {epoch: 100 for epoch in range(5)}
