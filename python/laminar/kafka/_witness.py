"""`KafkaSink`'s last committed epoch by docs/protocol.md §1's rule — the marker; without it
the identity, the producer epoch and the bounded witness — and the resolution of an in-doubt
commit from the marker (the core's `KafkaInDoubtMachine`)."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from laminar._core import (
    Command,
    Event,
    KafkaInDoubtMachine,
    identity_group,
)
from laminar._faults import fail_point
from laminar.errors import (
    AbortableError,
    ConfigError,
    FatalError,
    FencedError,
    LaminarError,
)
from laminar.kafka import _shape as shape
from laminar.kafka._clients import _Clients
from laminar.kafka._runtime import _Runtime
from laminar.kafka._stalls import request_timeout_s, setup_timeout_s
from laminar.kafka.log import (
    BrokerUnavailableError,
    ClientSecurity,
    KafkaLogClient,
    KafkaLogError,
    ReadStats,
    UnsupportedSecurityError,
)
from laminar.protocol.driver import drive, now_ms, perform_driver_side

log = logging.getLogger("laminar.kafka")

_WITNESS_FIRST_WINDOW = 1_024
#: How far back (records per partition) the witness looks for this sink's records, unless
#: `KafkaSink.witness_max_records` or the environment variable below says otherwise.
_WITNESS_MAX_RECORDS = 1_000_000
WITNESS_MAX_RECORDS_ENV = "LAMINAR_KAFKA_WITNESS_MAX_RECORDS"
#: The identity's explicit retention (OffsetCommit v2-v4's retention_time_ms): 100 years.
_IDENTITY_RETENTION_MS = 100 * 365 * 24 * 3600 * 1000
#: (bootstrap servers, topic, sink id) whose identity this process saw or recorded.
_IDENTIFIED: set[tuple[str, str, str]] = set()


@dataclass(frozen=True)
class StartupRead:
    """How the last committed epoch was found at the sink's last read of it (docs/protocol.md
    §1): ``source`` is ``"marker"``, ``"new"`` (no marker, no history: nothing read),
    ``"witness"`` (the bounded search ran) or ``"unreadable"`` (no marker, and the wire client
    cannot connect); ``read`` counts what `laminar.kafka.log` read for it."""

    source: str
    epoch: int | None
    read: ReadStats = field(default_factory=ReadStats)


class _Witness(_Clients):
    """Reading the last committed epoch, recording the identity, resolving an in-doubt commit."""

    # -- the last committed epoch: marker, identity, witness (docs/protocol.md §1) -------------

    @property
    def identity_group(self) -> str:
        """The consumer group whose committed offset on (topic, 0) is the sink's identity: "this
        sink has started here and may have committed epochs" (docs/protocol.md §1)."""
        return identity_group(self.sink_id)

    @property
    def recorded_history(self) -> str:
        """Why a record outside Kafka says this sink has written before (a decision row in
        ``laminar.txn_state``, set by recovery), or ``""``. With it, a sink whose marker *and*
        identity groups are gone (deleted by hand, expired) is not taken as new: the witness
        reads the topic (docs/protocol.md §1)."""
        return str(getattr(self, "_recorded_history", ""))

    @recorded_history.setter
    def recorded_history(self, why: str) -> None:
        self._recorded_history = why
        if self._rt is not None:
            self._rt.without_marker = None  # decide again with what is now known

    @property
    def witness_max_records(self) -> int:
        """How many records per partition the witness may read when the marker is lost (-1: no
        limit); default `LAMINAR_KAFKA_WITNESS_MAX_RECORDS`, else 1,000,000."""
        chosen: int | None = getattr(self, "_witness_max_records", None)
        if chosen is not None:
            return chosen
        text = os.environ.get(WITNESS_MAX_RECORDS_ENV, "").strip()
        try:
            return int(text) if text else _WITNESS_MAX_RECORDS
        except ValueError:
            raise ConfigError(
                f"{WITNESS_MAX_RECORDS_ENV}={text!r} is not a whole number of records",
                sink_id=self.sink_id,
            ) from None

    @witness_max_records.setter
    def witness_max_records(self, value: int) -> None:
        if not isinstance(value, int) or value < -1:
            raise ConfigError(
                f"witness_max_records must be a number of records >= 0, or -1 (no limit), "
                f"not {value!r}",
                sink_id=self.sink_id,
            )
        self._witness_max_records: int | None = value

    @property
    def startup_read(self) -> StartupRead | None:
        """How the last committed epoch was last found (``None`` before the first read)."""
        return getattr(self, "_startup_read", None)

    def _read_last_committed(self, rt: _Runtime, *, stable: bool = False) -> int | None:
        """The last committed epoch by docs/protocol.md §1's rule: the marker; without it, the
        identity, the producer epoch and the watermarks say whether the bounded witness runs.
        An epoch this instance committed itself counts even before its marker reads back."""
        writer = rt.producer is not None
        marker = self._read_marker(rt, stable=stable)
        known = self.tracker.last_committed_epoch
        if known is not None and (marker is None or marker < known):
            marker = known
        if marker is not None:
            read = self._ensure_identity() if writer else ReadStats()
            self._startup_read = StartupRead("marker", marker, read)
            return marker
        cached = rt.without_marker
        if cached is not None and (cached[1] or not writer):
            return cached[0]
        answer = self._without_marker(rt, writer)
        rt.without_marker = (answer, writer)
        return answer

    def _read_marker(self, rt: _Runtime, *, stable: bool = False) -> int | None:
        """The marker group's committed offset on (topic, 0): the last committed epoch.

        Never a *stable* read (KIP-447): that would wait out the timeout of a transaction that
        another writer — one that fenced this instance, or one that died and that recovery is
        about to complete with EndTxn — holds open. Both paths answer the last committed value
        (a pending one is never returned): ``stable`` (right after this instance's
        InitProducerId, which completed whatever its transactional id had in flight, so nothing
        is pending) reads through the marker consumer (``isolation.level=read_uncommitted``,
        see `_open_consumer`); otherwise the wire client's OffsetFetch without
        ``require_stable``, falling back to the consumer for security settings the wire client
        does not speak."""
        if not stable:
            try:
                client = self._log_client()
            except UnsupportedSecurityError:
                client = None
            if client is not None:
                try:
                    with client:
                        found = client.committed_offset(self.marker_group, self._topic, 0)
                except KafkaLogError as e:
                    raise self._wire_failure("read the marker", e) from e
                return None if found is None else found[0]
        if rt.consumer is None:
            self._open_consumer(rt)
        try:
            if fail_point("kafka.committed"):
                raise KafkaException(
                    KafkaError(KafkaError._TIMED_OUT, "injected (LAMINAR_FAIL_AT)", retriable=True)
                )
            (committed,) = rt.consumer.committed(
                [TopicPartition(self._topic, 0)], timeout=self._init_timeout_s
            )
        except KafkaException as e:
            rt.consumer.poll(0)
            raise self._error(e, "init_transactions", None, rt, hint="reading the marker") from e
        if committed.error is not None:
            raise self._error(
                KafkaException(committed.error), "init_transactions", None, rt, hint="marker"
            )
        return int(committed.offset) if committed.offset >= 0 else None

    def _log_client(self) -> KafkaLogClient:
        security = ClientSecurity.from_config(self._producer_config)
        return KafkaLogClient(
            self._bootstrap_servers,
            timeout=request_timeout_s(self._init_timeout_s),
            retry_for_s=self._init_timeout_s,
            setup_timeout=setup_timeout_s(self._init_timeout_s, self._producer_config),
            client_id=f"laminar-sink-{self.sink_id}"[:200],
            security=security,
        )

    def _wire_failure(self, what: str, error: KafkaLogError) -> LaminarError:
        """A failed read or write of the marker, the identity or the witness: retriable when
        no broker answered in time or a role was moving (a failover: the wire client retried
        for ``init_timeout_s`` already), fatal when the cluster refused or sent what the client
        cannot read."""
        text = f"could not {what} of topic {self._topic!r}: {self._scrub(str(error))}"
        if isinstance(error, BrokerUnavailableError):
            return AbortableError(
                f"{text}. The cluster did not answer within init_timeout_s="
                f"{self._init_timeout_s:g} s (a broker down or a coordinator moving); "
                "nothing was written, the call can be retried",
                sink_id=self.sink_id,
            )
        return FatalError(text, sink_id=self.sink_id)

    def _without_marker(self, rt: _Runtime, writer: bool) -> int | None:
        """No marker: the identity (and, for the writer, the producer epoch InitProducerId
        returned) says whether the sink has history; only then the witness reads the topic."""
        where = f"group {self.marker_group} has no committed offset on {self._topic}[0]"
        try:
            client = self._log_client()
        except UnsupportedSecurityError as e:
            self._startup_read = StartupRead("unreadable", None)
            log.warning(
                "sink %s: %s and laminar's wire client cannot connect (%s): neither the "
                "identity nor the witness can be read; the sink is taken as new "
                "(docs/protocol.md §8)",
                self.sink_id,
                where,
                e,
            )
            return None
        try:
            with client:
                identity = client.committed_offset(self.identity_group, self._topic, 0)
                if identity is not None:
                    history = f"its identity ({self.identity_group}) is recorded"
                elif self.recorded_history:
                    history = self.recorded_history
                else:
                    epoch = self._producer_identity(rt)[1] if writer else -1
                    history = (
                        f"no identity, but the transaction coordinator knew the transactional "
                        f"id (producer epoch {epoch})"
                        if epoch > 0
                        else ""
                    )
                if not history:
                    log.info(
                        "sink %s: %s, no identity and %s: a new sink; the topic is not read",
                        self.sink_id,
                        where,
                        "a new transactional id (producer epoch 0)"
                        if writer
                        else "no producer opened to ask the transaction coordinator",
                    )
                    answer, source = None, "new"
                else:
                    topics = shape.recorded_topics(identity[1] if identity else None)
                    why = f"{where} but {history}"
                    answer, source = self._witness(client, why, topics), "witness"
                if writer and identity is None:
                    self._record_identity(client)
                self._startup_read = StartupRead(source, answer, client.stats)
        except KafkaLogError as e:
            raise self._wire_failure("read the identity and witness", e) from e
        return answer

    def _witness(
        self, client: KafkaLogClient, why: str, topics: list[str] | None = None
    ) -> int | None:
        """The bounded witness (docs/protocol.md §1, step 5) over the home topic and every
        other topic the identity lists; `FatalError` if not conclusive."""
        limit = self.witness_max_records
        started = time.monotonic()
        found = client.witness(
            self._topic, self.sink_id, max_records=limit, first_window=_WITNESS_FIRST_WINDOW
        )
        for topic in topics or ():
            if topic == self._topic:
                continue
            more = client.witness(
                topic, self.sink_id, max_records=limit, first_window=_WITNESS_FIRST_WINDOW
            )
            found = shape.merge_witness(found, more)
        read = found.read
        done = (
            f"the witness read {read.records} record(s) ({read.bytes} bytes, {read.fetches} "
            f"fetches) of {found.nonempty} non-empty partition(s) out of {found.partitions} in "
            f"{time.monotonic() - started:.2f} s"
        )
        if not found.conclusive:
            raise FatalError(
                f"sink {self.sink_id}: {why}; {done} and found "
                + (f"epoch {found.epoch}" if found.epoch is not None else "no record of this sink")
                + f", but partitions {list(found.undecided)} hold more than "
                f"witness_max_records={limit} records after the last one it read: the last "
                "committed epoch cannot be proven. Raise the limit (KafkaSink.witness_max_records "
                f"or {WITNESS_MAX_RECORDS_ENV}; -1 reads everything) and start again",
                sink_id=self.sink_id,
            )
        log.warning(
            "sink %s: %s; %s and concludes %s",
            self.sink_id,
            why,
            done,
            f"epoch {found.epoch} is the last committed"
            if found.epoch is not None
            else "no epoch of this sink is in the topic",
        )
        return found.epoch

    def _ensure_identity(self) -> ReadStats:
        """Records the identity if missing (checked once per process and sink)."""
        key = (self._bootstrap_servers, self._topic, self.sink_id)
        if key in _IDENTIFIED:
            return ReadStats()
        try:
            client = self._log_client()
        except UnsupportedSecurityError:
            return ReadStats()
        try:
            with client:
                if client.committed_offset(self.identity_group, self._topic, 0) is None:
                    self._record_identity(client)
        except KafkaLogError as e:
            raise self._wire_failure("record the sink's identity", e) from e
        _IDENTIFIED.add(key)
        return client.stats

    def _record_topics(self, topics: list[str]) -> None:
        """Adds ``topics`` to the identity's list of the topics this sink writes besides its
        home topic, before any record goes there: start-up recovery then witnesses them too
        (docs/protocol.md §1, "Several topics")."""
        try:
            client = self._log_client()
        except UnsupportedSecurityError:
            return  # no identity either: docs/protocol.md §8
        try:
            with client:
                found = client.committed_offset(self.identity_group, self._topic, 0)
                metadata = found[1] if found else None
                listed = shape.recorded_topics(metadata)
                if not set(topics) <= set(listed):
                    now = time.time_ns() // 1_000_000
                    self._record_identity(
                        client,
                        shape.identity_metadata(
                            shape.since_of(metadata, now),
                            [*listed, *topics],
                            sink_id=self.sink_id,
                            limit=shape.metadata_limit(
                                self._bootstrap_servers, self._producer_config, self._init_timeout_s
                            ),
                        ),
                    )
        except KafkaLogError as e:
            raise self._wire_failure("record the sink's topics in its identity", e) from e
        _IDENTIFIED.update((self._bootstrap_servers, t, self.sink_id) for t in topics)

    def _record_identity(self, client: KafkaLogClient, metadata: str | None = None) -> None:
        if metadata is None:
            metadata = json.dumps({"laminar": 1, "since_ms": time.time_ns() // 1_000_000})
        kept = client.commit_offset(
            self.identity_group, self._topic, 0, 0, metadata, _IDENTITY_RETENTION_MS
        )
        if not kept:
            log.warning(
                "sink %s: the broker offers no OffsetCommit version with retention_time_ms "
                "(v2-v4): the identity (group %s) expires after offsets.retention.minutes like "
                "the marker (docs/protocol.md §1)",
                self.sink_id,
                self.identity_group,
            )
        _IDENTIFIED.add((self._bootstrap_servers, self._topic, self.sink_id))

    # -- in-doubt resolution ------------------------------------------------------------------

    def _resolve_failed(self, rt: _Runtime, epoch: int | None) -> int | None:
        """Drive the core's `KafkaInDoubtMachine` (docs/protocol.md §1): retry a commit that is
        still in flight (librdkafka allows it), else re-initialise the producer, and let the
        marker decide; this method only performs its commands and records the outcome."""
        assert epoch is not None
        commit_in_flight = rt.failed_operation == "commit" and rt.producer is not None
        machine = KafkaInDoubtMachine(self.sink_id, epoch, commit_in_flight)

        def perform(c: Command) -> Event:
            if (event := perform_driver_side(c, log)) is not None:
                return event
            if c.kind == "retry_commit":
                self._retrying(rt, "commit_transaction", epoch, self._commit_timeout_s)
            elif c.kind == "abort_producer":
                self._abort_producer_quietly(rt)
            elif c.kind == "reinit_producer":
                self._reinit_producer(rt)
            elif c.kind == "read_marker":
                return Event.marker(self._read_marker(rt), now_ms())
            else:
                raise FatalError(f"in-doubt resolution: unexpected command {c.kind!r}")
            return Event.ack()

        try:
            drive(machine, perform)
        except FencedError as err:
            # fenced, or refused: the brokers answer but not this producer's commit (Tansu drops
            # a fenced producer's requests), or another instance committed past this epoch
            rt.fenced = err
            raise
        finally:
            committed = machine.committed
            self._machine.resolved_by_marker(committed, machine.marker)
            if machine.end == "ok" or (machine.end == "refused" and committed is not None):
                rt.failed_operation = None
        return self.tracker.last_committed_epoch

    def _settle_after_reinit(self, last: int | None) -> None:
        """After a new producer's init: the machine aborts whatever this instance had open and
        decides an in-doubt commit by ``last`` (`SinkTransaction.reopened`)."""
        self._machine.reopened(last)
        if self._rt is not None:
            self._rt.failed_operation = None
