"""Measure which exactly-once features a Kafka-protocol broker really provides.

Tansu, for one, accepts every transactional request but (measured with tansu 0.6.0) does not
filter the records of aborted transactions for ``read_committed`` consumers, drops the
metadata string of committed offsets and never times a transaction out; Apache Kafka passes
every check. Tests ask the broker instead of assuming: each check below is a real round trip
with a short timeout.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

__all__ = ["BrokerCapabilities", "probe_broker"]

_log = logging.getLogger("laminar.embedded.probe")

#: The ``transaction.timeout.ms`` of the probe's expiring transaction, and how long the probe
#: waits for the broker to abort it (its timeout, plus Apache Kafka's default 10 s check
#: interval, plus a margin).
PROBE_TRANSACTION_TIMEOUT_MS = 2000
TRANSACTION_TIMEOUT_WAIT_S = 15.0

_FENCED_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)


@dataclass(frozen=True)
class BrokerCapabilities:
    """What a broker did when asked, one flag per exactly-once feature.

    - ``transactions``: a committed transaction's records are visible to ``read_committed``.
    - ``fencing``: a second producer with the same ``transactional.id`` fences the first (its
      next transactional call fails with a fenced/fatal error).
    - ``hides_open_transactions``: ``read_committed`` does not see an open transaction's records
      (last stable offset) until it commits.
    - ``hides_aborted_records``: ``read_committed`` never sees an aborted transaction's records.
    - ``offset_commit``: an offset sent with ``send_offsets_to_transaction`` is the group's
      committed offset after the commit.
    - ``offset_metadata``: the metadata string of that offset survives.
    - ``transaction_timeout``: the broker aborts a transaction left open longer than its
      producer's ``transaction.timeout.ms`` (read_committed readers get past it, and the writer
      can no longer commit it). A broker checks for expired transactions periodically (Apache
      Kafka: ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 10 s by default);
      the probe waits up to ``TRANSACTION_TIMEOUT_WAIT_S`` for it.

    ``reasons`` says, per flag, what was observed (why a check failed).
    """

    CHECKS: ClassVar[tuple[str, ...]] = (
        "transactions",
        "fencing",
        "hides_open_transactions",
        "hides_aborted_records",
        "offset_commit",
        "offset_metadata",
        "transaction_timeout",
    )

    bootstrap_servers: str
    transactions: bool
    fencing: bool
    hides_open_transactions: bool
    hides_aborted_records: bool
    offset_commit: bool
    offset_metadata: bool
    reasons: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, hash=False
    )
    elapsed_s: float = field(default=0.0, compare=False, hash=False)
    # Added after the first release: last, with a default, so existing constructions still work.
    transaction_timeout: bool = False

    def supported(self) -> tuple[str, ...]:
        """The names of the checks that passed."""
        return tuple(name for name in self.CHECKS if getattr(self, name))

    def missing(self) -> tuple[str, ...]:
        """The names of the checks that failed."""
        return tuple(name for name in self.CHECKS if not getattr(self, name))

    @property
    def full_exactly_once(self) -> bool:
        """Whether every check passed (the broker behaves like Apache Kafka here)."""
        return not self.missing()

    def summary(self) -> str:
        """One line per check, e.g. for a test run's header."""
        lines = [f"broker {self.bootstrap_servers} (probed in {self.elapsed_s:.1f} s):"]
        for name in self.CHECKS:
            ok = getattr(self, name)
            reason = self.reasons.get(name, "")
            lines.append(f"  {name:<24} {'yes' if ok else 'NO '}  {reason}".rstrip())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


class _ProbeError(Exception):
    """A check's observation that ends it with a clear reason."""


@dataclass
class _Results:
    flags: dict[str, bool] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def record(self, name: str, ok: bool, reason: str) -> None:
        self.flags[name] = ok
        self.reasons[name] = reason


