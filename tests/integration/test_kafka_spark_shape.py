"""KafkaSink writing Spark's Kafka-sink shape through the real broker (docs/kafka.md, "Spark's
Kafka-sink shape"; docs/protocol.md §1, "Several topics"): per-row topics in one transaction,
explicit partitions, user headers beside Laminar's, exactly once under every crash point of the
lone sink, recovery that finds an epoch written only to a second topic, and bad rows refused with
nothing committed. Results are the committed records replayed by ``laminar.kafka.log``.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

import laminar
from laminar.engine.records import redo_blobs
from laminar.errors import ConfigError, DataError
from laminar.kafka import _shape as shape
from laminar.kafka._redo import produce_blob
from tests.integration.kafka_fill import settled_committed
from tests.integration.kafka_helpers import make_sink
from tests.integration.kafka_shape_helpers import (
    assert_exact,
    other_topic,
    shape_table,
)
from tests.integration.test_kafka_crash import EPOCHS, KAFKA_POINTS, kill_and_restart


def _topics(broker: Any, home: str) -> None:
    broker.create_topic(home, partitions=2)
    broker.create_topic(other_topic(home), partitions=3)


def _sink(bootstrap: str, home: str, tid: str, **kw: Any) -> laminar.KafkaSink:
    return make_sink(bootstrap, home, tid, key=None, **kw)


def test_rows_go_to_their_topics_partitions_and_headers_in_one_transaction(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    _topics(kafka_broker, topic_name)
    tid = f"tid-{topic_name}"
    writer = laminar.exactly_once(_sink(kafka_bootstrap, topic_name, tid))
    for epoch in range(2):
        assert writer.write_epoch(epoch, shape_table(epoch, topic_name)).committed
    writer.close()
    assert_exact(kafka_bootstrap, topic_name, tid, range(2))
    # the epoch marker is on both topics' partition 0
    consumer_group = laminar.KafkaSink(kafka_bootstrap, topic_name, tid).marker_group
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    (future,) = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(consumer_group)]
    ).values()
    offsets = {(tp.topic, tp.partition): tp.offset for tp in future.result().topic_partitions}
    assert offsets == {(topic_name, 0): 1, (other_topic(topic_name), 0): 1}


def test_the_shape_is_detected_and_other_shapes_keep_json(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=1)
    tid = f"tid-{topic_name}"
    sink = laminar.KafkaSink(kafka_bootstrap, topic_name, tid, init_timeout_s=15.0)
    writer = laminar.exactly_once(sink)
    writer.write_epoch(0, pa.table({"key": ["a"], "value": [b"\x00raw"]}))
    writer.write_epoch(1, pa.table({"id": [7], "value": ["x"]}))  # not the shape: JSON
    writer.close()
    got = [(r.key, r.value) for r in settled_committed(kafka_bootstrap, topic_name, tid)]
    assert got == [(b"a", b"\x00raw"), (None, b'{"id":7,"value":"x"}')]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"partition": 3}, "asks for partition 3 of topic '{other}', which has 3 partition(s)"),
        ({"header": "laminar.epoch"}, "has the header 'laminar.epoch'"),
        ({"topic": "{home}-missing"}, "names topic '{home}-missing', which does not exist"),
        ({"topic": "bad topic"}, 'names topic "bad topic", which is not a valid'),
        ({"null_header": True}, "has a null header"),
    ],
    ids=["bad-partition", "reserved-header", "missing-topic", "invalid-topic", "null-header"],
)
def test_bad_rows_are_data_errors_naming_them_and_nothing_is_committed(
    kafka_broker: Any,
    kafka_bootstrap: str,
    topic_name: str,
    change: dict[str, Any],
    message: str,
) -> None:
    _topics(kafka_broker, topic_name)
    tid = f"tid-{topic_name}"
    other = other_topic(topic_name)
    rows = shape_table(0, topic_name).to_pylist()
    bad = rows[5]  # topic: the other topic, partition 1
    if "partition" in change:
        bad["partition"] = change["partition"]
    if "header" in change:
        bad["headers"] = [{"key": change["header"], "value": b"9"}]
    if "topic" in change:
        bad["topic"] = change["topic"].format(home=topic_name)
    if "null_header" in change:  # a null element, not an empty header (hostile pass, stop 21)
        bad["headers"] = [None, {"key": "a", "value": b"1"}]
    table = pa.Table.from_pylist(rows, schema=shape_table(0, topic_name).schema)
    writer = laminar.exactly_once(_sink(kafka_bootstrap, topic_name, tid))
    with pytest.raises(DataError) as err:
        writer.write_epoch(0, table)
    assert "row 5 " in str(err.value)
    assert message.format(home=topic_name, other=other) in str(err.value)
    # the sink stays usable; the failed attempt left nothing committed
    assert writer.write_epoch(1, shape_table(1, topic_name)).committed
    writer.close()
    assert_exact(kafka_bootstrap, topic_name, tid, range(1, 2))


def test_a_routed_record_too_large_by_its_headers_names_its_row_and_size(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    _topics(kafka_broker, topic_name)
    tid = f"tid-{topic_name}"
    rows = shape_table(0, topic_name).to_pylist()
    rows[5]["headers"] = [{"key": "big", "value": b"h" * 30_000}]
    table = pa.Table.from_pylist(rows, schema=shape_table(0, topic_name).schema)
    sink = _sink(kafka_bootstrap, topic_name, tid, producer_config={"message.max.bytes": 20_000})
    writer = laminar.exactly_once(sink)
    with pytest.raises(laminar.RecordTooLargeError) as err:
        writer.write_epoch(0, table)
    message = str(err.value)
    assert "row 5 " in message
    # the user's header (30,003 bytes) and Laminar's own count: the size is the record's
    assert re.search(r"30,0\d\d bytes of headers", message), message
    assert "message.max.bytes=20000" in message
    assert writer.write_epoch(1, shape_table(1, topic_name)).committed
    writer.close()
    assert_exact(kafka_bootstrap, topic_name, tid, range(1, 2))


def test_the_redo_log_reproduces_routed_rows_exactly(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    """The records an atomic group keeps for its redo log (``records_out``), stored as redo
    blobs and produced again in the epoch's next transaction (what recovery's redo does): each
    record on its own topic and partition with its user headers and Laminar's."""
    _topics(kafka_broker, topic_name)
    tid = f"tid-{topic_name}"
    sink = _sink(kafka_bootstrap, topic_name, tid)
    sink.init_transactions()
    try:
        kept: list[Any] = []
        assert sink.begin_transaction(0)
        sink.write(shape_table(0, topic_name), records_out=kept)
        sink.abort_transaction(0)  # as when the broker gave the prepared transaction up
        blobs = redo_blobs(kept)
        assert [b[:3] for b in blobs] == [b"LR\x02"]
        assert sink.begin_transaction(0)
        for blob in blobs:
            produce_blob(sink, blob)
        sink.commit_transaction(0)
    finally:
        sink.close()
    assert_exact(kafka_bootstrap, topic_name, tid, range(1))


