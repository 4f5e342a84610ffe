"""`KafkaSink`'s clients: opening and closing the producer and the marker consumer, the topic
and connection checks, transactional calls under a time bound with bounded retries, and the
producer id/epoch from librdkafka's statistics."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from laminar.errors import (
    AbortableError,
    ConfigError,
    FatalError,
    IllegalStateError,
    InDoubtError,
    LaminarError,
)
from laminar.kafka._base import _SinkBase
from laminar.kafka._calls import StuckCallError as _StuckCallError
from laminar.kafka._calls import bounded_call as _bounded_call
from laminar.kafka._config import (
    build_producer_config,
    consumer_config,
)
from laminar.kafka._errors import (
    AUTH_CODES,
    as_kafka_error,
    classify,
    classify_silence,
    describe,
)
from laminar.kafka._runtime import _Runtime

log = logging.getLogger("laminar.kafka")

_TXN_CALLS = frozenset({"commit_transaction", "abort_transaction", "init_transactions"})
_CONNECTION_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
    }
)


class _Clients(_SinkBase):
    """The producer and consumer of a `KafkaSink` and the calls made on them."""

    def _release_clients(self, rt: _Runtime) -> None:
        """Close the producer and the consumer; the next use opens new ones."""
        self._close_producer(rt)
        if rt.consumer is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                rt.consumer.close()
            rt.consumer = None
        self._rt = None

    def _retrying(
        self,
        rt: _Runtime,
        operation: str,
        epoch: int | None,
        timeout_s: float,
        offsets: list[TopicPartition] | None = None,
    ) -> None:
        """Run a transactional call, retrying retriable errors (as librdkafka documents for
        send_offsets/commit/abort) a bounded number of times within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            attempt += 1
            remaining = max(deadline - time.monotonic(), 0.001)
            if operation == "send_offsets_to_transaction":
                args: tuple[Any, ...] = (offsets, rt.group_metadata, remaining)
            elif operation in _TXN_CALLS:
                args = (remaining,)
            else:  # pragma: no cover - a bug
                raise IllegalStateError(f"unknown operation {operation}")
            try:
                _bounded_call(rt.producer, operation, args, remaining)
                return
            except _StuckCallError as e:
                raise self._stuck(rt, e, operation, epoch, timeout_s) from None
            except KafkaException as e:
                kafka_error = as_kafka_error(e)
                retry = (
                    classify(e, operation).retry
                    and attempt <= self._retries
                    and time.monotonic() < deadline
                )
                if retry:
                    log.info(
                        "sink %s: %s: %s; retry %d/%d",
                        self.sink_id,
                        operation,
                        describe(kafka_error, self._context(epoch)) if kafka_error else e,
                        attempt,
                        self._retries,
                    )
                    continue
                raise self._error(e, operation, epoch, rt) from e

    def _stuck(
        self,
        rt: _Runtime,
        error: _StuckCallError,
        operation: str,
        epoch: int | None,
        timeout_s: float,
    ) -> LaminarError:
        """The error for a call that did not return in time. The producer is given up (the next
        use opens a new one, whose ``init_transactions`` fences it and aborts what it left
        open); a commit's outcome is then unknown until the marker is read."""
        producer, rt.producer = rt.producer, None
        del producer  # referenced by _kafka_calls.ABANDONED until the stuck call returns
        what = (
            f"sink {self.sink_id!r}: {operation} did not return within {timeout_s:g} s (and a "
            f"grace period) from the brokers at {self._bootstrap_servers} — a broker restarted "
            "or unreachable; librdkafka can block past its timeout there (librdkafka #5456)"
        )
        log.warning("%s; the producer is replaced", what)
        if classify(error, operation).kind == "in_doubt":
            return InDoubtError(
                f"{what}: the commit may or may not have happened; recover() reads the "
                "outcome from the epoch marker",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        return AbortableError(
            f"{what}: nothing was committed; the epoch is aborted and can be written again",
            sink_id=self.sink_id,
            epoch=epoch,
        )

    def _abort_producer_quietly(self, rt: _Runtime) -> None:
        """Abort the producer's transaction after a failed commit; if that fails too (or the
        producer was given up after a stuck call), a new producer's init aborts it."""
        if rt.producer is not None:
            try:
                _bounded_call(
                    rt.producer,
                    "abort_transaction",
                    (self._commit_timeout_s,),
                    self._commit_timeout_s,
                )
                rt.identity_changed()
                return
            except _StuckCallError as e:
                self._stuck(rt, e, "abort_transaction", None, self._commit_timeout_s)
            except KafkaException as e:
                log.warning(
                    "sink %s: abort after a failed commit failed (%s); re-initialising the "
                    "producer",
                    self.sink_id,
                    self._scrub(str(e)),
                )
        with contextlib.suppress(LaminarError):
            self._reinit_producer(rt)

    # -- producer identity --------------------------------------------------------------------

    def _producer_identity(self, rt: _Runtime) -> tuple[int, int]:
        """librdkafka's current producer id and epoch (waiting briefly for the first statistics
        report after an init or abort); (-1, -1) if they do not arrive in time."""
        if rt.identity is not None:
            return rt.identity
        interval_ms = int(self._producer_config.get("statistics.interval.ms", 100))
        deadline = time.monotonic() + min(5.0, 2 * interval_ms / 1000 + 0.5)
        while True:
            identity = rt.fresh_identity()
            if identity is not None:
                rt.identity = identity
                return identity
            if time.monotonic() >= deadline:
                if not rt.identity_warned:
                    log.warning(
                        "sink %s: librdkafka reported no producer id/epoch in time; the "
                        "prepared state records them as unknown (-1)",
                        self.sink_id,
                    )
                    rt.identity_warned = True
                return (-1, -1)
            rt.producer.poll(0.01)

    # -- clients ------------------------------------------------------------------------------

    def _live(self) -> _Runtime:
        """The runtime with an initialised producer (``init_transactions`` on first use)."""
        rt = self._rt
        if rt is None or rt.producer is None:
            self.init_transactions()
            rt = self._rt
            assert rt is not None
        if rt.fenced is not None:
            raise rt.fenced
        return rt

    def _open_epoch(self, call: str) -> int:
        epoch = self._machine.writing
        if epoch is None:
            raise IllegalStateError(
                f"{call}() needs an open transaction, but the sink is {self.tracker.state!r}; "
                "call begin_transaction(epoch) first",
                sink_id=self.sink_id,
            )
        return epoch

    def _open_consumer(self, rt: _Runtime) -> None:
        if rt.consumer is not None:
            return
        config = consumer_config(
            self._producer_config,
            bootstrap_servers=self._bootstrap_servers,
            group_id=self.marker_group,
        )
        # The marker is read as committed, not waiting for stable offsets (KIP-447): under
        # read_committed librdkafka's committed() asks for them, and Apache Kafka answers
        # UNSTABLE_OFFSET_COMMIT while any transaction holding a marker of this group is open —
        # so recovery's first read (and the watcher's, and `laminar status`), made before its
        # EndTxn completes that very prepared transaction, would wait until the broker aborts it.
        # A pending marker is not returned, so this never reports an epoch not committed. A read
        # that decides a write follows init_transactions, which returns once the previous
        # transaction is complete; `last_committed_epoch` adds what this instance committed.
        config["isolation.level"] = "read_uncommitted"
        try:
            rt.consumer = Consumer(config)
            rt.group_metadata = rt.consumer.consumer_group_metadata()
        except KafkaException as e:
            raise self._error(e, "init_transactions", None, rt) from e

    def _open_producer(self, rt: _Runtime) -> None:
        """A new producer: topic check, ``init_transactions`` (fences every older producer with
        this transactional id, and aborts their open transactions)."""
        self._close_producer(rt)
        config = build_producer_config(
            self._producer_config,
            bootstrap_servers=self._bootstrap_servers,
            transactional_id=self.sink_id,
            transaction_timeout_ms=self._transaction_timeout_ms,
            stats_cb=rt.on_stats,
            error_cb=rt.on_error,
            on_delivery=rt.on_delivery,
        )
        try:
            producer = Producer(config)
        except KafkaException as e:
            raise self._error(e, "init_transactions", None, rt) from e
        except (TypeError, ValueError) as e:
            raise ConfigError(
                f"invalid producer_config: {self._scrub(str(e))}", sink_id=self.sink_id
            ) from e
        rt.producer = producer
        rt.client_errors.clear()
        rt.stats_json = None
        self._check_topic(rt)
        self._retrying(rt, "init_transactions", None, self._init_timeout_s)
        rt.identity_changed()
        rt.identity_warned = False

    def _reinit_producer(self, rt: _Runtime) -> None:
        self._open_producer(rt)

    def _close_producer(self, rt: _Runtime) -> None:
        producer, rt.producer = rt.producer, None
        if producer is None:
            return
        with contextlib.suppress(KafkaException, RuntimeError, BufferError):
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.poll(0)
        # Dropping the last reference destroys the handle; an open transaction is left to the
        # broker's timeout or the next init_transactions (which aborts it).
        del producer

    def _check_topic(self, rt: _Runtime) -> None:
        """The topic exists (listing all topics never auto-creates one) and the brokers answer."""
        try:
            metadata = rt.producer.list_topics(timeout=self._init_timeout_s)
        except KafkaException as e:
            rt.producer.poll(0)  # serve error_cb: authentication failures arrive there
            raise self._connection_error(e, rt) from e
        rt.reached = True
        topic = metadata.topics.get(self._topic)
        if topic is None:
            raise ConfigError(
                f"topic {self._topic!r} does not exist on {self._bootstrap_servers}; create it "
                f"(e.g. kafka-topics.sh --create --topic {self._topic} --partitions N "
                "--replication-factor 3) — Laminar never creates topics",
                sink_id=self.sink_id,
            )
        if topic.error is not None:
            raise self._error(KafkaException(topic.error), "metadata", None, rt)

    def _connection_error(self, e: KafkaException, rt: _Runtime) -> LaminarError:
        stalled = rt.stalled_brokers()
        connected = rt.connected_brokers()
        failure = classify_silence(
            rt.client_errors, stalled=bool(stalled), connected=bool(connected)
        )
        if failure.cause == "unauthorized":
            seen = next(s for s in reversed(rt.client_errors) if s.code() in AUTH_CODES)
            return self._error(KafkaException(seen), "init_transactions", None, rt)
        if failure.cause == "stalled":
            return AbortableError(
                f"the Kafka cluster at bootstrap.servers={self._bootstrap_servers} did not "
                f"answer within init_timeout_s={self._init_timeout_s:g} s: "
                f"{', '.join(stalled)} accepted the connection but never answered (a hung "
                "broker, a black-holed load balancer), and no other server answered. Nothing "
                "was written; the call can be retried",
                sink_id=self.sink_id,
            )
        if failure.cause == "hung":
            return AbortableError(
                f"the Kafka cluster at bootstrap.servers={self._bootstrap_servers} did not "
                f"answer within init_timeout_s={self._init_timeout_s:g} s ({self._scrub(str(e))}):"
                f" {', '.join(connected)} set up the connection but did not answer the request "
                "(a hung or overloaded broker). Nothing was written; the call can be retried",
                sink_id=self.sink_id,
            )
        detail = ""
        for seen in reversed(rt.client_errors):
            if seen.code() in _CONNECTION_CODES and seen.code() != KafkaError._ALL_BROKERS_DOWN:
                detail = f"; last error: {describe(seen, self._context(None))}"
                break
        return FatalError(
            f"could not reach the Kafka cluster at bootstrap.servers={self._bootstrap_servers} "
            f"within init_timeout_s={self._init_timeout_s:g} s ({self._scrub(str(e))}{detail}); "
            "check the address, that the brokers run, and the security settings "
            "(security.protocol, sasl.*, ssl.*)",
            sink_id=self.sink_id,
        )
