"""KafkaSink against the real broker: Apache Kafka (or ``LAMINAR_KAFKA_BOOTSTRAP``).

Exactly-once is always asserted with `laminar.kafka.log`, which replays the commit/abort markers
itself and so holds on any broker; what a librdkafka ``read_committed`` consumer sees is
asserted too. Compatibility subset (``@on_both_brokers``: also on Tansu, Laminar's demo broker):
the round trip, an aborted epoch, and fencing (on init, and between prepare and commit) — the
paths where Tansu differs (fencing is silent, read_committed shows aborted records) and Laminar
must still be exactly-once. There, assertions about the broker's own behaviour follow the
capabilities of the broker under test (all present on Apache Kafka, so strict there).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition

import laminar
from laminar import (
    AuthorizationError,
    ConfigError,
    FatalError,
    FencedError,
    InDoubtError,
    PreparedTxnState,
    RecordTooLargeError,
)
from laminar.embedded._process import free_port
from laminar.kafka.log import KafkaLogClient
from tests.fixtures import BrokerUnderTest, on_both_brokers
from tests.integration import kafka_reference
from tests.integration.kafka_fill import settled_logs
from tests.integration.kafka_helpers import (
    ROWS_PER_EPOCH,
    assert_exactly_once,
    committed,
    consumer_values,
    epoch_table,
    ids_of,
    make_sink,
    partition_log,
)


@pytest.fixture
def topic(kafka_broker: Any, topic_name: str) -> str:
    kafka_broker.create_topic(topic_name, partitions=3)
    return topic_name


@pytest.fixture
def one_partition_topic(kafka_broker: Any, topic_name: str) -> str:
    kafka_broker.create_topic(topic_name, partitions=1)
    return topic_name


@pytest.fixture
def compat_topic(broker_under_test: BrokerUnderTest, topic_name: str) -> str:
    """A one-partition topic on the broker under test."""
    broker_under_test.create_topic(topic_name, partitions=1)
    return topic_name


def ids(epochs: range, rows: int = ROWS_PER_EPOCH) -> set[int]:
    return {e * 1000 + i for e in epochs for i in range(rows)}


@on_both_brokers
def test_committed_epochs_are_visible_and_exactly_once(
    broker_under_test: BrokerUnderTest, topic_name: str
) -> None:
    broker_under_test.create_topic(topic_name, partitions=3)
    topic, kafka_bootstrap = topic_name, broker_under_test.bootstrap_servers
    sink = make_sink(kafka_bootstrap, topic, f"tid-{topic}")
    writer = laminar.exactly_once(sink)
    for epoch in range(3):
        assert writer.write_epoch(epoch, epoch_table(epoch)).committed
    records = committed(kafka_bootstrap, topic)
    assert_exactly_once(records, ids(range(3)))
    assert {r.header("laminar.sink") for r in records} == {sink.sink_id.encode()}
    assert sink.metrics.commits == 3
    assert sink.metrics.events_committed == 3 * ROWS_PER_EPOCH
    # capability `transactions` (both brokers): a read_committed consumer sees them.
    assert broker_under_test.capabilities.transactions
    seen = consumer_values(kafka_bootstrap, topic, 3, expect=3 * ROWS_PER_EPOCH)
    assert len(seen) == 3 * ROWS_PER_EPOCH
    writer.close()


def test_an_open_transaction_is_not_committed(
    kafka_bootstrap: str, one_partition_topic: str
) -> None:
    topic = one_partition_topic
    sink = make_sink(kafka_bootstrap, topic, f"tid-{topic}")
    sink.init_transactions()
    assert sink.begin_transaction(0)
    sink.write(epoch_table(0))
    state = sink.prepare_transaction()  # flushed: on the broker, not committed
    assert state.record_count == ROWS_PER_EPOCH
    log = partition_log(kafka_bootstrap, topic)
    assert len(log.open) == ROWS_PER_EPOCH
    assert log.committed == []
    # read_committed stops at the last stable offset.
    assert consumer_values(kafka_bootstrap, topic, 1, expect=1, timeout=2.0) == []
    sink.commit_transaction(0)
    assert_exactly_once(committed(kafka_bootstrap, topic), ids(range(1)))
    sink.close()


@on_both_brokers
def test_an_aborted_epoch_leaves_nothing_committed(
    broker_under_test: BrokerUnderTest, compat_topic: str
) -> None:
    topic, kafka_bootstrap = compat_topic, broker_under_test.bootstrap_servers
    sink = make_sink(kafka_bootstrap, topic, f"tid-{topic}")
    sink.init_transactions()
    assert sink.begin_transaction(0)
    sink.write(epoch_table(0))
    sink.prepare_transaction()
    sink.abort_transaction(0)
    assert sink.transaction_state == laminar.TransactionState.Idle()
    assert sink.last_committed_epoch() is None
    # the epoch is retried with the same rows and commits once
    assert sink.begin_transaction(0)
    sink.write(epoch_table(0))
    sink.commit_transaction(0)
    log = partition_log(kafka_bootstrap, topic)
    assert len(log.aborted) == ROWS_PER_EPOCH
    assert log.abort_markers
    assert log.commit_markers
    assert_exactly_once(log.committed, ids(range(1)))
    # capability `hides_aborted_records` (Apache Kafka; not Tansu): read_committed skips them.
    seen = consumer_values(kafka_bootstrap, topic, 1, expect=2 * ROWS_PER_EPOCH, timeout=3.0)
    hidden = broker_under_test.capabilities.hides_aborted_records
    assert len(seen) == (ROWS_PER_EPOCH if hidden else 2 * ROWS_PER_EPOCH)
    assert sink.metrics.aborts == 1
    assert sink.metrics.commits == 1
    sink.close()


def test_replayed_epochs_are_skipped_after_a_restart(
    kafka_bootstrap: str, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    tid = f"tid-{topic}"
    first = laminar.exactly_once(make_sink(kafka_bootstrap, topic, tid))
    for epoch in range(3):
        first.write_epoch(epoch, epoch_table(epoch))
    first.close()
    restarted_sink = make_sink(kafka_bootstrap, topic, tid)
    restarted = laminar.exactly_once(restarted_sink)
    assert restarted.write_epoch(2, epoch_table(2)).skipped  # Spark replays the last batch
    assert "older than the last committed" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="laminar.kafka"):
        assert restarted.write_epoch(1, epoch_table(1)).skipped  # not Spark's: it warns
    assert "epoch 1 is older than the last committed epoch 2" in caplog.text
    assert restarted.write_epoch(3, epoch_table(3)).committed
    assert restarted_sink.metrics.replays_skipped == 2
    assert restarted_sink.last_committed_epoch() == 3
    assert_exactly_once(committed(kafka_bootstrap, topic), ids(range(4)))
    restarted.close()


def test_prepared_state_records_the_producer_identity(kafka_bootstrap: str, topic: str) -> None:
    tid = f"tid-{topic}"
    sink = make_sink(kafka_bootstrap, topic, tid)
    sink.init_transactions()
    sink.begin_transaction(0)
    sink.write(epoch_table(0))
    state = sink.prepare_transaction()
    assert (state.transactional_id, state.epoch, state.attempt) == (tid, 0, 0)
    assert state.record_count == ROWS_PER_EPOCH
    assert state.producer_id >= 0
    assert state.producer_epoch >= 0
    assert abs(state.created_at_ms - time.time() * 1000) < 60_000
    assert PreparedTxnState.parse(str(state)) == state
    sink.abort_transaction(0)
    # a retry of the same epoch counts as attempt 1; the identity is read again after the abort
    sink.begin_transaction(0)
    sink.write(epoch_table(0))
    retried = sink.prepare_transaction()
    assert retried.attempt == 1
    assert retried.producer_id == state.producer_id
    assert retried.producer_epoch >= state.producer_epoch
    sink.commit_transaction(0)
    # a new instance (re-init) fences this one: same producer id, a newer producer epoch
    successor = make_sink(kafka_bootstrap, topic, tid)
    successor.init_transactions()
    successor.begin_transaction(1)
    successor.write(epoch_table(1))
    after = successor.prepare_transaction()
    assert after.producer_epoch > retried.producer_epoch or after.producer_id != state.producer_id
    successor.commit_transaction(1)
    sink.close()
    successor.close()


@on_both_brokers
def test_a_new_instance_fences_the_old_one(
    broker_under_test: BrokerUnderTest, compat_topic: str
) -> None:
    """Holds on every broker: the zombie's epoch marker (send_offsets_to_transaction) is refused
    as fenced (Kafka: fatal PRODUCER_FENCED; Tansu: _FENCED from the offset commit)."""
    topic, kafka_bootstrap = compat_topic, broker_under_test.bootstrap_servers
    tid = f"tid-{topic}"
    zombie = make_sink(kafka_bootstrap, topic, tid)
    zombie.init_transactions()
    zombie.begin_transaction(0)
    zombie.write(epoch_table(0))
    successor = make_sink(kafka_bootstrap, topic, tid)
    successor.init_transactions()
    with pytest.raises(FencedError, match="another producer"):
        zombie.commit_transaction(0)
    with pytest.raises(FencedError):  # every later call too, and it writes nothing
        zombie.begin_transaction(1)
    successor.begin_transaction(0)
    successor.write(epoch_table(0))
    successor.commit_transaction(0)
    records = committed(kafka_bootstrap, topic)
    assert_exactly_once(records, ids(range(1)))
    zombie_records = {r.producer_epoch for r in records}
    assert len(zombie_records) == 1  # all from the successor's producer epoch
    zombie.close()
    successor.close()


@on_both_brokers
def test_a_zombie_fenced_between_prepare_and_commit_commits_nothing(
    broker_under_test: BrokerUnderTest, compat_topic: str
) -> None:
    """capability `fencing` (Kafka): the zombie's commit fails as fenced at once. Without it
    (Tansu drops the zombie's commit and it times out) the commit is in doubt, bounded by
    commit_timeout_s; recovery sees the brokers answer everything but that commit and stops the
    zombie as fenced. Either way the zombie's records are never committed."""
    topic, kafka_bootstrap = compat_topic, broker_under_test.bootstrap_servers
    fencing = broker_under_test.capabilities.fencing
    tid = f"tid-{topic}"
    zombie = make_sink(kafka_bootstrap, topic, tid, commit_timeout_s=2.0, retries=1)
    zombie.init_transactions()
    zombie.begin_transaction(0)
    zombie.write(epoch_table(0))
    zombie.prepare_transaction()
    successor = make_sink(kafka_bootstrap, topic, tid)
    successor.init_transactions()
    started = time.monotonic()
    if fencing:
        with pytest.raises(FencedError):
            zombie.commit_transaction(0)
    else:
        with pytest.raises(InDoubtError):
            zombie.commit_transaction(0)
        assert zombie.transaction_state.name == "Failed"
        assert zombie.metrics.commit_failures == 1
    assert time.monotonic() - started < 15
    successor.begin_transaction(0)
    successor.write(epoch_table(0))
    successor.commit_transaction(0)
    if not fencing:
        # The brokers answer the marker read but never the zombie's commit: fenced.
        with pytest.raises(FencedError, match="another instance has most likely taken over"):
            zombie.recover()
        assert zombie.tracker.last_committed_epoch == 0  # decided by the successor's commit
        with pytest.raises(FencedError):
            zombie.begin_transaction(1)
    log = partition_log(kafka_bootstrap, topic)
    assert_exactly_once(log.committed, ids(range(1)))
    assert len(log.aborted) + len(log.open) >= ROWS_PER_EPOCH  # the zombie's, never committed
    zombie.close()
    successor.close()


def test_an_expired_marker_is_replaced_by_the_header_witness(
    kafka_bootstrap: str, kafka_broker: Any, topic: str
) -> None:
    """The marker group is deleted (as offsets.retention.minutes would expire it); the last
    committed epoch is then read from the laminar.epoch headers of the committed records, which
    laminar.kafka.log tells apart from an aborted later epoch on any broker."""
    from confluent_kafka.admin import AdminClient

    tid = f"tid-{topic}"
    sink = make_sink(kafka_bootstrap, topic, tid)
    writer = laminar.exactly_once(sink)
    for epoch in range(3):
        writer.write_epoch(epoch, epoch_table(epoch))
    sink.begin_transaction(3)  # an aborted epoch 3 must not count
    sink.write(epoch_table(3))
    sink.prepare_transaction()
    sink.abort_transaction(3)
    writer.close()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_consumer_groups([f"laminar.{tid}"], request_timeout=15)[f"laminar.{tid}"].result(
        15
    )
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"laminar.{tid}"})
    assert probe.committed([TopicPartition(topic, 0)], timeout=15)[0].offset < 0
    probe.close()

    restarted_sink = make_sink(kafka_bootstrap, topic, tid)
    assert restarted_sink.last_committed_epoch() == 2
    restarted = laminar.exactly_once(restarted_sink)
    assert restarted.write_epoch(2, epoch_table(2)).skipped
    assert restarted.write_epoch(3, epoch_table(3)).committed
    assert restarted_sink.last_committed_epoch() == 3  # the marker is back
    assert_exactly_once(committed(kafka_bootstrap, topic), ids(range(4)))
    restarted.close()


