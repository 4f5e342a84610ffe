"""``writeStream.format("laminar")`` writing Avro values and keys (``kafka.value.format=avro``,
``schema.registry.url``) from Spark tasks over a real Spark Connect server, a real broker and a
real Schema Registry, read back by two independent readers: Spark's own ``from_avro``
(spark-avro, on the 5-byte-prefixed payload) and confluent-kafka's ``AvroDeserializer`` — every
value exact, every row once, across a restart of the query."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import laminar.spark
from laminar.embedded import SparkConnectServer
from laminar.embedded.registry import SchemaRegistry
from tests.e2e.spark_helpers import assert_exactly_once, client, read_committed, wait_for
from tests.e2e.test_spark_datasource import (
    DSN_VAR,
    ROWS_PER_BATCH,
    committed_batches,
    make_names,
    orders,
    stop_and_resolve,
)
from tests.integration.avro_helpers import AvroReader

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def avro_spark(ds_server: SparkConnectServer) -> Iterator[Any]:
    with client(ds_server.remote_url) as spark:
        laminar.spark.register(spark)
        yield spark


def test_format_laminar_writes_avro_that_from_avro_and_the_deserializer_read_exactly(
    avro_spark: Any,
    kafka_broker: Any,
    schema_registry: SchemaRegistry,
    pg_dsn: str,
    unique_name: Any,
    tmp_path: Path,
) -> None:
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.functions import col, expr

    names = make_names(kafka_broker, unique_name, pg_dsn, "kafka")
    ckpt = tmp_path / "ckpt"
    options = {
        "kafka.bootstrap.servers": names["bootstrap"],
        "topic": names["topic"],
        "kafka.key.column": "id",
        "kafka.transaction.timeout.ms": "60000",
        "kafka.value.format": "avro",
        "kafka.key.format": "avro",
        "schema.registry.url": schema_registry.url,
        "avro.value.record.name": "Order",
        "avro.value.record.namespace": "shop",
        "laminar.state.dsn.env": DSN_VAR,
    }
    for run in (1, 2):
        writer = orders(avro_spark).writeStream.format("laminar")
        writer = writer.option("checkpointLocation", str(ckpt))
        for key, value in options.items():
            writer = writer.option(key, value)
        query = writer.trigger(processingTime="300 milliseconds").start()
        try:
            wait_for(
                lambda n=2 * run: committed_batches(ckpt) >= n,  # type: ignore[misc]
                query=query,
                what="batches",
            )
        finally:
            stop_and_resolve(query, "kafka", names, pg_dsn)
    batches = committed_batches(ckpt)
    records = read_committed(names["bootstrap"], names["topic"])
    reader = AvroReader(schema_registry.url, names["topic"])
    values = [reader.value(r.value) for r in records]
    ids = [int(v["id"]) for v in values]
    # a batch decided before Spark recorded it counts once, like any other
    decided = max(ids) // ROWS_PER_BATCH + 1
    assert decided in (batches, batches + 1)
    assert_exactly_once(ids, set(range(decided * ROWS_PER_BATCH)), "Kafka")
    for value, record in zip(values, records, strict=True):
        assert value["amount"] == Decimal(value["id"]) * Decimal("1.25")
        assert value["at"] == dt.datetime.fromtimestamp(value["id"], dt.timezone.utc)
        assert reader.key(record.key) == value["id"]

    # Spark's own reader: from_avro on the payload after the magic byte and the schema id
    schema = reader.client.get_latest_version(f"{names['topic']}-value").schema.schema_str
    assert json.loads(schema)["name"] == "Order"
    rows = (
        avro_spark.read.format("kafka")
        .option("kafka.bootstrap.servers", names["bootstrap"])
        .option("subscribe", names["topic"])
        .option("kafka.isolation.level", "read_committed")
        .load()
        .select(from_avro(expr("substring(value, 6, length(value) - 5)"), schema).alias("v"))
        .select(col("v.id"), col("v.amount"), col("v.at"))
        .collect()
    )
    assert_exactly_once([r["id"] for r in rows], set(ids), "Kafka (from_avro)")
    for r in rows:
        assert r["amount"] == Decimal(r["id"]) * Decimal("1.25")
        assert int(r["at"].timestamp()) == r["id"]
