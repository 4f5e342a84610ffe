"""A retriable failure at every Kafka client call of every step (real Apache Kafka, real
PostgreSQL): the next retry writes the epoch exactly once, with its exact value.

As the crash tests walk the crash points, this walks `laminar._faults.FAIL_POINTS`: every call of
librdkafka's transactional API and of the core's wire client, failed with that client's own
retriable error — a time-out, NOT_COORDINATOR, NOT_LEADER_OR_FOLLOWER, a refused connection, a
call that never returns — once (the sink's or the wire client's own retry absorbs it) and many
times in a row (past every local retry: the writer's retries, then the caller's retry of
``write_epoch``, as Spark's replay of the batch would). Each case runs what a query's life
reaches — a restart of a sink with history, epochs, a restart that finds its marker lost (the
witness) — in one process, so each point is reached; the test asserts it was.

Nothing may end in a `FatalError` (a failover is never the user's to fix), the writer must stay
usable after every failure (a failed abort left the sink ``Active``: the retry was refused with
``IllegalStateError``), and at the end each epoch is in each store exactly once, every row with
its exact value, Kafka judged by its committed records with control batches replayed.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

import laminar
from laminar import _faults
from laminar.errors import FatalError, IllegalStateError, LaminarError
from tests.integration.atomic_helpers import assert_exact_values, create_table, epoch_table

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: How each point is armed so that the step it fails is reached: an abort happens only after
#: something failed, EndTxn only when a decided epoch's producer is gone.
ARMING = {
    "kafka.abort_transaction": "kafka.produce@1,kafka.abort_transaction@1:{n}",
    "wire.EndTxn": "kafka.stuck@3,wire.EndTxn@1:{n}",
}
#: Consecutive failures: one (a local retry absorbs it) and more than every local retry.
TIMES = (1, 6)
#: Sequences seen on a real cluster, as (name, LAMINAR_FAIL_AT).
SEQUENCES = [
    # a broker holding the coordinators SIGKILLed mid-epoch: send_offsets never returns, the
    # producer is given up, and the abort's new producer cannot read the marker while the
    # coordinators move back (the abort failed quietly and left the sink Active: the retry's
    # begin was refused with IllegalStateError)
    ("stuck-then-marker-unreadable", "kafka.stuck@2,kafka.committed@2:6"),
    # the commit never returns (in doubt) and EndTxn's coordinator is moving
    ("stuck-commit-then-coordinator-moving", "kafka.stuck@3,wire.FindCoordinator@1:6"),
]
CASES = [
    pytest.param(point, ARMING.get(point, f"{point}@1:{{n}}").format(n=n), id=f"{point}-{n}")
    for point in sorted(_faults.FAIL_POINTS)
    for n in TIMES
] + [pytest.param(spec.split("@")[0], spec, id=name) for name, spec in SEQUENCES]


def make_writer(bootstrap: str, topic: str, dsn: str, table: str, tid: str) -> Any:
    kafka = laminar.KafkaSink(
        bootstrap, topic, tid, key="id", commit_timeout_s=5.0, init_timeout_s=10.0
    )
    postgres = laminar.PostgresSink(dsn, table)
    return laminar.exactly_once(kafka, postgres, retry_backoff_s=0.05)


def write(writer: Any, epoch: int, failures: list[str]) -> None:
    """``write_epoch`` as Spark drives it: a failed batch is run again (a replay), here up to
    eight times; a fatal error or a refused retry fails the test."""
    for _ in range(8):
        try:
            writer.write_epoch(epoch, epoch_table(epoch))
            return
        except (FatalError, IllegalStateError):
            raise
        except LaminarError as e:
            failures.append(f"epoch {epoch}: {type(e).__name__}: {str(e)[:200]}")
    raise AssertionError(f"epoch {epoch} not written after 8 attempts: {failures[-3:]}")


def delete_marker(bootstrap: str, tid: str) -> None:
    """The marker group expired (offsets.retention.minutes): the next start reads the witness."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_consumer_groups([f"laminar.{tid}"], request_timeout=15).values():
        future.result(15)


@pytest.mark.parametrize(("point", "spec"), CASES)
def test_a_retriable_failure_at_every_client_call_writes_each_epoch_once(
    kafka_broker: Any,
    pg_dsn: str,
    topic_name: str,
    table_name: str,
    unique_name: Any,
    clean_prepared_xacts: str,
    point: str,
    spec: str,
) -> None:
    kafka_broker.create_topic(topic_name, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    create_table(pg_dsn, table_name)
    tid = unique_name("tx")
    failures: list[str] = []
    reached: list[str] = []

    try:
        # a new sink (its identity recorded), then a restart with two epochs, then a restart
        # that finds its marker lost (the witness reads the topic): each under the fault
        for run, epochs in enumerate(([0], [1, 2], [3, 2])):
            if run == 2:
                delete_marker(bootstrap, tid)
            _faults.rearm_failures(spec)
            writer = make_writer(bootstrap, topic_name, pg_dsn, table_name, tid)
            for epoch in epochs:  # the last 2: a replay of a committed epoch, skipped
                write(writer, epoch, failures)
            writer.close()
            reached += _faults.injected
    finally:
        _faults.rearm_failures("")
    assert point in reached, f"{point} was never reached ({spec}); injected: {reached}"
    assert_exact_values(bootstrap, topic_name, pg_dsn, table_name, epochs=4)
    if spec.endswith(":1"):
        # one failure is absorbed inside write_epoch: the client's retry, the sink's, the
        # writer's — the caller never sees it
        assert failures == [], failures
    if failures:
        print(f"{spec}: {len(failures)} failed attempt(s) retried: {failures[:3]}")


def test_a_role_that_stays_unreachable_past_the_bound_is_retriable_not_fatal(
    kafka_broker: Any, topic_name: str, unique_name: Any
) -> None:
    """The marker's coordinator answers NOT_COORDINATOR for longer than init_timeout_s: the
    start-up ends in a retriable `AbortableError` naming the bound — never a `FatalError` — and
    the next call, once the coordinator answers, starts the sink."""
    kafka_broker.create_topic(topic_name, partitions=1)
    tid = unique_name("tx")
    sink = laminar.KafkaSink(kafka_broker.bootstrap_servers, topic_name, tid, init_timeout_s=1.5)
    _faults.rearm_failures("wire.OffsetFetch@1:1000")
    try:
        with pytest.raises(laminar.errors.AbortableError) as failed:
            sink.last_committed_epoch()
    finally:
        _faults.rearm_failures("")
    assert failed.value.retriable
    assert "init_timeout_s=1.5" in str(failed.value)
    assert "OffsetFetch" in str(failed.value)
    assert sink.last_committed_epoch() is None
    sink.close()
