"""The sink's producer, `laminar._core.TransactionalProducer` (docs/kafka.md, "Producing"), against
the real Apache Kafka broker: what it commits is what confluent-kafka's own producer commits for
the same rows (value, key, headers and partition, every codec), the GIL is free while it
produces, a null header stays null, a record the broker refuses after producing it surfaces as a
delivery failure naming the record, and bad settings are errors that name them.

Records are read back with `laminar.kafka.log` (control batches replayed by the core), never with
a broker's ``read_committed``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException, Producer

import laminar
from laminar._core import TransactionalProducer, encode_kafka
from laminar.errors import AbortableError, ConfigError, FatalError, RecordTooLargeError
from tests.integration.kafka_fill import settled_committed
from tests.integration.kafka_helpers import make_sink

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def rows(n: int, first: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": list(range(first, first + n)),
            "name": [f"customer-{i % 37}" if i % 11 else None for i in range(first, first + n)],
            "amount": [i * 0.25 for i in range(first, first + n)],
        }
    )


def shape(records: list[Any]) -> list[tuple[Any, ...]]:
    """What a consumer sees of each record: partition, key, value and headers, in key order."""
    return sorted((r.partition, r.key, r.value, tuple(r.headers)) for r in records)


@pytest.mark.parametrize("codec", CODECS)
def test_the_sink_commits_what_confluent_kafka_commits_for_the_same_rows(
    kafka_broker: Any, kafka_bootstrap: str, codec: str
) -> None:
    mine, theirs = (f"producer-{w}-{uuid.uuid4().hex[:8]}" for w in ("laminar", "peer"))
    for topic in (mine, theirs):
        kafka_broker.create_topic(topic, partitions=4)
    table = rows(3_000)
    sink = make_sink(kafka_bootstrap, mine, mine, producer_config={"compression.type": codec})
    assert laminar.exactly_once(sink).write_epoch(0, table).committed
    sink.close()
    # the peer: confluent-kafka's producer, the records encoded by the same encoder, the same
    # headers (with the peer's own sink id, compared below), the default partitioner
    peer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": theirs,
            "compression.type": codec,
            "enable.idempotence": True,
        }
    )
    peer.init_transactions(30)
    peer.begin_transaction()
    encoded = encode_kafka(table, key="id")
    assert encoded.keys is not None
    headers = [("laminar.sink", mine.encode()), ("laminar.epoch", b"0")]
    for key, value in zip(encoded.keys, encoded.values, strict=True):
        peer.produce(theirs, value, key, headers=headers)
    peer.commit_transaction(30)
    got, expected = (
        settled_committed(kafka_bootstrap, mine),
        settled_committed(kafka_bootstrap, theirs),
    )
    assert len(got) == len(table)
    assert shape(got) == shape(expected)
    assert {r.headers for r in got} == {(("laminar.sink", mine.encode()), ("laminar.epoch", b"0"))}


def test_another_thread_runs_while_an_epoch_is_produced(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=2)
    sink = make_sink(kafka_bootstrap, topic_name, topic_name)
    sink.init_transactions()
    table = rows(400_000)
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0)

    counter = threading.Thread(target=count)
    assert sink.begin_transaction(0)
    counter.start()
    started = time.perf_counter()
    try:
        sink.write(table)
    finally:
        done.set()
        counter.join()
    elapsed = time.perf_counter() - started
    sink.prepare_transaction()
    sink.commit_transaction(0)
    sink.close()
    # with the GIL held for the whole write the counter would get a handful of switches
    # (one per 5 ms switch interval at most); released, it spins the whole time
    assert ticks > 10 * elapsed / 0.005, (ticks, elapsed)
    assert len(settled_committed(kafka_bootstrap, topic_name)) == len(table)


def test_a_null_header_value_stays_null(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=1)
    producer = TransactionalProducer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": topic_name}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"v", b"k", -1, None, None, 0, [("null", None), ("empty", b"")])
    producer.commit_transaction(30)
    (record,) = settled_committed(kafka_bootstrap, topic_name)
    assert record.headers == (("null", None), ("empty", b""))


def test_a_record_the_broker_refuses_fails_the_epoch_naming_it(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    # the topic takes records of at most 1 KB; the client's limit is librdkafka's 1 MB: the
    # record leaves the client and the broker's answer comes back as a delivery report
    kafka_broker.create_topic(topic_name, partitions=1, config={"max.message.bytes": "1024"})
    sink = make_sink(kafka_bootstrap, topic_name, topic_name)
    table = pa.table({"id": [1, 2, 3], "blob": ["x" * 10, "y" * 5_000, "z"]})
    with pytest.raises(RecordTooLargeError) as raised:
        laminar.exactly_once(sink, retries=0).write_epoch(0, table)
    # the broker refuses the batch the records share: each is reported, the first named
    assert "3 record(s) failed; the first has key '1'" in str(raised.value)
    assert "max.message.bytes" in str(raised.value)
    sink.close()
    assert settled_committed(kafka_bootstrap, topic_name) == []


def test_settings_librdkafka_refuses_are_config_errors_naming_them(
    kafka_bootstrap: str, topic_name: str
) -> None:
    sink = make_sink(kafka_bootstrap, topic_name, topic_name, producer_config={"linger.mss": 5})
    with pytest.raises(ConfigError, match=r"linger\.mss"):
        sink.init_transactions()
    with pytest.raises(ValueError, match="throttle_cb"):
        TransactionalProducer({"bootstrap.servers": kafka_bootstrap, "throttle_cb": print})
    with pytest.raises(KafkaException, match="lzma"):
        TransactionalProducer({"bootstrap.servers": kafka_bootstrap, "compression.type": "lzma"})


def test_callbacks_are_called_in_the_callers_thread(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=1)
    seen: dict[str, list[Any]] = {"stats": [], "delivery": []}
    caller = threading.get_ident()
    producer = TransactionalProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": topic_name,
            "statistics.interval.ms": 50,
            "stats_cb": lambda s: seen["stats"].append((threading.get_ident(), s)),
            "on_delivery": lambda e, r: seen["delivery"].append((threading.get_ident(), e, r)),
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce_arrow(rows(10), topic=topic_name, headers=None, key="id")
    assert producer.flush(30) == 0
    producer.commit_transaction(30)
    time.sleep(0.2)
    producer.poll(0)
    assert seen["stats"]
    assert all(t == caller for t, _ in seen["stats"])
    # every report: a delivery.report.only.error the user did not set
    reports = seen["delivery"]
    assert len(reports) == 10
    assert {(t, e) for t, e, _ in reports} == {(caller, None)}
    assert sorted(int(r.key()) for _, _, r in reports) == list(range(10))
    assert {r.topic() for _, _, r in reports} == {topic_name}


def test_a_flush_that_acknowledged_every_record_leaves_none_whatever_else_is_queued(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    # librdkafka's out-queue length also counts the statistics and error events waiting for a
    # poll: one that arrived just after the flush saw every record acknowledged was once taken
    # for a record not acknowledged (a fresh clone's benchmark failed an epoch on it, "1
    # record(s) were not acknowledged within flush_timeout_s=120 s", half a second in).
    # Statistics every millisecond make that window likely; a flush must still say 0.
    kafka_broker.create_topic(topic_name, partitions=2)
    producer = TransactionalProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": topic_name,
            "statistics.interval.ms": 1,
            "stats_cb": lambda s: None,
        }
    )
    producer.init_transactions(30)
    left = []
    for _ in range(60):
        producer.begin_transaction()
        producer.produce_arrow(rows(5), topic=topic_name, headers=None, key="id")
        left.append(producer.flush(30))
        producer.commit_transaction(30)
    assert left == [0] * 60
    # nothing produced, a hundred statistics events waiting for a poll: no record is left
    time.sleep(0.1)
    assert producer.flush(0) == 0
    assert producer.flush(5) == 0


def test_a_broker_that_never_answers_is_bounded(topic_name: str) -> None:
    # a listening socket that accepts and never answers: init_transactions ends in its time-out
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        producer = TransactionalProducer(
            {
                "bootstrap.servers": f"127.0.0.1:{server.getsockname()[1]}",
                "transactional.id": topic_name,
            }
        )
        started = time.monotonic()
        with pytest.raises(KafkaException):
            producer.init_transactions(2)
        assert time.monotonic() - started < 10
        del producer
    finally:
        server.close()


def test_a_flush_of_any_length_waits_rather_than_panics(topic_name: str) -> None:
    # flush_timeout_s=float("inf") passes the sink's check (> 0); it means "as long as it takes",
    # not a Rust panic; nothing queued returns at once
    producer = TransactionalProducer(
        {"bootstrap.servers": "127.0.0.1:9", "transactional.id": topic_name}
    )
    for timeout in (float("inf"), 1e300, None, -1.0, 0.0):
        assert producer.flush(timeout) == 0
    del producer


def test_a_fatal_error_is_reported_as_fatal(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=1)
    config = {"bootstrap.servers": kafka_bootstrap, "transactional.id": topic_name}
    zombie = TransactionalProducer(config)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic_name, b"zombie")
    successor = TransactionalProducer(config)
    successor.init_transactions(30)  # fences the zombie
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort()
    assert settled_committed(kafka_bootstrap, topic_name) == []
    del zombie, successor


def test_the_sinks_errors_are_unchanged_for_an_unknown_topic(
    kafka_bootstrap: str, topic_name: str
) -> None:
    sink = make_sink(kafka_bootstrap, topic_name, topic_name)
    with pytest.raises((ConfigError, FatalError, AbortableError), match=topic_name):
        sink.init_transactions()


def test_records_dropped_before_the_prepare_fail_it_and_nothing_is_committed(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    # librdkafka drops an epoch's queued records when its transaction fails after the marker
    # went in (an AddPartitionsToTxn refused: test_least_privilege's WRITE case); here they are
    # dropped by a purge while they wait out linger.ms. The prepare must fail, not pass with the
    # marker alone (which a decision would then commit without the records).
    kafka_broker.create_topic(topic_name, partitions=1)
    sink = make_sink(kafka_bootstrap, topic_name, topic_name, producer_config={"linger.ms": 5000})
    sink.init_transactions()
    assert sink.begin_transaction(0)
    sink.write(rows(100))
    sink._live().producer.purge(in_queue=True, in_flight=False, blocking=True)
    with pytest.raises(AbortableError, match="100 record"):
        sink.prepare_transaction()
    sink.abort_transaction(0)
    # the epoch can be written again, whole
    assert laminar.exactly_once(sink).write_epoch(0, rows(100)).committed
    sink.close()
    assert sorted(
        int(r.key or b"0") for r in settled_committed(kafka_bootstrap, topic_name)
    ) == list(range(100))


def test_a_logger_in_the_producer_config_hears_librdkafka(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # confluent-kafka's `logger` setting: librdkafka's lines reach it from poll and flush (they
    # once lingered in librdkafka's log queue, never set, and no line ever arrived)
    kafka_broker.create_topic(topic_name, partitions=1)
    caplog.set_level(logging.DEBUG, logger="tests.rdkafka")
    config = {"logger": logging.getLogger("tests.rdkafka"), "debug": "eos"}
    sink = make_sink(kafka_bootstrap, topic_name, topic_name, producer_config=config)
    assert laminar.exactly_once(sink).write_epoch(0, rows(10)).committed
    sink.close()
    heard = [r.getMessage() for r in caplog.records if r.name == "tests.rdkafka"]
    assert any("EndTxn" in line for line in heard), heard[:5]


class _Lines:
    """A ``logging.Logger`` stand-in that keeps librdkafka's log lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self.lines.append(fmt % args)