def test_the_witness_reads_over_sasl_with_the_same_client(kafka_bootstrap: str, topic: str) -> None:
    """One witness for every cluster (docs/protocol.md §1): the sink's wire client, whatever the
    security settings (no second implementation through librdkafka's read_committed)."""
    tid = f"tid-{topic}"
    sink = make_sink(kafka_bootstrap, topic, tid)
    writer = laminar.exactly_once(sink)
    for epoch in range(2):
        writer.write_epoch(epoch, epoch_table(epoch))
    writer.close()
    # the coordinator writes the last commit's markers after the commit returns: read once they
    # landed (`settled_logs`), as a sink's start-up does after its init_transactions
    assert not any(log.open for log in settled_logs(kafka_bootstrap, topic).values())
    with KafkaLogClient(kafka_bootstrap) as client:
        found = client.witness(topic, tid, max_records=-1)
    assert (found.epoch, found.conclusive) == (1, True)
    assert not hasattr(laminar.KafkaSink, "_read_witness_consumer")


def test_sinks_with_different_ids_write_one_topic_in_parallel(
    kafka_bootstrap: str, topic: str
) -> None:
    """Three sinks on one topic at once. When ids are missing, the failure says who lost them:
    the reader (an independent decode of the same fetches finds them committed), the markers
    (they are in the log but aborted or still open: a shared producer id, or markers not yet
    written), or the broker (they are nowhere in the log although every record was
    acknowledged)."""
    errors: list[BaseException] = []
    names = [f"tid-{topic}-{n}" for n in range(3)]
    producers: dict[str, set[int]] = {}

    def run(tid: str, offset: int) -> None:
        try:
            sink = make_sink(kafka_bootstrap, topic, tid)
            writer = laminar.exactly_once(sink)
            for epoch in range(4):
                table = epoch_table(epoch)
                table = table.set_column(
                    0, "id", pa.array([offset + i for i in table.column("id").to_pylist()])
                )
                writer.write_epoch(epoch, table)
                if sink._rt is not None and sink._rt.identity is not None:
                    producers.setdefault(tid, set()).add(sink._rt.identity[0])
            writer.write_epoch(3, epoch_table(3))  # a replay: skipped
            writer.close()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(tid, n * 100_000)) for n, tid in enumerate(names)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    shared = [
        (a, b)
        for a in names
        for b in names
        if a < b and producers.get(a, set()) & producers.get(b, set())
    ]
    assert not shared, (
        f"the broker gave two transactional ids one producer id: {shared} {producers}"
    )
    logs = settled_logs(kafka_bootstrap, topic)
    for n, tid in enumerate(names):
        expected = {n * 100_000 + i for i in ids(range(4))}
        records = [r for p in sorted(logs) for r in logs[p].committed]
        found = {i for i in ids_of(records) if i in expected}
        assert found == expected, lost_records_report(
            kafka_bootstrap, topic, tid, expected - found, logs
        )
        assert sorted(i for i in ids_of(records) if i in expected) == sorted(expected)
        assert make_sink(kafka_bootstrap, topic, tid).last_committed_epoch() == 3