def test_too_many_topics_for_the_identity_is_refused_before_anything_is_committed(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    """The identity's topic list stays within the brokers' default offset.metadata.max.bytes:
    the batch naming one topic too many is a ConfigError naming the sink and the count, and
    the sink stays usable."""
    names = [f"{topic_name}-{i:02d}-" + "n" * 190 for i in range(20)]
    for name in [topic_name, *names]:
        kafka_broker.create_topic(name, partitions=1)
    tid = f"tid-{topic_name}"
    writer = laminar.exactly_once(_sink(kafka_bootstrap, topic_name, tid))
    many = pa.table({"key": ["a"] * 20, "value": [b"v"] * 20, "topic": names})
    with pytest.raises(ConfigError) as err:
        writer.write_epoch(0, many)
    assert "20 topics" in str(err.value)
    assert tid in str(err.value)
    fewer = pa.table({"key": ["b"] * 3, "value": [b"w"] * 3, "topic": names[:3]})
    assert writer.write_epoch(1, fewer).committed
    writer.close()
    for name in names[3:]:
        assert settled_committed(kafka_bootstrap, name) == []
    assert sum(len(settled_committed(kafka_bootstrap, n)) for n in names[:3]) == 3


def test_the_identity_limit_is_the_brokers_setting(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``offset.metadata.max.bytes`` as the broker reports it (describe_configs), else the
    default 4096 (a broker that cannot be asked)."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    (broker,) = admin.list_topics(timeout=10).brokers
    resource = ConfigResource(ResourceType.BROKER, str(broker))
    (future,) = admin.describe_configs([resource]).values()
    reported = int(future.result(timeout=10)["offset.metadata.max.bytes"].value)
    shape._LIMITS.clear()
    with caplog.at_level("INFO", logger="laminar.kafka"):
        assert shape.metadata_limit(kafka_bootstrap, {"acks": "all"}, 10.0) == reported
        assert "not readable" not in caplog.text
        assert shape.metadata_limit("127.0.0.1:1", {}, 1.0) == 4096
        assert "not readable" in caplog.text


def test_a_topic_added_later_is_witnessed_after_the_marker_is_lost(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    """Epoch 0 writes the home topic only, epoch 1 only the second topic. With the marker group
    gone, the witness finds epoch 1 on the second topic, which the identity lists."""
    _topics(kafka_broker, topic_name)
    tid = f"tid-{topic_name}"
    other = other_topic(topic_name)
    home_only = pa.table({"key": ["a"], "value": [b"0"], "topic": [topic_name]})
    other_only = pa.table({"key": ["b"], "value": [b"1"], "topic": [other]})
    writer = laminar.exactly_once(_sink(kafka_bootstrap, topic_name, tid))
    assert writer.write_epoch(0, home_only).committed
    assert writer.write_epoch(1, other_only).committed
    writer.close()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    marker = laminar.KafkaSink(kafka_bootstrap, topic_name, tid).marker_group
    for future in admin.delete_consumer_groups([marker], request_timeout=15).values():
        future.result()
    sink = _sink(kafka_bootstrap, topic_name, tid)
    writer = laminar.exactly_once(sink)
    assert not writer.write_epoch(1, other_only).committed  # replayed: skipped
    assert sink.startup_read is not None
    assert sink.startup_read.source == "witness"
    assert writer.write_epoch(2, home_only).committed
    writer.close()
    got = {
        t: [(r.key, r.value) for r in settled_committed(kafka_bootstrap, t, tid)]
        for t in (topic_name, other)
    }
    assert got == {topic_name: [(b"a", b"0"), (b"a", b"0")], other: [(b"b", b"1")]}


@pytest.mark.parametrize("point", KAFKA_POINTS)
def test_a_multi_topic_writer_killed_mid_epoch_leaves_every_record_exactly_once(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str, point: str
) -> None:
    _topics(kafka_broker, topic_name)
    tid = f"tid-{topic_name}"
    kill_and_restart(kafka_bootstrap, topic_name, tid, point, "spark")
    assert_exact(kafka_bootstrap, topic_name, tid, range(EPOCHS))
