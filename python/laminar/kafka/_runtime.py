"""The live part of a `laminar.kafka.sink.KafkaSink` in the process that writes: its clients,
what librdkafka's callbacks reported, the producer identity and the open epoch (never pickled)."""

from __future__ import annotations

import json
import time
from collections import deque
from typing import Any, Literal

from confluent_kafka import KafkaError

from laminar.errors import LaminarError

#: Records librdkafka dropped before the brokers acknowledged them: by an abort or a close of
#: ours, or because the transaction failed (an AddPartitionsToTxn refused, say) — which is why a
#: prepare that finds any fails (`Producing.finish_writes`), never passes as if they were written.
_PURGED_CODES = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
#: librdkafka's broker states between an accepted TCP connection and its first answers.
_SETUP_WAIT_STATES = frozenset(
    {"SSL_HANDSHAKE", "APIVERSION_QUERY", "AUTH_LEGACY", "AUTH_HANDSHAKE", "AUTH_REQ"}
)
#: How long a broker must have waited in one of them (librdkafka's ``stateage``) for a start-up
#: to remember it as stalled: a server that answers, or one that closes the connection (a port
#: that is no Kafka broker), leaves the state within milliseconds.
_STALL_SEEN_AGE_US = 100_000


class _Runtime:
    """The live part of a sink in the process that writes (never pickled)."""

    def __init__(self) -> None:
        self.producer: Any = None
        self.consumer: Any = None
        self.fenced: LaminarError | None = None  # failure_kind "fenced"
        #: Whether the cluster answered this process (metadata): a time-out after that is a
        #: failover to wait out, not an address to fix (`map_kafka_error`'s ``reached``).
        self.reached = False
        # failures heard through callbacks
        self.delivery_errors: list[tuple[KafkaError, bytes | None, int, str | None]] = []
        self.delivery_failures = 0
        self.client_errors: deque[KafkaError] = deque(maxlen=16)
        # producer identity from librdkafka's statistics
        self.stats_json: str | None = None
        self.identity_since_us = 0
        self.identity: tuple[int, int] | None = None
        self.identity_warned = False
        # the open epoch
        self.headers: list[tuple[str, bytes]] = []
        #: Records of the open epoch librdkafka purged instead of delivering.
        self.purged = 0
        #: Topics other than the home topic that the open epoch wrote (its markers go there too).
        self.epoch_topics: set[str] = set()
        #: Partition counts of the topics rows named (Spark's shape), from metadata.
        self.partition_counts: dict[str, int] = {}
        self.records = 0
        self.last_epoch: int | None = None
        self.attempt = 0
        # the last committed epoch found without a marker: (answer, whether a writer found it)
        self.without_marker: tuple[int | None, bool] | None = None
        #: When the start-up under way must end (``time.monotonic()``), None outside one: its
        #: calls share one ``init_timeout_s`` (docs/kafka.md "Budgets").
        self.startup_deadline: float | None = None
        #: The brokers the statistics showed waiting on their set-up's answer while a new
        #: producer waits for its first metadata (`Clients.check_topic`); None outside that wait.
        self.stalls_seen: set[str] | None = None

    def begin_startup(self, budget_s: float) -> None:
        """A start-up bounded by ``budget_s`` begins."""
        self.startup_deadline = time.monotonic() + budget_s

    def budget_left(self, budget_s: float) -> float:
        """What a call may take of ``budget_s``: all of it outside a start-up, within one what
        is left of the start-up's (at least a millisecond: the call then fails at once)."""
        if self.startup_deadline is None:
            return budget_s
        return max(min(budget_s, self.startup_deadline - time.monotonic()), 0.001)

    # -- callbacks (called by librdkafka from poll/flush, in this thread) ---------------------

    def on_stats(self, stats_json: str) -> None:
        self.stats_json = stats_json
        # parsed only in the first metadata wait, and only when a broker is in set-up (the
        # text says so)
        if self.stalls_seen is not None and any(s in stats_json for s in _SETUP_WAIT_STATES):
            self.stalls_seen.update(self._brokers_in(_SETUP_WAIT_STATES, _STALL_SEEN_AGE_US))

    def on_error(self, error: KafkaError) -> None:
        self.client_errors.append(error)

    def on_delivery(self, error: KafkaError | None, message: Any) -> None:
        if error is None:
            return
        if error.code() in _PURGED_CODES:
            self.purged += 1
            return
        self.delivery_failures += 1
        if len(self.delivery_errors) < 8:
            value = message.value() if message is not None else None
            key = message.key() if message is not None else None
            topic = message.topic() if message is not None else None  # a routed row's own
            size = len(value) if value is not None else 0
            self.delivery_errors.append((error, key, size, topic))

    # -- brokers ------------------------------------------------------------------------------

    def stalled_brokers(self) -> list[str]:
        """The brokers (``host:port``) that librdkafka's statistics show connected but still
        waiting for their set-up's answer (ApiVersions, TLS, SASL) — in the last report, or for
        100 ms or more in any report of the metadata wait under way, unless set up since: servers
        that accept connections and do not answer — a hung broker, a black-holed load balancer
        — rather than an address that refuses or does not resolve (docs/kafka.md, "Failover").
        The wait's reports count too because a stalled server's connection is dropped at each
        set-up deadline: a bound ending then found it reconnecting, and read an unreachable
        address where a retry would do."""
        now = self._brokers_in(_SETUP_WAIT_STATES)
        up = set(self.connected_brokers())
        return sorted(set(now) | ((self.stalls_seen or set()) - up))

    def connected_brokers(self) -> list[str]:
        """The brokers librdkafka's last statistics show set up (``UP``): the cluster was
        reached, so a request that timed out met a hung or overloaded broker, not a wrong
        address."""
        return self._brokers_in(frozenset({"UP"}))

    def _brokers_in(self, states: frozenset[str], min_age_us: int = 0) -> list[str]:
        """The brokers the last statistics show in ``states``, for ``min_age_us`` or more."""
        if self.stats_json is None:
            return []
        try:
            brokers = json.loads(self.stats_json).get("brokers") or {}
            return sorted(
                str(b.get("nodename") or name)
                for name, b in brokers.items()
                if b.get("state") in states and int(b.get("stateage") or 0) >= min_age_us
            )
        except (ValueError, TypeError, AttributeError):
            return []

    # -- identity -----------------------------------------------------------------------------

    @staticmethod
    def client_of(rt: _Runtime | None) -> Literal["live", "given_up", "fenced"]:
        """The producer as the sink's machine sees it for an abort (`SinkTransaction.abort_via`):
        fenced, given up (none open: a stuck call dropped it, or none was opened yet) or live."""
        if rt is not None and rt.fenced is not None:
            return "fenced"
        if rt is None or rt.producer is None:
            return "given_up"
        return "live"

    def identity_changed(self) -> None:
        """The producer id/epoch may have changed (new producer, or an abort that bumps it)."""
        self.identity = None
        self.identity_since_us = time.monotonic_ns() // 1000

    def fresh_identity(self) -> tuple[int, int] | None:
        """The producer id/epoch from a statistics report emitted since the last change."""
        if self.stats_json is None:
            return None
        try:
            stats = json.loads(self.stats_json)
            eos = stats.get("eos") or {}
            emitted_us = int(stats.get("ts", 0))
        except (ValueError, TypeError, AttributeError):
            return None
        if emitted_us < self.identity_since_us or eos.get("idemp_state") != "Assigned":
            return None
        try:
            return int(eos["producer_id"]), int(eos["producer_epoch"])
        except (KeyError, TypeError, ValueError):
            return None