def lost_records_report(
    bootstrap: str, topic: str, tid: str, missing: set[int], logs: dict[int, Any]
) -> str:
    """Who lost ``missing``: the same partitions fetched again as raw bytes and decoded by the
    pre-core pure-Python decoder (tests/integration/kafka_reference.py)."""
    reference: set[int] = set()
    anywhere: dict[int, str] = {}
    with KafkaLogClient(bootstrap) as client:
        leaders = client.partition_leaders(topic)
        for p, leader in leaders.items():
            low, high = client.watermarks(topic, p)
            batches, offset = [], low
            while offset < high:
                data, _ = client.fetch(topic, p, leader, offset)
                decoded = list(
                    kafka_reference.decode_record_batches(data, topic=topic, partition=p)
                )
                if not decoded:
                    break
                batches.extend(b for b in decoded if b.last_offset >= offset)
                offset = decoded[-1].last_offset + 1
            log = kafka_reference.committed_records(
                batches, topic=topic, partition=p, start_offset=low
            )
            reference |= set(ids_of(log.committed)) & missing
            for kind in ("aborted", "open"):
                for i in set(ids_of(getattr(log, kind))) & missing:
                    anywhere[i] = f"{kind} in partition {p}"
    nowhere = missing - reference - set(anywhere)
    marked = sorted(anywhere.items())[:3]
    return (
        f"sink {tid}: {len(missing)} ids missing per laminar.kafka.log, e.g. "
        f"{sorted(missing)[:5]}; the reference decoder finds {len(reference)} of them "
        f"committed (the reader lost them), {len(set(anywhere) - reference)} in the log but "
        f"not committed (the markers: {marked}), {len(nowhere)} nowhere in the log (the broker "
        "lost acknowledged records); partitions with open records: "
        f"{[p for p, log in logs.items() if log.open]}"
    )