def probe_broker(
    bootstrap_servers: str,
    *,
    timeout: float = 10.0,
    client_config: Mapping[str, Any] | None = None,
) -> BrokerCapabilities:
    """Run every check against the broker at ``bootstrap_servers`` and return the results.

    ``client_config`` is added to every client's configuration (security settings for a real
    cluster). Each blocking call waits at most ``timeout`` seconds. The probe creates one
    single-partition topic ``laminar-probe-<random>`` and deletes it afterwards (best effort).
    """
    started = time.monotonic()
    probe = _Probe(bootstrap_servers, timeout, dict(client_config or {}))
    results = _Results()
    try:
        probe.run(results)
    finally:
        probe.close()
    flags, reasons = results.flags, results.reasons
    for name in BrokerCapabilities.CHECKS:
        flags.setdefault(name, False)
        reasons.setdefault(name, "not checked")
    return BrokerCapabilities(
        bootstrap_servers=bootstrap_servers,
        transactions=flags["transactions"],
        fencing=flags["fencing"],
        hides_open_transactions=flags["hides_open_transactions"],
        hides_aborted_records=flags["hides_aborted_records"],
        offset_commit=flags["offset_commit"],
        offset_metadata=flags["offset_metadata"],
        transaction_timeout=flags["transaction_timeout"],
        reasons=MappingProxyType(dict(reasons)),
        elapsed_s=time.monotonic() - started,
    )


