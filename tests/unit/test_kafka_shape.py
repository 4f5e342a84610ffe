"""Spark's Kafka-sink shape in the core's encoder and the sink's pure helpers (no broker): each
row's topic, partition and headers, the shape's detection, and the identity's topic list."""

from __future__ import annotations

import pyarrow as pa
import pytest

from laminar._core import encode_kafka, is_spark_kafka_shape
from laminar.errors import ConfigError, DataError
from laminar.kafka import _shape as shape

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
SINK = [("laminar.sink", b"s"), ("laminar.epoch", b"3")]


def table(**columns: pa.Array) -> pa.Table:
    return pa.table(columns)


def test_rows_carry_their_topic_partition_and_headers() -> None:
    data = table(
        key=pa.array(["a", None, "c"]),
        value=pa.array([b"1", b"2", None]),
        topic=pa.array([None, "t2", "t1"]),
        partition=pa.array([None, 2, 0], pa.int32()),
        headers=pa.array([[{"key": "h", "value": b"x"}], None, []], HEADERS),
    )
    records = encode_kafka(data, value_format="spark", topic="home", headers=SINK)
    assert records.keys == [b"a", None, b"c"]
    assert records.values == [b"1", b"2", None]
    assert records.topics == ["home", "t2", "t1"]
    assert records.partitions == [-1, 2, 0]
    assert records.headers == [[("h", b"x"), *SINK], SINK, SINK]
    assert records.topic_names == ["home", "t2", "t1"]
    assert records.max_partitions == [-1, 2, 0]


def test_other_formats_have_no_routing() -> None:
    records = encode_kafka(table(id=pa.array([1])), value_format="json")
    assert records.topics is None
    assert records.partitions is None
    assert records.headers is None
    assert records.topic_names == []


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"topic": pa.array(["ok", None])}, "row 8 has no topic"),
        ({"partition": pa.array([0, -1], pa.int64())}, "row 8 has partition -1"),
        ({"partition": pa.array([0, 2**40], pa.int64())}, "row 8 has partition 1099511627776"),
        (
            {"headers": pa.array([[], [{"key": "laminar.sink", "value": b"x"}]], HEADERS)},
            "row 8 has the header 'laminar.sink'",
        ),
        (
            {"headers": pa.array([[], [{"key": None, "value": b"x"}]], HEADERS)},
            "row 8 has a header with a null key",
        ),
    ],
)
def test_bad_rows_are_data_errors_naming_the_row(
    columns: dict[str, pa.Array], message: str
) -> None:
    data = table(value=pa.array([b"v", b"w"]), **columns)
    default = None if "topic" in columns else "home"
    with pytest.raises(DataError, match=message):
        encode_kafka(data, value_format="spark", topic=default, first_row=7)


def test_a_wrongly_typed_column_of_the_shape_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="column 'partition' has Arrow type"):
        encode_kafka(table(value=pa.array([b"v"]), partition=pa.array(["1"])), value_format="spark")
    with pytest.raises(ConfigError, match="needs a 'value' column"):
        encode_kafka(table(key=pa.array([b"v"])), value_format="spark")


def test_detection_needs_exactly_the_shape() -> None:
    spark_shaped = table(key=pa.array(["k"]), value=pa.array(["v"]), topic=pa.array(["t"]))
    assert is_spark_kafka_shape(spark_shaped.schema)
    assert shape.value_format_for(spark_shaped.schema, None, None, None) == "spark"
    assert shape.value_format_for(spark_shaped.schema, "json", None, None) == "json"
    assert shape.value_format_for(spark_shaped.schema, None, "key", None) == "json"
    other = table(id=pa.array([1]), value=pa.array(["v"]))
    assert not is_spark_kafka_shape(other.schema)
    assert shape.value_format_for(other.schema, None, None, None) == "json"


def test_the_identity_lists_the_topics_written() -> None:
    meta = shape.identity_metadata(5, ["b", "a", "b"])
    assert meta == '{"laminar":1,"since_ms":5,"topics":["a","b"]}'
    assert shape.recorded_topics(meta) == ["a", "b"]
    assert shape.since_of(meta, 0) == 5
    assert shape.recorded_topics('{"laminar":1,"since_ms":5}') == []
    assert shape.recorded_topics("not json") == []
    assert shape.identity_metadata(5, []) == '{"laminar":1,"since_ms":5}'
