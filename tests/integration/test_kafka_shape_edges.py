"""Two edges of Spark's Kafka-sink shape through a real Apache Kafka broker (issue 29), judged by
the committed records with control batches replayed (``laminar.kafka.log``):

- a row whose topic is one of Kafka's internal topics is a `DataError` naming the row, raised
  before the chunk is produced (the brokers' refusal came at commit, as an AuthorizationError
  about the home topic — the wrong topic and the wrong fix — or an AbortableError retried in
  vain); nothing of the epoch is committed and the sink stays usable;
- a frame with only the shape's column names but a column of another type (``partition`` as a
  string) is a `DataError` naming the column and the type, where before it was written as JSON
  to the home topic without a word; ``value_format="json"`` still writes it as JSON, as asked.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

import laminar
from laminar.errors import DataError
from tests.integration.kafka_fill import settled_committed
from tests.integration.kafka_helpers import make_sink
from tests.integration.kafka_shape_helpers import assert_exact, other_topic, shape_table

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("internal", ["__consumer_offsets", "__transaction_state"])
def test_a_row_naming_an_internal_topic_is_a_data_error_and_nothing_is_committed(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str, internal: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=2)
    kafka_broker.create_topic(other_topic(topic_name), partitions=3)
    tid = f"tid-{topic_name}"
    rows = shape_table(0, topic_name).to_pylist()
    rows[5]["topic"] = internal
    bad = pa.Table.from_pylist(rows, schema=shape_table(0, topic_name).schema)
    writer = laminar.exactly_once(make_sink(kafka_bootstrap, topic_name, tid, key=None))
    try:
        with pytest.raises(DataError) as err:
            writer.write_epoch(0, bad)
        message = str(err.value)
        assert f'row 5 names topic "{internal}", one of Kafka\'s internal topics' in message
        assert topic_name not in message.split("(sink")[0], "the home topic is not blamed"
        # the sink stays usable; the refused epoch left nothing committed
        assert writer.write_epoch(1, shape_table(1, topic_name)).committed
    finally:
        writer.close()
    assert_exact(kafka_bootstrap, topic_name, tid, range(1, 2))


def test_the_shapes_names_with_a_wrong_type_are_refused_not_written_as_json(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=2)
    frame = pa.table({"key": ["k1"], "value": ["v1"], "partition": ["1"]})
    detected = laminar.exactly_once(
        make_sink(kafka_bootstrap, topic_name, f"auto-{topic_name}", key=None)
    )
    try:
        with pytest.raises(DataError) as err:
            detected.write_epoch(0, frame)
        message = str(err.value)
        assert "column 'partition' has Arrow type Utf8" in message
        assert "the shape needs an integer" in message
        # cast as Spark's own sink needs it: the shape, to the row's partition
        fixed = frame.set_column(2, "partition", pa.array([1], pa.int32()))
        assert detected.write_epoch(0, fixed).committed
    finally:
        detected.close()
    # asked for JSON: the row as a JSON object, to the home topic
    asked = laminar.exactly_once(
        make_sink(kafka_bootstrap, topic_name, f"json-{topic_name}", key=None, value_format="json")
    )
    try:
        assert asked.write_epoch(0, frame).committed
    finally:
        asked.close()
    records = sorted(
        (r.header("laminar.sink"), r.key, r.value, r.partition)
        for r in settled_committed(kafka_bootstrap, topic_name)
    )
    assert len(records) == 2, records
    (auto, json_record) = records
    assert auto == (f"auto-{topic_name}".encode(), b"k1", b"v1", 1)
    assert json_record[:2] == (f"json-{topic_name}".encode(), None)
    assert json.loads(json_record[2] or b"") == {"key": "k1", "value": "v1", "partition": "1"}
