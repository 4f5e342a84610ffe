"""A routed record's refusal names its own topic, not the sink's home topic: librdkafka refuses
a routed record in its delivery report (tests/unit/test_kafka_errors.py) or synchronously, in
``produce()`` — a partition the topic does not have once its metadata is cached
(``_UNKNOWN_PARTITION``), a topic it knows does not exist (``_UNKNOWN_TOPIC``): this path
(`Producing.produce` → `produce_error` → `_error`) is the one tested here. The producer
here is a stand-in for librdkafka's synchronous refusal (pure logic of
the error path; the routed-row plumbing is the sink's own).

It is rare: `_shape.check_chunk` checks each routed topic and partition against metadata
before producing, and caches the counts per producer, so the synchronous refusal is reached
when a routed topic is deleted (or its metadata changes) while the sink runs."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from laminar import KafkaSink
from laminar.errors import LaminarError
from laminar.kafka._runtime import _Runtime
from laminar.kafka._shape import RedoRows


class _RefusingProducer:
    """Accepts records for the home topic and refuses those routed to ``refused_topic``."""

    def __init__(self, refused_topic: str, code: int) -> None:
        self.refused_topic, self.code = refused_topic, code

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        if topic == self.refused_topic:
            raise KafkaException(KafkaError(self.code, f"refused {topic}"))

    def __len__(self) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        return 0


@pytest.mark.parametrize(
    "code", [KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC], ids=["partition", "topic"]
)
def test_a_routed_records_synchronous_refusal_names_the_sinks_topic(code: int) -> None:
    """row 1 goes to 'audit' partition 7 and librdkafka refuses it in produce(); the
    error says topic 'orders' (the sink's) does not exist — the user is sent to the wrong
    topic."""
    sink = KafkaSink("broker:9092", "orders", "orders-sink")
    rt = _Runtime()
    rt.producer = _RefusingProducer("audit", code)
    rt.headers = []
    rows = RedoRows(
        values=[b"a", b"b"],
        keys=[b"k0", b"k1"],
        topics=["orders", "audit"],
        partitions=[-1, 7],
        headers=None,
    )
    with pytest.raises(LaminarError) as caught:
        sink._producing(rt).produce(rows.values, rows.keys, 3, 0, False, routed=rows)
    text = str(caught.value)
    assert "row 1" in text, text
    assert "'audit'" in text, text
    assert "'orders'" not in text, text
