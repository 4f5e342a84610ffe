"""Spark's Kafka-sink shape in the core's encoder and the sink's pure helpers (no broker): each
row's topic, partition and headers, the shape's detection, and the identity's topic list."""

from __future__ import annotations

import pyarrow as pa
import pytest

from laminar._core import encode_kafka, is_spark_kafka_shape
from laminar.errors import ConfigError, DataError
from laminar.kafka import _shape as shape
from laminar.kafka.sink import KafkaSink

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


def test_the_shapes_names_with_a_wrong_type_are_a_data_error_not_json() -> None:
    """Issue 29: a frame with only the shape's column names but one of another type was written
    as JSON to the home topic without a word; it is a DataError naming the column and the type
    the shape needs — unless the user asked for JSON."""
    cases = [
        (table(value=pa.array(["v"]), partition=pa.array(["1"])), "'partition'", "an integer"),
        (table(value=pa.array(["v"]), topic=pa.array([1])), "'topic'", "string"),
        (table(key=pa.array([1]), value=pa.array(["v"])), "'key'", "string or binary"),
        (table(value=pa.array([1.5])), "'value'", "string or binary"),
        (table(value=pa.array(["v"]), headers=pa.array(["h"])), "'headers'", "array<struct"),
    ]
    for data, column, want in cases:
        with pytest.raises(DataError) as err:
            shape.value_format_for(data.schema, None, None, None)
        assert f"column {column} has Arrow type" in str(err.value)
        assert f"needs {want}" in str(err.value)
        assert "kafka.value.format=json" in str(err.value)
        # asked for: JSON, to the home topic
        assert shape.value_format_for(data.schema, "json", None, None) == "json"
        assert shape.value_format_for(data.schema, None, "key", None) == "json"
        assert encode_kafka(data, value_format="json").num_rows == 1


@pytest.mark.parametrize(
    "internal", ["__consumer_offsets", "__transaction_state", "__share_group_state"]
)
def test_a_row_naming_an_internal_topic_is_a_data_error_naming_it(internal: str) -> None:
    data = table(value=pa.array([b"v", b"w"]), topic=pa.array(["ok", internal]))
    with pytest.raises(DataError, match=f'row 8 names topic "{internal}", one of Kafka\'s'):
        encode_kafka(data, value_format="spark", topic="home", first_row=7)
    with pytest.raises(ConfigError, match="one of Kafka's internal topics"):
        KafkaSink("b:9092", internal, "tid")


def test_the_identity_lists_the_topics_written() -> None:
    meta = shape.identity_metadata(5, ["b", "a", "b"])
    assert meta == '{"laminar":1,"since_ms":5,"topics":["a","b"]}'
    assert shape.recorded_topics(meta) == ["a", "b"]
    assert shape.since_of(meta, 0) == 5
    assert shape.recorded_topics('{"laminar":1,"since_ms":5}') == []
    assert shape.recorded_topics("not json") == []
    assert shape.identity_metadata(5, []) == '{"laminar":1,"since_ms":5}'


def test_the_identity_is_kept_within_the_brokers_default_metadata_limit() -> None:
    names = [f"topic-{i:03d}-" + "x" * 200 for i in range(40)]
    fits = [n for i, n in enumerate(names) if i < 19]
    meta = shape.identity_metadata(1_700_000_000_000, fits, sink_id="s")
    assert len(meta.encode()) <= shape.IDENTITY_METADATA_MAX_BYTES == 4096
    with pytest.raises(ConfigError) as err:
        shape.identity_metadata(1_700_000_000_000, names[:20], sink_id="orders-sink")
    message = str(err.value)
    assert "orders-sink" in message
    assert "20 topics" in message
    assert "4096 bytes" in message
    assert "one sink per group of topics" in message
    # the bound is exact: the largest metadata that fits is accepted, one byte more is not
    base = len(shape.identity_metadata(0, ["a"]).encode()) - 1
    assert len(shape.identity_metadata(0, ["a" * (4096 - base)]).encode()) == 4096
    with pytest.raises(ConfigError, match="1 topics"):
        shape.identity_metadata(0, ["a" * (4097 - base)])


def test_routed_records_survive_the_redo_blob_exactly() -> None:
    """What the redo log stores of a Spark-shaped batch (`laminar.engine.records.redo_blobs`)
    is what the redo produces again (`_kafka_shape.redo_rows`): each row's topic, partition and
    user headers, then the redo epoch's own Laminar headers."""
    from laminar._core import decode_redo, decode_redo_records
    from laminar.engine.records import redo_blobs
    from laminar.errors import InvalidStateEncoding

    data = table(
        key=pa.array(["a", None, "c", "d"]),
        value=pa.array([b"1", b"2", None, b"4"]),
        topic=pa.array([None, "t2", "t1", "home"]),
        partition=pa.array([None, 2, 0, None], pa.int32()),
        headers=pa.array(
            [[{"key": "h", "value": b"x"}, {"key": "h", "value": None}], None, [], None], HEADERS
        ),
    )
    records = encode_kafka(data, value_format="spark", topic="home", headers=SINK)
    (blob,) = redo_blobs([records])
    assert blob[:3] == b"LR\x02"
    values, keys, topics, partitions, headers = decode_redo_records(blob)
    assert (values, keys) == (records.values, records.keys)
    assert topics == ["home", "t2", "t1", "home"]
    assert partitions == [-1, 2, 0, -1]
    assert headers == [[("h", b"x"), ("h", None)], [], [], []]
    redo_sink = [("laminar.sink", b"s"), ("laminar.epoch", b"4")]
    rows = shape.redo_rows(
        values, keys, (topics, partitions, headers), home="home", sink_headers=redo_sink
    )
    assert rows.topics == records.topics
    assert rows.partitions == records.partitions
    assert rows.headers == [[("h", b"x"), ("h", None), *redo_sink]] + [redo_sink] * 3
    assert (rows.topic_names, rows.max_partitions) == (["home", "t2", "t1"], [-1, 2, 0])
    with pytest.raises(InvalidStateEncoding, match="decode_redo_records"):
        decode_redo(blob)
    # key/value batches keep writing version 1, which decode_redo still reads
    plain = encode_kafka(table(id=pa.array([1, 2])), value_format="json", key="id")
    (old,) = redo_blobs([plain])
    assert old[:3] == b"LR\x01"
    assert decode_redo(old) == (plain.values, plain.keys)
    assert decode_redo_records(old)[2:] == ([None, None], [-1, -1], [[], []])
