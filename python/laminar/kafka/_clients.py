"""`KafkaSink`'s clients in the writing process (`Clients`): opening and closing the producer (the
core's `TransactionalProducer`, docs/kafka.md "Producing") and the marker consumer, the topic and
connection checks, transactional calls under a time bound with bounded retries, a commit of
unknown outcome resolved with them (the core's `KafkaInDoubtMachine` performed), and the producer
id/epoch from librdkafka's statistics."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from typing_extensions import assert_never

from laminar._core import (
    Command,
    Event,
    KafkaInDoubtMachine,
    SinkTransaction,
    TransactionalProducer,
    attempt_next,
    identity_wait_s,
)
from laminar.engine.loop import drive, now_ms, perform_driver_side
from laminar.errors import (
    AbortableError,
    ConfigError,
    FatalError,
    FencedError,
    IllegalStateError,
    InDoubtError,
    LaminarError,
)
from laminar.kafka._base import PartSettings
from laminar.kafka._calls import StuckCallError as _StuckCallError
from laminar.kafka._calls import bounded_call as _bounded_call
from laminar.kafka._calls import retire as _retire
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
    is_silence,
)
from laminar.kafka._runtime import _Runtime

if TYPE_CHECKING:
    from laminar._core import _KafkaInDoubtCommand

log = logging.getLogger("laminar.kafka")

#: How long a new producer's first metadata request waits, while no broker is set up, before
#: its reports are served and it is asked again, each wait twice the last
#: (`Clients.check_topic`); and the errors that mean "no answer yet".
_METADATA_SLICE_S = 0.25
_METADATA_WAIT_CODES = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT})
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


class Clients:
    """The producer and the marker consumer of a `KafkaSink` in this process (held in ``rt``,
    with what their callbacks reported) and the calls made on them, under the sink's settings
    (``cfg``: its bounds, its retries, its error wording)."""

    def __init__(self, cfg: PartSettings, rt: _Runtime) -> None:
        self.cfg = cfg
        self.rt = rt

    def release(self) -> None:
        """Close the producer and the consumer; the next use opens new ones."""
        self.close_producer()
        if self.rt.consumer is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                self.rt.consumer.close()
            self.rt.consumer = None

    def retrying(
        self,
        operation: str,
        epoch: int | None,
        timeout_s: float,
        offsets: list[tuple[str, int, int]] | None = None,
    ) -> None:
        """Run a transactional call, retrying retriable errors (as librdkafka documents for
        send_offsets/commit/abort) a bounded number of times within ``timeout_s``. Each attempt
        has the core's attempt time-out and grace, and what follows a failed one is the core's
        rule (`laminar._core.attempt_next`, docs/kafka.md "Budgets"): an attempt that does not
        return, or that ran out its time-out with no broker answering, gives its producer up."""
        timeouts = self.cfg.timeouts
        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            attempt += 1
            remaining = min(max(deadline - time.monotonic(), 0.001), timeouts.attempt_s(timeout_s))
            if operation == "send_offsets_to_transaction":
                args: tuple[Any, ...] = (offsets, self.cfg.marker_group, remaining)
            elif operation in _TXN_CALLS:
                args = (remaining,)
            else:  # pragma: no cover - a bug
                raise IllegalStateError(f"unknown operation {operation}")
            started = time.monotonic()
            try:
                _bounded_call(
                    self.rt.producer, operation, args, remaining, grace_s=timeouts.grace_s
                )
                return
            except _StuckCallError as e:
                raise self.stuck(e, operation, epoch, remaining) from None
            except KafkaException as e:
                kafka_error = as_kafka_error(e)
                now = time.monotonic()
                next_step = attempt_next(
                    operation,  # type: ignore[arg-type]  # one of _TXN_CALLS or send_offsets
                    retriable=classify(e, operation).retry,
                    silent=is_silence(e),
                    ran_out=now - started >= remaining - min(0.1, remaining / 10),
                    attempt=attempt,
                    retries=self.cfg.retries,
                    time_left=now < deadline,
                )
                if next_step == "replace":
                    stuck = _StuckCallError(operation)
                    raise self.stuck(stuck, operation, epoch, remaining, answered=e) from e
                if next_step == "retry":
                    log.info(
                        "sink %s: %s: %s; retry %d/%d",
                        self.cfg.sink_id,
                        operation,
                        describe(kafka_error, self.cfg.context(epoch)) if kafka_error else e,
                        attempt,
                        self.cfg.retries,
                    )
                    continue
                raise self.cfg.error(e, operation, epoch, self.rt) from e

    def stuck(
        self,
        error: _StuckCallError,
        operation: str,
        epoch: int | None,
        timeout_s: float,
        answered: KafkaException | None = None,
    ) -> LaminarError:
        """The error for a call that did not return in time. The producer is given up (the next
        use opens a new one, whose ``init_transactions`` fences it and aborts what it left
        open); a commit's outcome is then unknown until the marker is read. The marker consumer
        is replaced too: it still asks the coordinator the stuck call waited on, which a new one
        looks up afresh (docs/kafka.md, "Budgets")."""
        producer, self.rt.producer = self.rt.producer, None
        _retire(producer)  # or destroyed once its stuck call returns (_calls.ABANDONED)
        del producer
        consumer, self.rt.consumer = self.rt.consumer, None
        if consumer is not None:  # closing may wait on that coordinator: not on this thread
            threading.Thread(target=_close_quietly, args=(consumer,), daemon=True).start()
        what = (
            f"sink {self.cfg.sink_id!r}: {operation} did not return within {timeout_s:g} s (and a "
            f"grace period) from the brokers at {self.cfg.bootstrap_servers} — a broker restarted "
            "or unreachable; librdkafka can block past its timeout there (librdkafka #5456)"
            if answered is None
            else f"sink {self.cfg.sink_id!r}: no broker at {self.cfg.bootstrap_servers} answered "
            f"{operation} within {timeout_s:g} s ({self.cfg.scrub(str(answered))}) — a hung "
            "broker, or one unreachable"
        )
        log.warning("%s; the producer is replaced", what)
        if classify(error, operation).kind == "in_doubt":
            return InDoubtError(
                f"{what}: the commit may or may not have happened; recover() reads the "
                "outcome from the epoch marker",
                sink_id=self.cfg.sink_id,
                epoch=epoch,
            )
        return AbortableError(
            f"{what}: nothing was committed; the epoch is aborted and can be written again",
            sink_id=self.cfg.sink_id,
            epoch=epoch,
        )

    def abort_producer_quietly(self) -> None:
        """Abort the producer's transaction after a failed commit; if that fails too (or the
        producer was given up after a stuck call), a new producer's init aborts it."""
        if self.rt.producer is not None:
            try:
                timeouts = self.cfg.timeouts
                attempt_s = timeouts.attempt_s(self.cfg.commit_timeout_s)
                _bounded_call(
                    self.rt.producer,
                    "abort_transaction",
                    (attempt_s,),
                    attempt_s,
                    grace_s=timeouts.grace_s,
                )
                self.rt.identity_changed()
                return
            except _StuckCallError as e:
                self.stuck(e, "abort_transaction", None, self.cfg.commit_timeout_s)
            except KafkaException as e:
                log.warning(
                    "sink %s: abort after a failed commit failed (%s); re-initialising the "
                    "producer",
                    self.cfg.sink_id,
                    self.cfg.scrub(str(e)),
                )
        with contextlib.suppress(LaminarError):
            self.reinit_producer()

    # -- a commit of unknown outcome ----------------------------------------------------------

    def resolve_in_doubt(
        self, epoch: int, txn: SinkTransaction, read_marker: Callable[[], int | None]
    ) -> None:
        """Drive the core's `KafkaInDoubtMachine` for ``epoch`` (docs/protocol.md §1): retry a
        commit that is still in flight (librdkafka allows it), else re-initialise the producer,
        and let the marker (``read_marker``: the witness's) decide; this only performs its
        commands and reports the outcome to ``txn``, the sink's own machine. Raises what the
        machine ended on (`FencedError`: fenced, or another instance committed past this
        epoch)."""
        commit_in_flight = txn.pending == "commit" and self.rt.producer is not None
        machine = KafkaInDoubtMachine(self.cfg.sink_id, epoch, commit_in_flight)

        def perform(c: _KafkaInDoubtCommand) -> Event:
            match c:
                case Command.Reached() | Command.Log() | Command.Sleep():
                    return perform_driver_side(c, log)
                case Command.RetryCommit():
                    self.retrying("commit_transaction", epoch, self.cfg.commit_timeout_s)
                case Command.AbortProducer():
                    self.abort_producer_quietly()
                case Command.ReinitProducer():
                    self.reinit_producer()
                case Command.ReadMarker():
                    return Event.marker(read_marker(), now_ms())
                case _:
                    assert_never(c)
            return Event.ack()

        try:
            drive(machine, perform)
        except FencedError as err:
            # fenced, or refused: the brokers answer but not this producer's commit (Tansu
            # drops a fenced producer's requests), or another instance committed past this epoch
            self.rt.fenced = err
            raise
        finally:
            # the sink's machine clears the pending decision once the marker decided
            txn.resolved_by_marker(machine.committed, machine.marker)

    # -- producer identity --------------------------------------------------------------------

    def producer_identity(self) -> tuple[int, int]:
        """librdkafka's current producer id and epoch (waiting briefly for the first statistics
        report after an init or abort); (-1, -1) if they do not arrive in time."""
        if self.rt.identity is not None:
            return self.rt.identity
        interval_ms = int(self.cfg.producer_config.get("statistics.interval.ms", 100))
        deadline = time.monotonic() + identity_wait_s(interval_ms)  # the core's budget
        while True:
            identity = self.rt.fresh_identity()
            if identity is not None:
                self.rt.identity = identity
                return identity
            if time.monotonic() >= deadline:
                if not self.rt.identity_warned:
                    log.warning(
                        "sink %s: librdkafka reported no producer id/epoch in time; the "
                        "prepared state records them as unknown (-1)",
                        self.cfg.sink_id,
                    )
                    self.rt.identity_warned = True
                return (-1, -1)
            self.rt.producer.poll(0.01)

    # -- clients ------------------------------------------------------------------------------

    def open_consumer(self) -> None:
        if self.rt.consumer is not None:
            return
        config = consumer_config(
            self.cfg.producer_config,
            bootstrap_servers=self.cfg.bootstrap_servers,
            group_id=self.cfg.marker_group,
            timeouts=self.cfg.timeouts,
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
            self.rt.consumer = Consumer(config)
        except KafkaException as e:
            raise self.cfg.error(e, "init_transactions", None, self.rt) from e

    def open_producer(self) -> None:
        """A new producer: topic check, ``init_transactions`` (fences every older producer with
        this transactional id, and aborts their open transactions)."""
        self.close_producer()
        config = build_producer_config(
            self.cfg.producer_config,
            bootstrap_servers=self.cfg.bootstrap_servers,
            transactional_id=self.cfg.sink_id,
            transaction_timeout_ms=self.cfg.transaction_timeout_ms,
            stats_cb=self.rt.on_stats,
            error_cb=self.rt.on_error,
            on_delivery=self.rt.on_delivery,
            timeouts=self.cfg.timeouts,
        )
        try:
            producer = TransactionalProducer(config)
        except KafkaException as e:
            raise self.cfg.error(e, "init_transactions", None, self.rt) from e
        except (TypeError, ValueError) as e:
            raise ConfigError(
                f"invalid producer_config: {self.cfg.scrub(str(e))}", sink_id=self.cfg.sink_id
            ) from e
        self.rt.producer = producer
        self.rt.client_errors.clear()
        self.rt.stats_json = None
        self.check_topic()
        self.retrying("init_transactions", None, self.rt.budget_left(self.cfg.init_timeout_s))
        self.rt.identity_changed()
        self.rt.identity_warned = False

    def reinit_producer(self) -> None:
        self.open_producer()

    def close_producer(self) -> None:
        producer, self.rt.producer = self.rt.producer, None
        if producer is None:
            return
        with contextlib.suppress(KafkaException, RuntimeError, BufferError):
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.poll(0)
        # Dropping the last reference destroys the handle; an open transaction is left to the
        # broker's timeout or the next init_transactions (which aborts it).
        del producer

    def check_topic(self) -> None:
        """The topic exists (listing all topics never auto-creates one) and the brokers answer.

        Until a broker is set up, the wait is cut into slices (each twice the last) with the
        producer's reports served between them, so a start-up that fails names the servers seen
        stalled at any time in it (`_Runtime.stalled_brokers`), not only what the last report
        caught; once one is set up, the rest of the bound is one wait (a request asked again
        would queue behind the one given up on, on a slow broker)."""
        deadline = time.monotonic() + self.rt.budget_left(self.cfg.init_timeout_s)
        wait = _METADATA_SLICE_S
        self.rt.stalls_seen = set()
        try:
            while True:
                left = deadline - time.monotonic()
                try:
                    metadata = self.rt.producer.list_topics(max(0.001, min(left, wait)))
                    break
                except KafkaException as e:
                    self.rt.producer.poll(0)  # serve error_cb (refused credentials) and stats
                    error = e.args[0] if e.args else None
                    code = error.code() if isinstance(error, KafkaError) else None
                    refused = any(seen.code() in AUTH_CODES for seen in self.rt.client_errors)
                    if code in _METADATA_WAIT_CODES and not refused and deadline > time.monotonic():
                        wait = float("inf") if self.rt.connected_brokers() else wait * 2
                        continue
                    raise self.connection_error(e) from e
        finally:
            self.rt.stalls_seen = None
        self.rt.reached = True
        topic = metadata.get(self.cfg.topic)
        if topic is None:
            raise ConfigError(
                f"topic {self.cfg.topic!r} does not exist on {self.cfg.bootstrap_servers}; "
                "create it "
                f"(e.g. kafka-topics.sh --create --topic {self.cfg.topic} --partitions N "
                "--replication-factor 3) — Laminar never creates topics",
                sink_id=self.cfg.sink_id,
            )
        if topic[1] is not None:
            raise self.cfg.error(KafkaException(topic[1]), "metadata", None, self.rt)

    def connection_error(self, e: KafkaException) -> LaminarError:
        """The error for a cluster that did not answer the start-up metadata request."""
        cfg = self.cfg
        stalled = self.rt.stalled_brokers()
        connected = self.rt.connected_brokers()
        failure = classify_silence(
            self.rt.client_errors, stalled=bool(stalled), connected=bool(connected)
        )
        if failure.cause == "unauthorized":
            seen = next(s for s in reversed(self.rt.client_errors) if s.code() in AUTH_CODES)
            return self.cfg.error(KafkaException(seen), "init_transactions", None, self.rt)
        if failure.cause == "stalled":
            return AbortableError(
                f"the Kafka cluster at bootstrap.servers={cfg.bootstrap_servers} did not "
                f"answer within init_timeout_s={cfg.init_timeout_s:g} s: "
                f"{', '.join(stalled)} accepted the connection but never answered (a hung "
                "broker, a black-holed load balancer), and no other server answered. Nothing "
                "was written; the call can be retried",
                sink_id=cfg.sink_id,
            )
        if failure.cause == "hung":
            return AbortableError(
                f"the Kafka cluster at bootstrap.servers={cfg.bootstrap_servers} did not "
                f"answer within init_timeout_s={cfg.init_timeout_s:g} s ({cfg.scrub(str(e))}):"
                f" {', '.join(connected)} set up the connection but did not answer the request "
                "(a hung or overloaded broker). Nothing was written; the call can be retried",
                sink_id=cfg.sink_id,
            )
        detail = ""
        for seen in reversed(self.rt.client_errors):
            if seen.code() in _CONNECTION_CODES and seen.code() != KafkaError._ALL_BROKERS_DOWN:
                detail = f"; last error: {describe(seen, self.cfg.context(None))}"
                break
        return FatalError(
            f"could not reach the Kafka cluster at bootstrap.servers={cfg.bootstrap_servers} "
            f"within init_timeout_s={cfg.init_timeout_s:g} s ({cfg.scrub(str(e))}{detail}); "
            "check the address, that the brokers run, and the security settings "
            "(security.protocol, sasl.*, ssl.*)",
            sink_id=cfg.sink_id,
        )


def _close_quietly(consumer: Any) -> None:
    """Close a consumer given up on (on a daemon thread: it may wait on a hung coordinator)."""
    with contextlib.suppress(KafkaException, RuntimeError):
        consumer.close()