def test_a_missing_topic_is_a_clear_error(kafka_bootstrap: str, topic_name: str) -> None:
    sink = make_sink(kafka_bootstrap, topic_name, f"tid-{topic_name}")
    with pytest.raises(ConfigError, match=f"topic '{topic_name}' does not exist.*create it"):
        sink.init_transactions()
    # the check does not create it (Tansu auto-creates topics on a per-topic metadata request)
    with pytest.raises(ConfigError):
        make_sink(kafka_bootstrap, topic_name, f"tid-{topic_name}").init_transactions()


def test_an_oversized_record_names_the_row_and_the_setting(
    kafka_bootstrap: str, one_partition_topic: str
) -> None:
    topic = one_partition_topic
    sink = make_sink(
        kafka_bootstrap, topic, f"tid-{topic}", producer_config={"message.max.bytes": 20_000}
    )
    writer = laminar.exactly_once(sink)
    big = epoch_table(0).set_column(
        1, "name", pa.array([("x" * 30_000 if i == 7 else "ok") for i in range(ROWS_PER_EPOCH)])
    )
    with pytest.raises(
        RecordTooLargeError, match=r"row 7 \(key '7'\).*message\.max\.bytes=20000"
    ) as raised:
        writer.write_epoch(0, big)
    assert isinstance(raised.value, laminar.AbortableError)  # KIP-691: abortable, not fatal
    assert raised.value.retriable is False
    assert raised.value.__cause__ is not None
    assert sink.transaction_state == laminar.TransactionState.Idle()  # aborted, usable
    assert writer.write_epoch(0, epoch_table(0)).committed
    assert_exactly_once(committed(kafka_bootstrap, topic), ids(range(1)))
    writer.close()