def test_back_to_back_transactions_wait_out_the_coordinator_not_its_retry(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    # After EndTxn the coordinator still writes the markers and the completed state for a few
    # ms; a partition added before then is answered CONCURRENT_TRANSACTIONS and librdkafka
    # retries 20 ms later (a fixed backoff; an epoch marker's AddOffsetsToTxn after
    # retry.backoff.ms, 100 ms). Back to back, that was most transactions (50 of 60 measured):
    # a transaction's first record or marker now waits out the rest of 3 ms since the last one
    # ended (docs/kafka.md, "Back-to-back epochs").
    kafka_broker.create_topic(topic_name, partitions=1)
    lines = _Lines()
    producer = TransactionalProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": topic_name,
            "debug": "eos",
            "logger": lines,
        }
    )
    producer.init_transactions(30)
    waited = []
    ending = None
    for n in range(40):
        producer.begin_transaction()
        producer.produce_arrow(rows(100, n * 100), topic=topic_name, headers=None, key="id")
        if ending is not None:
            waited.append(time.perf_counter() - ending)
        producer.produce_arrow(rows(1, 10_000 + n), topic=topic_name, headers=None, key="id")
        assert producer.flush(30) == 0
        ending = time.perf_counter()  # the commit's EndTxn is answered after this
        producer.commit_transaction(30)
        if n == 9:
            lines.lines.clear()  # the broker's first transactions (JIT, log segments) aside
    # empty epochs back to back: the marker alone (AddOffsetsToTxn, then TxnOffsetCommit)
    for n in range(20):
        producer.begin_transaction()
        producer.send_offsets_to_transaction([(topic_name, 0, n + 1)], "laminar.settle", 30)
        producer.commit_transaction(30)
    producer.poll(0)
    # the logger heard librdkafka's transaction log (every marker's AddOffsetsToTxn answered)
    assert sum("AddOffsetsToTxn response" in line for line in lines.lines) >= 20, lines.lines[:5]
    # every first record after a commit was handed over 3 ms or more after the commit ended
    # (the clock here started before it did: a busy machine only adds to the figure)
    assert min(waited) >= 0.0029, waited
    # before: most of the 30 (50 of 60 measured); now the coordinator has finished for most (a
    # loaded broker takes longer than 3 ms more often: 0-10 of 30 seen at a load average of 8)
    retried = [line for line in lines.lines if "AddPartitionsToTxn response" in line]
    assert len(retried) <= 15, retried
    committed = settled_committed(kafka_bootstrap, topic_name)
    assert len(committed) == 40 * 101
