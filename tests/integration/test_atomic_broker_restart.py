"""The atomic pair with its broker restarted (SIGTERM) or killed (SIGKILL) in the middle of a run:
between epochs, while an epoch's records are in flight, and after the PostgreSQL decision. The
test's own Apache Kafka broker keeps its data (its log directory) across the restart. After
recovery every record is in PostgreSQL once and among Kafka's committed records once.

What this guards: librdkafka's transactional calls can block past their timeout when the broker
goes away under them (librdkafka #5456); the Kafka sink bounds every such call, gives the stuck
producer up and lets the epoch be written again, so a write never hangs and never duplicates.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

import laminar
from laminar.kafka.sink import KafkaSink
from tests.integration.atomic_helpers import (
    assert_exactly_once,
    create_table,
    epoch_table,
    make_group,
)
from tests.integration.kafka_fill import settled_logs

#: A write that waits on a dead broker ends within commit_timeout_s (5 s in make_group) plus a
#: grace period, per stuck call; the retries of one epoch fit well inside this bound. The
#: bounce itself (an Apache Kafka JVM restarting: 10-30 s on a loaded 2-core machine) happens
#: inside the write in some tests and is not counted.
BOUND_S = 60.0


def settle(broker: Any, topic: str) -> None:
    """Wait until the committed epochs' markers are in the partitions. The transaction
    coordinator writes them *after* answering the commit, and a single broker SIGKILLed within
    that window was seen to come back without the transaction's state (InitProducerId then
    answered producer epoch 0) and to abort it: an acknowledged commit lost by the broker, which
    no client can guard against. What these tests check is Laminar's handling of the epoch in
    flight, so the epochs before it are made durable on the broker first."""
    settled_logs(broker.bootstrap_servers, topic, within_s=30.0)


def bounce(broker: Any, how: str) -> float:
    """Restart (SIGTERM) or kill (SIGKILL) the broker and start it again; the seconds it took."""
    started = time.monotonic()
    if how == "restart":
        broker.restart()
    else:
        broker.kill()
        time.sleep(0.5)
        broker.start()
    return time.monotonic() - started


@pytest.fixture
def durable(broker_factory: Callable[..., Any], postgres: Any, unique_name: Any) -> Any:
    """A durable broker of its own, and a database of its own: its sinks' registry rows point
    at a broker that is gone after the test, which other tests' `laminar status` need not see."""
    broker = broker_factory(durable=True)
    topic, table = unique_name("topic"), unique_name("tbl")
    broker.create_topic(topic, partitions=2)
    dsn = postgres.create_database(unique_name("db"))
    create_table(dsn, table)
    return broker, topic, table, dsn


def timed_write(
    writer: laminar.ExactlyOnceWriter, epoch: int, bounces: list[float] | None = None
) -> laminar.EpochResult:
    started = time.monotonic()
    result = writer.write_epoch(epoch, epoch_table(epoch))
    elapsed = time.monotonic() - started - sum(bounces or ())
    assert elapsed < BOUND_S, f"epoch {epoch} took {elapsed:.1f} s"
    return result


# between epochs a SIGTERM restart is a kill without the crash (in flight, both are run below)
@pytest.mark.parametrize("how", ["kill"])
def test_broker_bounced_between_epochs(durable: Any, how: str) -> None:
    broker, topic, table, pg_dsn = durable
    writer = make_group(broker.bootstrap_servers, topic, pg_dsn, table, f"tid-{topic}")
    for epoch in range(2):
        assert timed_write(writer, epoch).committed
    settle(broker, topic)
    bounce(broker, how)
    for epoch in range(2, 5):
        assert timed_write(writer, epoch).committed
    writer.close()
    assert_exactly_once(broker.bootstrap_servers, topic, pg_dsn, table, 5)


@pytest.mark.parametrize(("how", "redo"), [("kill", "replay"), ("restart", "log")])
def test_broker_bounced_while_an_epoch_is_in_flight(
    durable: Any, how: str, redo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker goes away after the epoch's records were produced, before its marker and
    flush: nothing is decided; the epoch is aborted and written again by the writer's retry."""
    broker, topic, table, pg_dsn = durable
    writer = make_group(broker.bootstrap_servers, topic, pg_dsn, table, f"tid-{topic}", redo=redo)
    assert timed_write(writer, 0).committed
    settle(broker, topic)
    real = KafkaSink.prepare_transaction
    bounced: list[float] = []

    def bounce_then_prepare(self: KafkaSink) -> Any:
        if not bounced:
            bounced.append(bounce(broker, how))
        return real(self)

    monkeypatch.setattr(KafkaSink, "prepare_transaction", bounce_then_prepare)
    result = timed_write(writer, 1, bounced)
    monkeypatch.undo()
    assert bounced
    assert result.committed
    assert timed_write(writer, 2).committed
    writer.close()
    assert_exactly_once(broker.bootstrap_servers, topic, pg_dsn, table, 3)


@pytest.mark.parametrize("redo", ["replay", "log"])
def test_broker_killed_after_the_decision(
    durable: Any, redo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker dies after PostgreSQL decided the epoch, before Kafka's commit: the epoch is
    decided, so Kafka's part is completed — by EndTxn, the redo log, or the replay of the
    batch — never rolled back and never written twice."""
    broker, topic, table, pg_dsn = durable
    tid = f"tid-{topic}"
    writer = make_group(broker.bootstrap_servers, topic, pg_dsn, table, tid, redo=redo)
    assert timed_write(writer, 0).committed
    settle(broker, topic)
    real = KafkaSink.commit_transaction
    bounced: list[int] = []
    bounce_seconds: list[float] = []

    def kill_then_commit(self: KafkaSink, epoch: int) -> None:
        if not bounced:
            bounced.append(epoch)
            bounce_seconds.append(bounce(broker, "kill"))
        real(self, epoch)

    monkeypatch.setattr(KafkaSink, "commit_transaction", kill_then_commit)
    started = time.monotonic()
    # The decided epoch may be left for recovery: completed below.
    with contextlib.suppress(laminar.LaminarError):
        writer.write_epoch(1, epoch_table(1))
    assert time.monotonic() - started - sum(bounce_seconds) < BOUND_S
    monkeypatch.undo()
    assert bounced == [1]
    # The next start (or Spark's replay of epoch 1) completes the decided epoch.
    writer.close()
    fresh = make_group(broker.bootstrap_servers, topic, pg_dsn, table, tid, redo=redo)
    fresh.write_epoch(1, epoch_table(1))  # the replay Spark would make
    assert timed_write(fresh, 2).committed
    fresh.close()
    assert_exactly_once(broker.bootstrap_servers, topic, pg_dsn, table, 3)