class _Probe:
    def __init__(self, bootstrap_servers: str, timeout: float, client_config: dict[str, Any]):
        self.bootstrap_servers = bootstrap_servers
        self.timeout = timeout
        self.client_config = client_config
        token = uuid.uuid4().hex[:12]
        self.topic = f"laminar-probe-{token}"
        self.transactional_id = f"laminar-probe-{token}"
        self.group = f"laminar-probe-{token}"
        self._producers: list[Producer] = []
        self._consumers: list[Consumer] = []
        self._topic_created = False

    # -- clients ----------------------------------------------------------------------------

    def _config(self, **extra: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": _log,
            **self.client_config,
            **extra,
        }

    def producer(self, suffix: str = "", transaction_timeout_ms: int = 60000) -> Producer:
        producer = Producer(
            self._config(
                **{
                    "transactional.id": self.transactional_id + suffix,
                    "transaction.timeout.ms": transaction_timeout_ms,
                    "message.timeout.ms": min(int(self.timeout * 1000), transaction_timeout_ms),
                }
            )
        )
        self._producers.append(producer)
        return producer

    def consumer(self, isolation: str, group: str | None = None) -> Consumer:
        consumer = Consumer(
            self._config(
                **{
                    "group.id": group or f"{self.group}-reader-{len(self._consumers)}",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "isolation.level": isolation,
                }
            )
        )
        self._consumers.append(consumer)
        return consumer

    def reader(self, isolation: str) -> _Reader:
        consumer = self.consumer(isolation)
        consumer.assign([TopicPartition(self.topic, 0, 0)])
        return _Reader(consumer)

    def close(self) -> None:
        for consumer in self._consumers:
            with contextlib.suppress(KafkaException, RuntimeError):
                consumer.close()
        self._consumers.clear()
        self._producers.clear()
        if self._topic_created:
            try:
                admin = AdminClient(self._config())
                for future in admin.delete_topics([self.topic]).values():
                    future.result(self.timeout)
            except Exception as e:  # best effort: a leftover probe topic is harmless
                _log.debug("could not delete probe topic %s: %s", self.topic, e)

    # -- checks -----------------------------------------------------------------------------

    def run(self, results: _Results) -> None:
        try:
            self.create_topic()
        except _ProbeError as e:
            for name in BrokerCapabilities.CHECKS:
                results.record(name, False, f"probe topic could not be created: {e}")
            return
        first = self.check_transactions(results)
        if first is None:
            for name in BrokerCapabilities.CHECKS[1:]:
                results.record(name, False, "needs transactions")
            return
        self.check_open_transaction_hidden(results, first)
        self.check_aborted_records_hidden(results, first)
        survivor = self.check_fencing(results, first)
        self.check_offsets(results, survivor)
        self.check_transaction_timeout(results, survivor)

    def create_topic(self) -> None:
        admin = AdminClient(self._config())
        try:
            futures = admin.create_topics(
                [NewTopic(self.topic, 1, 1)], operation_timeout=self.timeout
            )
            futures[self.topic].result(self.timeout)
        except KafkaException as e:
            raise _ProbeError(_describe(e)) from e
        self._topic_created = True

    def check_transactions(self, results: _Results) -> Producer | None:
        name = "transactions"
        try:
            producer = self.producer()
            producer.init_transactions(self.timeout)
            producer.begin_transaction()
            producer.produce(self.topic, value=b"committed-1", partition=0)
            producer.commit_transaction(self.timeout)
        except KafkaException as e:
            results.record(name, False, f"transactional commit failed: {_describe(e)}")
            return None
        seen = self.reader("read_committed").read_until(
            lambda values: b"committed-1" in values, self.timeout
        )
        if b"committed-1" not in seen:
            results.record(
                name,
                False,
                f"read_committed did not see a committed record within {self.timeout:.0f} s",
            )
            return None
        results.record(name, True, "a committed record is visible to read_committed")
        return producer

    def check_open_transaction_hidden(self, results: _Results, producer: Producer) -> None:
        name = "hides_open_transactions"
        try:
            producer.begin_transaction()
            producer.produce(self.topic, value=b"open-1", partition=0)
            producer.flush(self.timeout)
            uncommitted = self.reader("read_uncommitted").read_until(
                lambda values: b"open-1" in values, self.timeout
            )
            if b"open-1" not in uncommitted:
                results.record(name, False, "an open transaction's record never reached the broker")
                producer.abort_transaction(self.timeout)
                return
            committed_reader = self.reader("read_committed")
            seen = committed_reader.read_until(
                lambda values: b"committed-1" in values, self.timeout
            )
            # Give the consumer time to fetch past the open record if the broker would let it.
            seen += committed_reader.read_for(min(2.0, self.timeout))
            hidden = b"open-1" not in seen
            producer.commit_transaction(self.timeout)
            seen += committed_reader.read_until(lambda values: b"open-1" in values, self.timeout)
        except KafkaException as e:
            results.record(name, False, f"transactional call failed: {_describe(e)}")
            return
        if not hidden:
            results.record(name, False, "read_committed saw a record of a transaction still open")
        elif b"open-1" not in seen:
            results.record(
                name, False, "the open transaction's record stayed invisible after its commit"
            )
        else:
            results.record(name, True, "hidden while open, visible after commit (LSO)")

    def check_aborted_records_hidden(self, results: _Results, producer: Producer) -> None:
        name = "hides_aborted_records"
        try:
            producer.begin_transaction()
            producer.produce(self.topic, value=b"aborted-1", partition=0)
            producer.flush(self.timeout)
            producer.abort_transaction(self.timeout)
            producer.begin_transaction()
            producer.produce(self.topic, value=b"committed-2", partition=0)
            producer.commit_transaction(self.timeout)
        except KafkaException as e:
            results.record(name, False, f"transactional call failed: {_describe(e)}")
            return
        seen = self.reader("read_committed").read_until(
            lambda values: b"committed-2" in values, self.timeout
        )
        if b"committed-2" not in seen:
            results.record(name, False, "read_committed never reached the record after the abort")
        elif b"aborted-1" in seen:
            results.record(name, False, "read_committed saw the record of an aborted transaction")
        else:
            results.record(name, True, "aborted records are filtered for read_committed")

    def check_fencing(self, results: _Results, zombie: Producer) -> Producer:
        name = "fencing"
        successor = self.producer()
        try:
            zombie.begin_transaction()
            zombie.produce(self.topic, value=b"zombie-1", partition=0)
            zombie.flush(self.timeout)
            successor.init_transactions(self.timeout)
        except KafkaException as e:
            results.record(name, False, f"second producer could not initialise: {_describe(e)}")
            return successor
        try:
            # Apache Kafka answers at once; a short wait is enough to tell.
            zombie.commit_transaction(min(self.timeout, 3.0))
        except KafkaException as e:
            error: KafkaError = e.args[0]
            if error.fatal() or error.code() in _FENCED_CODES:
                results.record(name, True, f"the first producer was fenced ({error.name()})")
            elif error.code() == KafkaError._TIMED_OUT:
                results.record(
                    name,
                    False,
                    "the first producer's commit was blocked, but it timed out (retriable "
                    "_TIMED_OUT) instead of failing as fenced (PRODUCER_FENCED)",
                )
            else:
                results.record(
                    name, False, f"the first producer failed, but not as fenced: {_describe(e)}"
                )
            return successor
        results.record(
            name, False, "the first producer still committed after a second one took its id"
        )
        return successor

    def check_offsets(self, results: _Results, producer: Producer) -> None:
        offset, metadata = 42, "laminar-probe:42"
        group_consumer = self.consumer("read_committed", group=self.group)
        try:
            producer.begin_transaction()
            producer.produce(self.topic, value=b"offsets-1", partition=0)
            producer.send_offsets_to_transaction(
                [TopicPartition(self.topic, 0, offset, metadata=metadata)],
                group_consumer.consumer_group_metadata(),
                self.timeout,
            )
            producer.commit_transaction(self.timeout)
            committed = group_consumer.committed(
                [TopicPartition(self.topic, 0)], timeout=self.timeout
            )[0]
        except KafkaException as e:
            reason = f"send_offsets_to_transaction/commit failed: {_describe(e)}"
            results.record("offset_commit", False, reason)
            results.record("offset_metadata", False, reason)
            return
        if committed.offset != offset:
            results.record(
                "offset_commit",
                False,
                f"the group's committed offset reads back as {committed.offset}, not {offset}",
            )
            results.record("offset_metadata", False, "needs offset_commit")
            return
        results.record("offset_commit", True, "the transaction's offset is the group's offset")
        if committed.metadata == metadata:
            results.record("offset_metadata", True, "the offset's metadata string survives")
        else:
            results.record(
                "offset_metadata",
                False,
                f"metadata {metadata!r} reads back as {committed.metadata!r}",
            )

    def check_transaction_timeout(self, results: _Results, committer: Producer) -> None:
        name = "transaction_timeout"
        limit = PROBE_TRANSACTION_TIMEOUT_MS
        try:
            expiring = self.producer("-expiring", transaction_timeout_ms=limit)
            expiring.init_transactions(self.timeout)
            expiring.begin_transaction()
            expiring.produce(self.topic, value=b"expiring-1", partition=0)
            expiring.flush(self.timeout)
            committer.begin_transaction()
            committer.produce(self.topic, value=b"after-expiring", partition=0)
            committer.commit_transaction(self.timeout)
        except KafkaException as e:
            results.record(name, False, f"transactional call failed: {_describe(e)}")
            return
        # read_committed stops at the open transaction (last stable offset) until it ends.
        seen = self.reader("read_committed").read_until(
            lambda values: b"after-expiring" in values, TRANSACTION_TIMEOUT_WAIT_S
        )
        if b"after-expiring" not in seen:
            results.record(
                name,
                False,
                f"a transaction open past transaction.timeout.ms={limit} was still open "
                f"{TRANSACTION_TIMEOUT_WAIT_S:.0f} s later",
            )
            with contextlib.suppress(KafkaException):
                expiring.abort_transaction(self.timeout)
            return
        try:
            expiring.commit_transaction(min(self.timeout, 5.0))
        except KafkaException as e:
            reason = f"aborted after transaction.timeout.ms={limit}; late commit: {_describe(e)}"
            results.record(name, True, reason)
        else:
            results.record(name, False, "the transaction ended, but its writer still committed it")


class _Reader:
    """Reads one partition's values with a consumer that is already assigned."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    def read_until(self, done: Callable[[list[bytes]], bool], timeout: float) -> list[bytes]:
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while not done(values) and time.monotonic() < deadline:
            values.extend(self._poll(0.2))
        return values

    def read_for(self, seconds: float) -> list[bytes]:
        values: list[bytes] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            values.extend(self._poll(0.2))
        return values

    def _poll(self, timeout: float) -> list[bytes]:
        message: Message | None = self.consumer.poll(timeout)
        if message is None:
            return []
        if message.error() is not None:
            _log.debug("probe consumer: %s", message.error())
            return []
        value = message.value()
        return [value] if isinstance(value, bytes) else []


def _describe(e: KafkaException) -> str:
    error = e.args[0] if e.args else None
    if isinstance(error, KafkaError):
        return f"{error.name()}: {error.str()}"
    return str(e)
