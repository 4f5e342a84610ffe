"""A sink's start-up has one budget, ``init_timeout_s``, for all its calls together (real Apache
Kafka; docs/kafka.md "Budgets"): a failover met at every call still ends the start-up within it,
and a failover it can wait out — a new cluster electing its group coordinator — is waited out
instead of failing the start.

Before, each call had a fresh ``init_timeout_s`` of its own (the marker through librdkafka's
consumer, then each wire-client call of the identity and the witness), so a start-up that met a
failover at each lasted several budgets; and the marker read gave up at the first
NOT_COORDINATOR, so the first start of a sink on a new cluster failed with AbortableError.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

import laminar
from laminar import _faults
from laminar._core import TransactionalProducer
from laminar.embedded import KafkaBroker
from laminar.errors import AbortableError, FatalError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

INIT_TIMEOUT_S = 4.0
#: How far past its budget a start-up may end: the call under way when the budget ran out is
#: cut at it, plus scheduling on a busy 2-core machine.
SLACK_S = 1.5


def test_a_start_up_meeting_a_failover_at_every_call_ends_within_one_budget(
    kafka_broker: Any, topic_name: str, unique_name: Callable[[str], str]
) -> None:
    """The marker read meets the group coordinator moving six times in a row (2.55 s of the
    core's pauses), then every connection of the wire client is refused (the identity and the
    witness of a new sink): the start-up ends within ``init_timeout_s`` as a whole, with a
    retriable error, having retried both — not 2.55 s + a fresh 4 s."""
    kafka_broker.create_topic(topic_name, partitions=1)
    sink = laminar.KafkaSink(
        kafka_broker.bootstrap_servers,
        topic_name,
        unique_name("startup"),
        init_timeout_s=INIT_TIMEOUT_S,
        commit_timeout_s=10.0,
    )
    _faults.rearm_failures("kafka.committed@1:6,wire.connect@1:100000")
    try:
        started = time.monotonic()
        with pytest.raises(AbortableError) as raised:
            sink.init_transactions()
        elapsed = time.monotonic() - started
        injected = list(_faults.injected)
    finally:
        _faults.rearm_failures("")
    assert not isinstance(raised.value, FatalError)
    assert raised.value.retriable
    assert injected.count("kafka.committed") == 6, injected
    assert injected.count("wire.connect") >= 2, injected  # retried, then out of budget
    assert "init_timeout_s=4" in str(raised.value)
    # both calls met failovers for their share; together they kept to the one budget
    assert 2.5 <= elapsed <= INIT_TIMEOUT_S + SLACK_S, elapsed

    # the failover over, the same sink starts and writes
    sink.init_transactions()
    assert sink.begin_transaction(0)
    sink.write(laminar_rows())
    sink.commit_transaction(0)
    sink.close()


def test_a_start_up_waits_out_a_failover_within_its_budget(
    kafka_broker: Any, topic_name: str, unique_name: Callable[[str], str]
) -> None:
    """The marker read meets the coordinator moving three times (350 ms of pauses): the
    start-up rides it out and the sink writes, no error."""
    kafka_broker.create_topic(topic_name, partitions=1)
    sink = laminar.KafkaSink(
        kafka_broker.bootstrap_servers, topic_name, unique_name("startup"), init_timeout_s=10.0
    )
    _faults.rearm_failures("kafka.committed@1:3")
    try:
        sink.init_transactions()
        injected = list(_faults.injected)
    finally:
        _faults.rearm_failures("")
    assert injected == ["kafka.committed"] * 3
    assert sink.begin_transaction(0)
    sink.write(laminar_rows())
    sink.commit_transaction(0)
    assert sink.last_committed_epoch() == 0
    sink.close()


def test_a_write_after_a_failed_start_up_starts_again_and_skips_what_is_committed(
    kafka_broker: Any, topic_name: str, unique_name: Callable[[str], str]
) -> None:
    """A start-up that ran out its budget (the marker unreadable all along) leaves nothing
    open: the next ``begin_transaction`` — without ``init_transactions`` first, as a caller
    retrying an ``AbortableError`` does — starts again and reads the marker, so the replay of
    the committed epoch 0 is skipped. (The producer used to stay open with the last committed
    epoch unread, and the begin opened epoch 0 again: a duplicate.)"""
    kafka_broker.create_topic(topic_name, partitions=1)
    tid = unique_name("startup")
    first = laminar.KafkaSink(kafka_broker.bootstrap_servers, topic_name, tid)
    assert first.begin_transaction(0)
    first.write(laminar_rows())
    first.commit_transaction(0)
    first.close()

    again = laminar.KafkaSink(
        kafka_broker.bootstrap_servers, topic_name, tid, init_timeout_s=3.0, commit_timeout_s=10.0
    )
    _faults.rearm_failures("kafka.committed@1:100000")
    try:
        with pytest.raises(AbortableError):
            again.init_transactions()
    finally:
        _faults.rearm_failures("")
    assert not again.begin_transaction(0)  # committed: skipped, not written twice
    assert again.last_committed_epoch() == 0
    assert again.begin_transaction(1)
    again.write(laminar_rows())
    again.commit_transaction(1)
    again.close()


def test_the_first_start_on_a_new_cluster_waits_for_its_group_coordinator(
    broker_factory: Callable[..., KafkaBroker],
) -> None:
    """On a cluster just started, where other transactional producers came first, the marker
    group's coordinator is not elected yet when the sink reads its marker (NOT_COORDINATOR while
    the offsets topic is created): the start waits for it, within its budget, instead of
    failing with AbortableError (found starting a benchmark on a fresh broker)."""
    broker = broker_factory()
    bootstrap = broker.bootstrap_servers
    topic = f"fresh_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=1)
    others = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"other-{topic}"})
    others.init_transactions(30)
    native = TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    native.init_transactions(30)
    sink = laminar.KafkaSink(bootstrap, topic, f"sink-{topic}", init_timeout_s=20.0)
    started = time.monotonic()
    sink.init_transactions()
    assert time.monotonic() - started < 20.0
    assert sink.begin_transaction(0)
    sink.write(laminar_rows())
    sink.commit_transaction(0)
    sink.close()
    del others, native


def laminar_rows() -> Any:
    import pyarrow as pa

    return pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]})
