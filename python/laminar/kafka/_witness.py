"""Which evidence proves `KafkaSink`'s last committed epoch (`Witness`), by docs/protocol.md §1's
rule — the marker; without it the identity, the producer epoch and the bounded witness — and the
recording of the sink's identity and of the topics it writes."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from laminar._core import (
    LastCommitted,
    failover_pause_s,
    last_committed_after_marker,
    last_committed_without_marker,
    reuse_without_marker,
)
from laminar._faults import fail_point
from laminar.errors import (
    AbortableError,
    AuthorizationError,
    FatalError,
    LaminarError,
)
from laminar.kafka import _shape as shape
from laminar.kafka._base import WITNESS_MAX_RECORDS_ENV, PartSettings
from laminar.kafka._clients import Clients
from laminar.kafka.log import (
    ClientSecurity,
    KafkaLogClient,
    KafkaLogError,
    ReadStats,
    UnsupportedSecurityError,
)

log = logging.getLogger("laminar.kafka")

_WITNESS_FIRST_WINDOW = 1_024
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


class Witness:
    """Which evidence proves the sink's last committed epoch (docs/protocol.md §1): the marker;
    without it the identity, the producer epoch and the bounded witness. Reads through
    ``clients`` (the marker consumer, the producer's identity) and `laminar.kafka.log`'s wire
    client, under the sink's settings (``cfg``); `found` says how the last read found it."""

    def __init__(
        self,
        cfg: PartSettings,
        clients: Clients,
        *,
        recorded_history: str = "",
        max_records: Callable[[], int] = lambda: 1_000_000,
    ) -> None:
        self.cfg = cfg
        self.clients = clients
        #: Why a record outside Kafka says the sink wrote before (`KafkaSink.recorded_history`).
        self.recorded_history = recorded_history
        #: The witness's read limit per partition (`KafkaSink.witness_max_records`), asked only
        #: when the witness runs (a bad environment variable is an error then, not before).
        self.max_records = max_records
        #: How the last committed epoch was found by the last read (None: not found here).
        self.found: StartupRead | None = None

    def read_last_committed(self, known: int | None, *, stable: bool = False) -> int | None:
        """The last committed epoch by docs/protocol.md §1's rule: the marker; without it, the
        identity, the producer epoch and the watermarks say whether the bounded witness runs.
        An epoch this instance committed itself (``known``: its tracker's) counts even before its
        marker reads back."""
        writer = self.clients.rt.producer is not None
        proven = last_committed_after_marker(self.read_marker(stable=stable), known)
        if isinstance(proven, LastCommitted.Marker):
            read = self.ensure_identity() if writer else ReadStats()
            self.found = StartupRead("marker", proven.epoch, read)
            return proven.epoch
        cached = self.clients.rt.without_marker
        if cached is not None and reuse_without_marker(cached[1], writer):
            return cached[0]
        answer = self.without_marker(writer)
        self.clients.rt.without_marker = (answer, writer)
        return answer

    def read_marker(self, *, stable: bool = False) -> int | None:
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
                client = self.log_client()
            except UnsupportedSecurityError:
                client = None
            if client is not None:
                try:
                    with client:
                        found = client.committed_offset(self.cfg.marker_group, self.cfg.topic, 0)
                except KafkaLogError as e:
                    raise self.wire_failure("read the marker", e) from e
                return None if found is None else found[0]
        if self.clients.rt.consumer is None:
            self.clients.open_consumer()
        committed = self.committed_through_consumer()
        return int(committed.offset) if committed.offset >= 0 else None

    def committed_through_consumer(self) -> TopicPartition:
        """The marker group's offset on (topic, 0) through the marker consumer. A failover it
        meets (the group coordinator moving or not yet elected, as on a new cluster whose
        offsets topic is being created: NOT_COORDINATOR) is asked again after the core's pause
        while the budget lasts — the start-up's, when in one (`protocol::retry`)."""
        rt = self.clients.rt
        deadline = time.monotonic() + rt.budget_left(self.cfg.init_timeout_s)
        attempt = 0
        while True:
            attempt += 1
            try:
                if fail_point("kafka.committed"):
                    raise KafkaException(
                        KafkaError(
                            KafkaError._TIMED_OUT, "injected (LAMINAR_FAIL_AT)", retriable=True
                        )
                    )
                (committed,) = rt.consumer.committed(
                    [TopicPartition(self.cfg.topic, 0)],
                    timeout=max(deadline - time.monotonic(), 0.001),
                )
                if committed.error is not None:  # the partition's own error: the same rule
                    raise KafkaException(committed.error)
                return committed  # type: ignore[no-any-return]
            except KafkaException as e:
                rt.consumer.poll(0)
                error = self.cfg.error(e, "init_transactions", None, rt, hint="reading the marker")
                pause = failover_pause_s(attempt, deadline - time.monotonic())
                # the one classification decides what is a failover (an AbortableError that is
                # retriable); the core's pause decides whether time is left for another try
                if error.failure_kind != "abortable" or not error.retriable or pause is None:
                    raise error from e
                log.info(
                    "sink %s: reading the marker met %s; asking again in %.2f s",
                    self.cfg.sink_id,
                    self.cfg.scrub(str(e)),
                    pause,
                )
                time.sleep(pause)

    def log_client(self) -> KafkaLogClient:
        security = ClientSecurity.from_config(self.cfg.producer_config)
        timeouts = self.cfg.timeouts  # the core's rule: docs/kafka.md, "Budgets"
        return KafkaLogClient(
            self.cfg.bootstrap_servers,
            timeout=min(timeouts.request_s, self.cfg.init_timeout_s),
            retry_for_s=self.cfg.init_timeout_s,
            setup_timeout=min(timeouts.setup_s, self.cfg.init_timeout_s),
            until=self.clients.rt.startup_deadline,
            client_id=f"laminar-sink-{self.cfg.sink_id}"[:200],
            security=security,
        )

    def wire_failure(self, what: str, error: KafkaLogError) -> LaminarError:
        """A failed read or write of the marker, the identity or the witness: retriable when
        no broker answered in time or a role was moving (a failover: the wire client retried
        for ``init_timeout_s`` already), an `AuthorizationError` naming the ACL when the cluster
        refused the credentials or the operation, fatal when it refused otherwise or sent what
        the client cannot read."""
        text = f"could not {what} of topic {self.cfg.topic!r}: {self.cfg.scrub(str(error))}"
        if isinstance(error, AuthorizationError):
            # refused credentials or a missing ACL (the error names it): fix the grant, restart
            return AuthorizationError(text, sink_id=self.cfg.sink_id)
        if error.failure_kind == "abortable":  # the wire client's classification (a failover)
            return AbortableError(
                f"{text}. The cluster did not answer within init_timeout_s="
                f"{self.cfg.init_timeout_s:g} s (a broker down or a coordinator moving); "
                "nothing was written, the call can be retried",
                sink_id=self.cfg.sink_id,
            )
        return FatalError(text, sink_id=self.cfg.sink_id)

    def without_marker(self, writer: bool) -> int | None:
        """No marker: the identity (and, for the writer, the producer epoch InitProducerId
        returned) says whether the sink has history; only then the witness reads the topic."""
        where = f"group {self.cfg.marker_group} has no committed offset on {self.cfg.topic}[0]"
        try:
            client = self.log_client()
        except UnsupportedSecurityError as e:
            self.found = StartupRead("unreadable", None)
            log.warning(
                "sink %s: %s and laminar's wire client cannot connect (%s): neither the "
                "identity nor the witness can be read; the sink is taken as new "
                "(docs/protocol.md §8)",
                self.cfg.sink_id,
                where,
                e,
            )
            return None
        try:
            with client:
                identity = client.committed_offset(self.cfg.identity_group, self.cfg.topic, 0)
                recorded = self.recorded_history
                # the producer epoch is asked only when the rule may need it (it can wait for
                # librdkafka's first statistics report)
                asked = identity is None and not recorded and writer
                proof = last_committed_without_marker(
                    identity is not None,
                    bool(recorded),
                    self.clients.producer_identity()[1] if asked else None,
                )
                if isinstance(proof, LastCommitted.New):
                    log.info(
                        "sink %s: %s, no identity and %s: a new sink; the topic is not read",
                        self.cfg.sink_id,
                        where,
                        "a new transactional id (producer epoch 0)"
                        if writer
                        else "no producer opened to ask the transaction coordinator",
                    )
                    answer, source = None, "new"
                else:
                    topics = shape.recorded_topics(identity[1] if identity else None)
                    why = f"{where} but {_history(proof, self.cfg.identity_group, recorded)}"
                    answer, source = self.witness(client, why, topics), "witness"
                if writer and identity is None:
                    self.record_identity(client)
                self.found = StartupRead(source, answer, client.stats)
        except KafkaLogError as e:
            raise self.wire_failure("read the identity and witness", e) from e
        return answer

    def witness(
        self, client: KafkaLogClient, why: str, topics: list[str] | None = None
    ) -> int | None:
        """The bounded witness (docs/protocol.md §1, step 5) over the home topic and every
        other topic the identity lists; `FatalError` if not conclusive."""
        limit = self.max_records()
        started = time.monotonic()
        found = client.witness(
            self.cfg.topic, self.cfg.sink_id, max_records=limit, first_window=_WITNESS_FIRST_WINDOW
        )
        for topic in topics or ():
            if topic == self.cfg.topic:
                continue
            more = client.witness(
                topic, self.cfg.sink_id, max_records=limit, first_window=_WITNESS_FIRST_WINDOW
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
                f"sink {self.cfg.sink_id}: {why}; {done} and found "
                + (f"epoch {found.epoch}" if found.epoch is not None else "no record of this sink")
                + f", but partitions {list(found.undecided)} hold more than "
                f"witness_max_records={limit} records after the last one it read: the last "
                "committed epoch cannot be proven. Raise the limit (KafkaSink.witness_max_records "
                f"or {WITNESS_MAX_RECORDS_ENV}; -1 reads everything) and start again",
                sink_id=self.cfg.sink_id,
            )
        log.warning(
            "sink %s: %s; %s and concludes %s",
            self.cfg.sink_id,
            why,
            done,
            f"epoch {found.epoch} is the last committed"
            if found.epoch is not None
            else "no epoch of this sink is in the topic",
        )
        return found.epoch

    def ensure_identity(self) -> ReadStats:
        """Records the identity if missing (checked once per process and sink)."""
        key = (self.cfg.bootstrap_servers, self.cfg.topic, self.cfg.sink_id)
        if key in _IDENTIFIED:
            return ReadStats()
        try:
            client = self.log_client()
        except UnsupportedSecurityError:
            return ReadStats()
        try:
            with client:
                if client.committed_offset(self.cfg.identity_group, self.cfg.topic, 0) is None:
                    self.record_identity(client)
        except KafkaLogError as e:
            raise self.wire_failure("record the sink's identity", e) from e
        _IDENTIFIED.add(key)
        return client.stats

    def record_topics(self, topics: list[str]) -> None:
        """Adds ``topics`` to the identity's list of the topics this sink writes besides its
        home topic, before any record goes there: start-up recovery then witnesses them too
        (docs/protocol.md §1, "Several topics")."""
        try:
            client = self.log_client()
        except UnsupportedSecurityError:
            return  # no identity either: docs/protocol.md §8
        try:
            with client:
                found = client.committed_offset(self.cfg.identity_group, self.cfg.topic, 0)
                metadata = found[1] if found else None
                listed = shape.recorded_topics(metadata)
                if not set(topics) <= set(listed):
                    now = time.time_ns() // 1_000_000
                    self.record_identity(
                        client,
                        shape.identity_metadata(
                            shape.since_of(metadata, now),
                            [*listed, *topics],
                            sink_id=self.cfg.sink_id,
                            limit=shape.metadata_limit(
                                self.cfg.bootstrap_servers,
                                self.cfg.producer_config,
                                self.cfg.init_timeout_s,
                            ),
                        ),
                    )
        except KafkaLogError as e:
            raise self.wire_failure("record the sink's topics in its identity", e) from e
        _IDENTIFIED.update((self.cfg.bootstrap_servers, t, self.cfg.sink_id) for t in topics)

    def record_identity(self, client: KafkaLogClient, metadata: str | None = None) -> None:
        if metadata is None:
            metadata = json.dumps({"laminar": 1, "since_ms": time.time_ns() // 1_000_000})
        kept = client.commit_offset(
            self.cfg.identity_group, self.cfg.topic, 0, 0, metadata, _IDENTITY_RETENTION_MS
        )
        if not kept:
            log.warning(
                "sink %s: the broker offers no OffsetCommit version with retention_time_ms "
                "(v2-v4): the identity (group %s) expires after offsets.retention.minutes like "
                "the marker (docs/protocol.md §1)",
                self.cfg.sink_id,
                self.cfg.identity_group,
            )
        _IDENTIFIED.add((self.cfg.bootstrap_servers, self.cfg.topic, self.cfg.sink_id))


def _history(proof: LastCommitted.Witness, identity_group: str, recorded: str) -> str:
    """The log's words for what proved that a sink without a marker wrote before."""
    if proof.history == "identity":
        return f"its identity ({identity_group}) is recorded"
    if proof.history == "decision_row":
        return recorded
    return (
        "no identity, but the transaction coordinator knew the transactional id "
        f"(producer epoch {proof.producer_epoch})"
    )
