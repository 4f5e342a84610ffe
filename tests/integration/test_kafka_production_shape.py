"""Kafka at production shape (issue 15), on real brokers: topics written by foreign producers
with every codec mixed in each partition, a sink that starts without reading them, a lost marker
found again by the bounded witness, a witness that refuses to guess past its bound, and 64
partitions. Start-up cost is asserted by counting what `laminar.kafka.log` read
(`KafkaSink.startup_read`); the timings are in benches/bench_kafka_startup.py.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient

import laminar
from laminar.errors import FatalError
from laminar.kafka.log import KafkaLogClient, read_partition
from tests.fixtures import on_both_brokers
from tests.integration.atomic_helpers import ROWS_PER_EPOCH as ATOMIC_ROWS
from tests.integration.atomic_helpers import killed, run_writer
from tests.integration.kafka_fill import CODECS, fill, now_ms, settled_committed
from tests.integration.kafka_fill import settled_committed as read_committed
from tests.integration.kafka_helpers import (
    assert_exactly_once,
    epoch_table,
    ids_of,
    make_sink,
)

ROWS = 50
EPOCHS = 4


def ids(epochs: range) -> set[int]:
    return {e * 1000 + i for e in epochs for i in range(ROWS)}


def ours(bootstrap: str, topic: str, tid: str) -> list[Any]:
    return settled_committed(bootstrap, topic, tid)


def forget(bootstrap: str, *groups: str) -> None:
    """Deletes consumer groups (what offsets.retention.minutes does to an idle marker)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for group, future in admin.delete_consumer_groups(list(groups), request_timeout=15).items():
        try:
            future.result(15)
        except Exception as e:  # a group that has no offsets is already gone
            if "GROUP_ID_NOT_FOUND" not in str(e):
                raise AssertionError(f"could not delete group {group}: {e}") from e


def write(sink: laminar.KafkaSink, epochs: range) -> None:
    writer = laminar.exactly_once(sink)
    for epoch in epochs:
        assert writer.write_epoch(epoch, epoch_table(epoch, ROWS)).committed
    writer.close()


@on_both_brokers
def test_every_codec_mixed_in_each_partition_reads_committed_only(
    broker_under_test: Any, topic_name: str
) -> None:
    bootstrap = broker_under_test.bootstrap_servers
    broker_under_test.create_topic(topic_name, 3)
    filled = fill(bootstrap, topic_name, 2_000, partitions=3, aborted_per_codec=7)
    values = [r.value for r in read_committed(bootstrap, topic_name)]
    assert len(values) == len(set(values)) == filled.records
    assert set(values) == filled.committed
    aborted = {r.value for p in range(3) for r in read_partition(bootstrap, topic_name, p).aborted}
    assert aborted == filled.aborted
    with KafkaLogClient(bootstrap) as client:
        codecs = {
            b.compression.name.lower() for p in range(3) for b in client.iter_batches(topic_name, p)
        }
    # Tansu stores the batches as sent; Apache Kafka keeps the producer's codec too
    # (compression.type=producer)
    assert codecs == set(CODECS)


@on_both_brokers
def test_new_and_restarted_sinks_on_a_foreign_mixed_codec_topic(
    broker_under_test: Any, topic_name: str
) -> None:
    bootstrap = broker_under_test.bootstrap_servers
    broker_under_test.create_topic(topic_name, 4)
    filled = fill(bootstrap, topic_name, 5_000, partitions=4, aborted_per_codec=3)
    tid = f"tid-{topic_name}"
    sink = make_sink(bootstrap, topic_name, tid, producer_config={"compression.type": "zstd"})
    write(sink, range(3))
    first = sink.startup_read
    assert first is not None
    assert (first.source, first.epoch, first.read.fetches) == ("new", None, 0)

    restarted = make_sink(bootstrap, topic_name, tid, producer_config={"compression.type": "lz4"})
    writer = laminar.exactly_once(restarted)
    assert not writer.write_epoch(2, epoch_table(2, ROWS)).committed  # a replay: skipped
    assert writer.write_epoch(3, epoch_table(3, ROWS)).committed
    writer.close()
    again = restarted.startup_read
    assert again is not None
    assert (again.source, again.epoch, again.read.fetches) == ("marker", 2, 0)
    assert_exactly_once(ours(bootstrap, topic_name, tid), ids(range(4)))
    foreign = {r.value for r in read_committed(bootstrap, topic_name) if r.header("producer")}
    assert foreign == filled.committed