def test_an_unreachable_broker_names_bootstrap_servers_and_the_timeout() -> None:
    address = f"127.0.0.1:{free_port('127.0.0.1')}"
    sink = make_sink(address, "t", "tid-unreachable", init_timeout_s=2.0)
    started = time.monotonic()
    with pytest.raises(
        FatalError, match=rf"bootstrap\.servers={address} within init_timeout_s=2 s"
    ):
        sink.init_transactions()
    assert time.monotonic() - started < 10
    sink.close()


def test_bad_credentials_fail_clearly_and_the_password_never_shows(
    kafka_bootstrap: str,
    topic: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The session broker does not accept this SASL login: an AuthorizationError naming the
    settings. The password appears in no message, repr, cause or log line."""
    password = "hunter2-do-not-print"
    config = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "laminar",
        "sasl.password": password,
    }
    caplog.set_level(logging.DEBUG)
    sink = make_sink(
        kafka_bootstrap, topic, f"tid-{topic}", producer_config=config, init_timeout_s=3.0
    )
    with pytest.raises((AuthorizationError, FatalError)) as caught:
        laminar.exactly_once(sink).write_epoch(0, epoch_table(0))
    assert isinstance(caught.value, AuthorizationError), caught.value
    assert "sasl.password" in str(caught.value)
    texts = [str(caught.value), repr(caught.value), repr(sink), str(sink.producer_config)]
    cause: BaseException | None = caught.value
    while cause is not None:
        texts += [str(cause), repr(cause)]
        cause = cause.__cause__ or cause.__context__
    texts += [record.getMessage() for record in caplog.records]
    out, err = capfd.readouterr()
    texts += [out, err]
    assert not [t for t in texts if password in t]
    sink.close()