@pytest.fixture(scope="module")
def large_topic(kafka_broker: Any, kafka_bootstrap: str) -> str:
    """100,000 foreign records, every codec, 4 partitions: filled once for the module."""
    name = f"large-{now_ms()}"
    kafka_broker.create_topic(name, 4)
    fill(kafka_bootstrap, name, 100_000, partitions=4, keep_values=False)
    return name


def test_a_new_sink_reads_nothing_of_a_large_topic(
    kafka_broker: Any, kafka_bootstrap: str, large_topic: str, topic_name: str
) -> None:
    """O(partitions): the same requests as on an empty topic, and no fetch at all."""
    kafka_broker.create_topic(topic_name, 4)
    reads = []
    for topic in (topic_name, large_topic):
        sink = make_sink(kafka_bootstrap, topic, f"tid-new-{topic}-{now_ms()}")
        sink.init_transactions()
        assert sink.startup_read is not None
        reads.append(sink.startup_read)
        sink.close()
    empty, large = reads
    assert (empty.source, large.source) == ("new", "new")
    assert large.read.fetches == large.read.bytes == large.read.records == 0
    assert large.read.requests == empty.read.requests


@on_both_brokers
def test_a_lost_marker_is_found_by_the_witness_within_its_bound(
    broker_under_test: Any, topic_name: str
) -> None:
    bootstrap = broker_under_test.bootstrap_servers
    broker_under_test.create_topic(topic_name, 3)
    fill(bootstrap, topic_name, 1_500, partitions=3, tag="before")
    tid = f"tid-{topic_name}"
    sink = make_sink(bootstrap, topic_name, tid, producer_config={"compression.type": "lz4"})
    write(sink, range(3))
    aborted = make_sink(bootstrap, topic_name, tid)
    aborted.begin_transaction(3)  # an aborted epoch 3 must not count
    aborted.write(epoch_table(3, ROWS))
    aborted.prepare_transaction()
    aborted.abort_transaction(3)
    aborted.close()
    fill(bootstrap, topic_name, 3_000, partitions=3, tag="after", codecs=("zstd", "snappy"))
    forget(bootstrap, sink.marker_group)

    restarted = make_sink(bootstrap, topic_name, tid)
    restarted.witness_max_records = 2_000
    writer = laminar.exactly_once(restarted)
    assert not writer.write_epoch(2, epoch_table(2, ROWS)).committed
    found = restarted.startup_read
    assert found is not None
    assert (found.source, found.epoch) == ("witness", 2)
    assert 0 < found.read.records <= 3 * 2_000 * 4 // 3 + 3 * 1_024
    assert writer.write_epoch(3, epoch_table(3, ROWS)).committed
    writer.close()
    assert_exactly_once(ours(bootstrap, topic_name, tid), ids(range(4)))


def test_a_sink_without_identity_whose_transactional_id_is_known_runs_the_witness(
    broker_under_test: Any, topic_name: str
) -> None:
    """A sink from before identities whose marker expired: the producer epoch InitProducerId
    returns (> 0 for a known transactional id) is the evidence that the witness must run.
    (Apache Kafka only: Tansu 0.6 cannot write a group again once it was deleted.)"""
    bootstrap = broker_under_test.bootstrap_servers
    broker_under_test.create_topic(topic_name, 2)
    tid = f"tid-{topic_name}"
    sink = make_sink(bootstrap, topic_name, tid)
    write(sink, range(2))
    with KafkaLogClient(bootstrap) as client:
        identity = client.committed_offset(sink.identity_group, topic_name, 0)
    assert identity is not None
    if broker_under_test.capabilities.offset_metadata:  # Tansu drops offset metadata
        assert '"laminar": 1' in (identity[1] or "")
    forget(bootstrap, sink.marker_group, sink.identity_group)

    restarted = make_sink(bootstrap, topic_name, tid)
    restarted.init_transactions()
    found = restarted.startup_read
    assert found is not None
    assert (found.source, found.epoch) == ("witness", 1)
    restarted.close()
    with KafkaLogClient(bootstrap) as client:  # and the identity is recorded again
        assert client.committed_offset(sink.identity_group, topic_name, 0) is not None


def test_the_witness_settles_quiet_partitions_by_time_and_refuses_to_guess_past_its_bound(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    bootstrap = kafka_bootstrap
    kafka_broker.create_topic(topic_name, 2)
    hour_ago = now_ms() - 3_600_000
    # plain producers only: a transaction's marker is timestamped when the broker writes it
    fill(bootstrap, topic_name, 3_000, partitions=2, timestamp_ms=hour_ago, codecs=("zstd",))
    tid = f"tid-{topic_name}"
    sink = make_sink(bootstrap, topic_name, tid, key=None)  # no key: one partition per batch
    sink.init_transactions()
    sink.begin_transaction(0)
    sink.write_records([b'{"id": 1, "epoch": 0}'] * 10, None)
    sink.commit_transaction(0)
    sink.close()
    forget(bootstrap, sink.marker_group)

    settled = make_sink(bootstrap, topic_name, tid)
    settled.witness_max_records = 500
    assert settled.last_committed_epoch() == 0  # the other partition holds only old records
    fill(bootstrap, topic_name, 3_000, partitions=2, tag="recent")
    refusing = make_sink(bootstrap, topic_name, tid)
    refusing.witness_max_records = 500
    with pytest.raises(FatalError, match=r"witness_max_records=500.*cannot be proven"):
        refusing.last_committed_epoch()
    unbounded = make_sink(bootstrap, topic_name, tid)
    unbounded.witness_max_records = -1
    assert unbounded.last_committed_epoch() == 0


def test_64_partitions_written_recovered_and_started(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    bootstrap = kafka_bootstrap
    kafka_broker.create_topic(topic_name, 64)
    fill(bootstrap, topic_name, 6_400, partitions=64, codecs=("zstd", "lz4", "gzip"))
    tid = f"tid-{topic_name}"
    rows = 640

    def table(epoch: int) -> pa.Table:
        return epoch_table(epoch, rows)

    sink = make_sink(bootstrap, topic_name, tid, producer_config={"compression.type": "zstd"})
    writer = laminar.exactly_once(sink)
    for epoch in range(3):
        assert writer.write_epoch(epoch, table(epoch)).committed
    sink.begin_transaction(3)  # in flight when the process dies: never committed
    sink.write(table(3))
    sink.prepare_transaction()
    sink.release_prepared()
    forget(bootstrap, sink.marker_group)

    restarted = make_sink(bootstrap, topic_name, tid)
    writer = laminar.exactly_once(restarted)
    assert not writer.write_epoch(2, table(2)).committed
    found = restarted.startup_read
    assert found is not None
    assert (found.source, found.epoch) == ("witness", 2)
    assert writer.write_epoch(3, table(3)).committed
    writer.close()
    records = ours(bootstrap, topic_name, tid)
    assert len({r.partition for r in records}) == 64
    expected = {e * 1000 + i for e in range(4) for i in range(rows)}
    assert sorted(ids_of(records)) == sorted(expected)


@pytest.mark.parametrize(
    "point", ["atomic.after_kafka_prepare", "atomic.after_decision", "atomic.after_kafka_commit"]
)
def test_the_atomic_pair_killed_on_a_zstd_topic_recovers_exactly_once(
    world: dict[str, str], point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The atomic crash test (test_atomic_crash.py) on a topic that foreign producers filled
    with every codec, the sink writing zstd: recovery (EndTxn, redo log) and the oracle read
    zstd batches like any other."""
    fill(world["bootstrap"], world["topic"], 1_000, partitions=2, aborted_per_codec=2)
    monkeypatch.setenv("LAMINAR_TEST_KAFKA_COMPRESSION", "zstd")
    argv = [
        world["bootstrap"], world["topic"], world["dsn"], world["table"], world["tid"],
        str(EPOCHS), world["checkpoint"], "log",
    ]  # fmt: skip
    crashed = run_writer(argv, f"{point}@2")
    assert killed(crashed), crashed.stdout + crashed.stderr[-2000:]
    restarted = run_writer(argv, None)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr[-2000:]
    decided = point in ("atomic.after_decision", "atomic.after_kafka_commit")
    first = "skipped" if decided else "committed"
    assert restarted.stdout.splitlines()[0] == f"epoch 1: {first}"
    if point == "atomic.after_decision":
        assert "committed in Kafka by EndTxn" in restarted.stderr
    expected = {e * 1000 + i for e in range(EPOCHS) for i in range(ATOMIC_ROWS)}
    with psycopg.connect(world["dsn"]) as conn:
        rows = [r[0] for r in conn.execute(f"SELECT id FROM {world['table']}").fetchall()]
    assert sorted(rows) == sorted(expected)
    assert_exactly_once(ours(world["bootstrap"], world["topic"], world["tid"]), expected)
    with KafkaLogClient(world["bootstrap"]) as client:
        codecs = {b.compression.name.lower() for b in client.iter_batches(world["topic"], 0)}
    assert "zstd" in codecs
