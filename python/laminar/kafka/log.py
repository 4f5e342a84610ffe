"""Read what a Kafka topic really committed, without trusting the broker's ``read_committed``.

A small Kafka client whose wire protocol lives in the Rust core (``laminar._core``, module
``kafka``, on the ``kafka-protocol`` crate): the core encodes every request, decodes every
answer and every fetched record batch (message format v2, codecs none, gzip, snappy, lz4 and
zstd, mixed freely), and replays the **control batches** (transaction commit and abort markers)
to keep only the records of committed transactions, plus non-transactional records; Python
opens the sockets (`laminar.kafka.conn`: plaintext, TLS and mTLS, SASL PLAIN, SCRAM and
OAUTHBEARER) and moves the bytes. Decoding runs with the GIL released. Every record comes back
with its partition, offset, headers and producer id/epoch.

Why: a broker's ``read_committed`` isolation is the thing under test. Tansu 0.6.0, for one, writes
the commit/abort markers into the log but does not filter aborted records for ``read_committed``
consumers. Laminar's tests, its demo, ``laminar status`` and the Kafka sink's start-up (the
identity and the witness, docs/protocol.md §1) use this module::

    from laminar.kafka.log import read_committed

    for record in read_committed("127.0.0.1:9092", "orders"):
        print(record.partition, record.offset, record.header("laminar.epoch"), record.value)

How markers resolve transactions (per partition, in offset order; the core's ``kafka::replay``):
a producer's transactional records stay *pending* until a control batch of the same producer id
arrives. A marker written with producer epoch ``E`` resolves the pending records of epoch ``E``
if there are any (the classic protocol), else those of epoch ``E - 1`` (a coordinator that bumps
the epoch when it ends a transaction: KIP-890's transactions v2, or the abort written when a
newer producer fenced an older one). Pending records of an even older epoch belonged to a
producer that was fenced and never ended its transaction: they are not committed. Records still
pending at the end of the log belong to open transactions and are not committed either.

The same client completes a prepared transaction at the protocol level (docs/protocol.md §3):
`KafkaLogClient.end_txn` sends FindCoordinator(transactional id) then EndTxn(transactional id,
producer id, producer epoch, commit) — what KIP-939's ``completeTransaction`` does — so that
recovery can commit a flushed transaction whose producer died, before any new producer's
``init_transactions`` aborts it.

Connections use the same configuration dict as the producer (`ClientSecurity.from_config`);
GSSAPI raises `UnsupportedSecurityError`, and callers fall back (docs/kafka.md, "Secured
clusters"). A request refused for want of an ACL raises `KafkaAuthorizationError` naming it.
Record headers come back as an ordered map: a name given twice keeps its last value
(`LogRecord.header` returns the last one either way).

(Past 500 lines: one client class — metadata, reads, the witness, group offsets, EndTxn — whose
requests share one connection and retry handling; the records side is `laminar.kafka.records`.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from laminar import _core
from laminar._core import LogRecord, PartitionScan
from laminar.kafka._stalls import STALLS, StallMemory, setup_timeout_s
from laminar.kafka.conn import END_TXN as _END_TXN
from laminar.kafka.conn import (
    FETCH,
    FIND_COORDINATOR,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    RETRIABLE_GROUP_CODES,
    RETRIABLE_LEADER_CODES,
    RETRIABLE_TXN_CODES,
    BrokerUnavailableError,
    ClientSecurity,
    Connection,
    EndTxnError,
    KafkaAuthorizationError,
    KafkaLogError,
    UnsupportedSecurityError,
    authorization_error,
    error_name,
    parse_bootstrap,
)
from laminar.kafka.records import (
    Compression,
    ControlType,
    PartitionLog,
    ReadStats,
    RecordBatch,
    WitnessResult,
    batch_of,
    committed_records,
    decode_record_batches,
)

__all__ = [
    "BrokerUnavailableError",
    "ClientSecurity",
    "Compression",
    "ControlType",
    "EndTxnError",
    "KafkaAuthorizationError",
    "KafkaLogClient",
    "KafkaLogError",
    "LogRecord",
    "PartitionLog",
    "ReadStats",
    "RecordBatch",
    "UnsupportedSecurityError",
    "WitnessResult",
    "committed_records",
    "decode_record_batches",
    "read_committed",
    "read_partition",
]

_T = TypeVar("_T")
_EARLIEST, _LATEST = -2, -1
_COORDINATOR_GROUP, _COORDINATOR_TRANSACTION = 0, 1
#: How far a later epoch's records may be timestamped before an earlier epoch's (writer clocks
#: on different hosts after a restart): the witness's time bound keeps this margin.
WITNESS_CLOCK_SKEW_MS = 300_000


# -- the client ------------------------------------------------------------------------------------


class KafkaLogClient:
    """A small Kafka client that reads partitions record batch by record batch.

    Use as a context manager (it keeps one connection per broker)::

        with KafkaLogClient("127.0.0.1:9092") as client:
            log = client.read_partition("orders", 0)

    ``stats`` counts what it read (requests, fetches, bytes, batches, records).

    **Failover.** Every request is bounded by ``retry_for_s`` (default: ``timeout``, the
    bound of one socket operation). Within it, a broker that does not answer (connection refused,
    reset, timed out) or that answers that it no longer holds the role asked for — partition
    leader (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, …), group or transaction coordinator
    (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS) — is forgotten,
    the role looked up again (Metadata, FindCoordinator, through any bootstrap server that
    answers) and the request retried after the core's pause (``protocol::retry``: 50 ms doubling
    to 1 s). Past the bound the request raises `BrokerUnavailableError`, which says what was
    tried: a replicated cluster that moves a leader or a coordinator within the bound is never an
    error. ``until`` bounds every call by the deadline of the operation they belong to.

    **Stalled servers.** Each step of a new connection's set-up (connect, TLS, ApiVersions,
    SASL) has ``setup_timeout`` (default `laminar.kafka._stalls.setup_timeout_s` of
    ``retry_for_s``: at most 2 s), never more than what is left of the call's bound, so a server
    that accepts connections but never answers is given up on and the next bootstrap server
    tried. Such a server is remembered by the process (``stalls``, default
    `laminar.kafka._stalls.STALLS`) and tried after the others until it answers again; when every
    bootstrap server stalled, the next try doubles the set-up deadline (up to ``timeout``), so a
    slow cluster is still reached.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        timeout: float = 10.0,
        client_id: str = "laminar-kafka-log",
        fetch_max_bytes: int = 4 << 20,
        security: ClientSecurity | None = None,
        retry_for_s: float | None = None,
        setup_timeout: float | None = None,
        stalls: StallMemory | None = None,
        until: float | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        #: The deadline (``time.monotonic()``) of the operation every call belongs to, when the
        #: caller's budget is for the operation as a whole (a sink's start-up: one
        #: ``init_timeout_s``): no call retries past it, whatever its own ``retry_for_s``.
        self.until = until
        self.timeout = timeout
        self.client_id = client_id
        self.fetch_max_bytes = fetch_max_bytes
        #: How long one public call may keep retrying through a failover.
        self.retry_for_s = timeout if retry_for_s is None else retry_for_s
        #: How long each step of a new connection's set-up may take (class docstring).
        self.setup_timeout = (
            min(setup_timeout_s(self.retry_for_s), timeout)
            if setup_timeout is None
            else setup_timeout
        )
        self.stalls = STALLS if stalls is None else stalls
        #: How long a fetch may wait for data at the end of the log (a read ends with one fetch
        #: there). Tansu 0.6 answers a fetch with ``max_wait_ms=0`` with no partition at all.
        self.fetch_max_wait_ms = 10
        self.security = security or ClientSecurity()
        self.security.check()
        self.stats = ReadStats()
        #: Retries made after a broker did not answer or moved a role (all calls).
        self.failovers = 0
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._connections: dict[int, Connection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._any: Connection | None = None
        #: When the public call under way must end (`_retry`); None outside one.
        self._deadline: float | None = None

    # -- connections ------------------------------------------------------------------------

    def connect(self) -> None:
        """Connect to one of the bootstrap brokers (`KafkaLogError` if none answers)."""
        self._retry("connecting", self._bootstrap_connection)

    def _open(self, host: str, port: int) -> Connection:
        setup = self.setup_timeout
        if self._deadline is not None:
            setup = max(min(setup, self._deadline - time.monotonic()), 0.05)
        return Connection(
            host, port, self.timeout, self.client_id, self.security, setup_timeout=setup
        )

    def _bootstrap_connection(self) -> Connection:
        """A connection to any bootstrap broker that answers; the first one tried is the one
        after the broker that failed last (`_forget` rotates the list), servers that stalled
        last (class docstring)."""
        if self._any is None:
            errors, stalled = [], 0
            for host, port in self.stalls.order(self._bootstrap):
                try:
                    self._any = self._open(host, port)
                    self.stalls.answered(self._any.address)
                    break
                except UnsupportedSecurityError:
                    raise
                except BrokerUnavailableError as e:
                    errors.append(str(e))
                    if e.stalled and e.address is not None:
                        self.stalls.stalled(e.address, time.monotonic())
                        stalled += 1
            else:
                if stalled == len(self._bootstrap):
                    self.setup_timeout = min(self.setup_timeout * 2, self.timeout)
                raise BrokerUnavailableError(
                    f"no broker of bootstrap.servers={self.bootstrap_servers} answered: "
                    + "; ".join(errors),
                    stalled=stalled > 0,
                )
        return self._any

    def _broker(self, node_id: int) -> Connection:
        conn = self._connections.get(node_id)
        if conn is None:
            if node_id not in self._brokers:
                raise BrokerUnavailableError(f"broker {node_id} is not in the cluster metadata")
            conn = self._open(*self._brokers[node_id])
            self._connections[node_id] = conn
        return conn

    def _forget(self, address: str | None) -> None:
        """Drop every connection to ``address`` — the bootstrap connection too, so that the
        next request looks its broker up again through another bootstrap server — when a broker
        did not answer. Nothing when the answer came but named no usable broker (no leader yet,
        a coordinator moving): the retry asks again."""
        if address is None:
            return
        for key, conn in list(self._connections.items()):
            if conn.address == address:
                conn.close()
                del self._connections[key]
        if self._any is not None and self._any.address == address:
            self._any.close()
            self._any = None
            # try the others first next time
            self._bootstrap = self._bootstrap[1:] + self._bootstrap[:1]

    def _call(
        self,
        conn: Connection,
        api_key: int,
        encode: Callable[[int, int], bytes],
        decode: Callable[[bytes, int, int], Any],
        *,
        version: int | None = None,
    ) -> Any:
        self.stats.requests += 1
        left = None if self._deadline is None else self._deadline - time.monotonic()
        return conn.call(api_key, encode, decode, version=version, timeout=left)

    def _retry(self, what: str, attempt: Callable[[], _T]) -> _T:
        """``attempt()`` until it answers or the call's bound passes (class docstring)."""
        deadline = time.monotonic() + self.retry_for_s
        if self.until is not None:
            deadline = min(deadline, self.until)
        outer = self._deadline
        self._deadline = deadline if outer is None else min(outer, deadline)
        tries = 0
        try:
            while True:
                tries += 1
                try:
                    return attempt()
                except BrokerUnavailableError as e:
                    self._forget(e.address)
                    if e.stalled and e.address is not None:
                        # set up, then silent on a request: tried last by the process's next
                        # connections too (class docstring, "Stalled servers")
                        self.stalls.stalled(e.address, time.monotonic())
                    pause = _core.failover_pause_s(tries, deadline - time.monotonic())
                    if pause is None:
                        bound = (
                            f"retry_for_s={self.retry_for_s:g} s"
                            if self.until is None or deadline < self.until
                            else "the deadline of the operation it belongs to (a start-up's "
                            "init_timeout_s, shared by its calls)"
                        )
                        raise BrokerUnavailableError(
                            f"{what}: no broker answered within {bound} ({tries} tries; last: {e})",
                            address=e.address,
                            code=e.code,
                            stalled=e.stalled,
                        ) from e
                self.failovers += 1
                time.sleep(pause)
        finally:
            self._deadline = outer

    def close(self) -> None:
        """Close every connection."""
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        if self._any is not None:
            self._any.close()
            self._any = None

    def __enter__(self) -> KafkaLogClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- metadata and offsets ---------------------------------------------------------------

    def partition_leaders(self, topic: str) -> dict[int, int]:
        """``{partition: leader broker id}`` of ``topic`` (never creates it)."""
        return self._retry(f"Metadata of topic {topic!r}", lambda: self._leaders(topic))

    def _leaders(self, topic: str) -> dict[int, int]:
        cid = self.client_id
        conn = self._bootstrap_connection()
        brokers, error, partitions = self._call(
            conn,
            METADATA,
            lambda v, c: _core.encode_metadata(topic, v, c, cid),
            lambda d, v, c: _core.decode_metadata(d, v, c, topic),
        )
        for node_id, host, port in brokers:
            self._brokers[node_id] = (host, port)
        if error == 3:
            raise KafkaLogError(f"topic {topic!r} does not exist on {self.bootstrap_servers}")
        denied = authorization_error(f"Metadata of topic {topic!r}", error, "DESCRIBE", topic)
        if denied is not None:
            raise denied
        if error in RETRIABLE_LEADER_CODES:
            raise BrokerUnavailableError(f"topic {topic!r}: {error_name(error)}", code=error)
        if error != 0:
            raise KafkaLogError(f"topic {topic!r}: {error_name(error)}")
        leaders: dict[int, int] = {}
        for index, leader, p_error in partitions:
            if p_error in RETRIABLE_LEADER_CODES or (p_error == 0 and leader < 0):
                raise BrokerUnavailableError(
                    f"topic {topic!r} partition {index} has no leader now"
                    + (f" ({error_name(p_error)})" if p_error else ""),
                    code=p_error,
                )
            if p_error != 0:
                raise KafkaLogError(f"topic {topic!r} partition {index}: {error_name(p_error)}")
            leaders[index] = leader
        if not leaders:
            raise KafkaLogError(f"topic {topic!r} has no partitions on {self.bootstrap_servers}")
        return leaders

    def list_offsets(
        self, topic: str, timestamp: int, partitions: Sequence[int] | None = None
    ) -> dict[int, int]:
        """``{partition: offset}`` at ``timestamp`` (-2 earliest, -1 latest = high watermark,
        else the first offset whose timestamp is at or after it, -1 if none): one request per
        leader."""
        return self._retry(
            f"ListOffsets of topic {topic!r}",
            lambda: self._list_offsets(topic, timestamp, partitions),
        )

    def _list_offsets(
        self, topic: str, timestamp: int, partitions: Sequence[int] | None
    ) -> dict[int, int]:
        leaders = self._leaders(topic)
        chosen = list(leaders) if partitions is None else list(partitions)
        by_leader: dict[int, list[int]] = {}
        for p in chosen:
            if p not in leaders:
                raise KafkaLogError(f"topic {topic!r} has no partition {p}")
            by_leader.setdefault(leaders[p], []).append(p)
        cid = self.client_id
        out: dict[int, int] = {}
        for leader, parts in by_leader.items():
            answer = self._call(
                self._broker(leader),
                LIST_OFFSETS,
                lambda v, c, parts=parts: _core.encode_list_offsets(  # type: ignore[misc]
                    topic, parts, timestamp, v, c, cid
                ),
                lambda d, v, c: _core.decode_list_offsets(d, v, c, topic),
            )
            for index, error, offset in answer:
                if error in RETRIABLE_LEADER_CODES:
                    raise BrokerUnavailableError(
                        f"{topic}[{index}]: ListOffsets: {error_name(error)}", code=error
                    )
                denied = authorization_error(f"ListOffsets of {topic}", error, "DESCRIBE", topic)
                if denied is not None:
                    raise denied
                if error != 0:
                    raise KafkaLogError(
                        f"{topic}[{index}]: ListOffsets failed: {error_name(error)}"
                    )
                out[index] = offset
        missing = [p for p in chosen if p not in out]
        if missing:
            raise KafkaLogError(f"{topic}{missing}: no ListOffsets answer")
        return out

    def list_offset(self, topic: str, partition: int, leader: int, timestamp: int) -> int:
        """The earliest (-2) or latest (-1, high watermark) offset of one partition."""
        del leader  # the leader is looked up again (kept for callers of the earlier signature)
        return self.list_offsets(topic, timestamp, [partition])[partition]

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log start offset, high watermark)`` of one partition."""
        return self.partition_watermarks(topic, [partition])[partition]

    def partition_watermarks(
        self, topic: str, partitions: Sequence[int] | None = None
    ) -> dict[int, tuple[int, int]]:
        """``{partition: (log start offset, high watermark)}``: two requests per leader."""
        low = self.list_offsets(topic, _EARLIEST, partitions)
        high = self.list_offsets(topic, _LATEST, partitions)
        return {p: (low[p], high[p]) for p in sorted(low)}

    # -- fetching ---------------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, leader: int, offset: int) -> tuple[bytes, int]:
        """One Fetch (READ_UNCOMMITTED) from ``offset``: ``(raw record batches, high
        watermark)``. ``leader`` is where to ask first; after a failover, the new leader."""
        cid, size, wait = self.client_id, self.fetch_max_bytes, self.fetch_max_wait_ms
        node = [leader]

        def encode(v: int, c: int) -> bytes:
            return _core.encode_fetch(topic, partition, offset, size, wait, v, c, cid)

        def attempt() -> tuple[bytes, int]:
            try:
                error, high_watermark, records = self._call(
                    self._broker(node[0]),
                    FETCH,
                    encode,
                    lambda d, v, c: _core.decode_fetch(d, v, c, topic, partition),
                )
                self._check_fetch(error, topic, partition, offset)
            except BrokerUnavailableError:
                node[0] = self._leader_after_failover(topic, partition)
                raise
            return bytes(records), high_watermark

        return self._retry(f"Fetch of {topic}[{partition}]", attempt)

    def _leader_after_failover(self, topic: str, partition: int) -> int:
        """The partition's leader as the cluster says now (-1 if it cannot tell yet: the
        retry asks again)."""
        try:
            return self._leaders(topic).get(partition, -1)
        except BrokerUnavailableError:
            return -1

    @staticmethod
    def _check_fetch(error: int, topic: str, partition: int, offset: int) -> None:
        if error in RETRIABLE_LEADER_CODES:
            raise BrokerUnavailableError(
                f"{topic}[{partition}] offset {offset}: Fetch: {error_name(error)}", code=error
            )
        denied = authorization_error(f"Fetch of {topic}[{partition}]", error, "READ", topic)
        if denied is not None:
            raise denied
        if error != 0:
            raise KafkaLogError(
                f"{topic}[{partition}] offset {offset}: Fetch failed: {error_name(error)}"
            )

    def _scan(
        self, scan: PartitionScan, topic: str, partition: int, leader: int
    ) -> Iterator[tuple]:  # type: ignore[type-arg]
        """Runs a scan to its end: fetch after fetch, each answer fed to the core. A fetch that
        fails over is asked again of the partition's new leader from the same offset (an answer
        with an error feeds the core nothing)."""
        cid, size, wait = self.client_id, self.fetch_max_bytes, self.fetch_max_wait_ms
        node = [leader]

        def attempt() -> list[tuple]:  # type: ignore[type-arg]
            try:
                error, _high, batches = self._call(
                    self._broker(node[0]),
                    FETCH,
                    lambda v, c: scan.fetch_request(v, c, cid, size, wait),
                    scan.feed,
                )
                self._check_fetch(error, topic, partition, scan.next_offset() or 0)
            except BrokerUnavailableError:
                node[0] = self._leader_after_failover(topic, partition)
                raise
            return list(batches)

        try:
            while scan.next_offset() is not None:
                batches = self._retry(f"Fetch of {topic}[{partition}]", attempt)
                yield from batches
        finally:
            self.stats.add(scan.stats)

    def _bounds(
        self, topic: str, partition: int, start: int | None, end: int | None
    ) -> tuple[int, int, int]:
        """``(leader, start, high watermark)`` for a read of one partition."""
        leaders = self.partition_leaders(topic)
        if partition not in leaders:
            raise KafkaLogError(f"topic {topic!r} has no partition {partition}")
        low, high = self.partition_watermarks(topic, [partition])[partition]
        return leaders[partition], low if start is None else start, high

    def iter_batches(
        self, topic: str, partition: int, start: int | None = None, end: int | None = None
    ) -> Iterator[RecordBatch]:
        """Every record batch of the partition from ``start`` (default: the log start) up to
        ``end`` (default: the end of the log), control batches included.

        Without ``end`` the read follows the log past the high watermark that ListOffsets
        reports until a fetch returns nothing new: some brokers (Tansu with S3 storage) report a
        high watermark behind records they already serve. Records of transactions still open
        there are left out by `committed_records`, so reading further never shows uncommitted
        data.
        """
        leader, first, high = self._bounds(topic, partition, start, end)
        scan = PartitionScan(topic, partition, first, end, high, replay=False)
        for row in self._scan(scan, topic, partition, leader):
            yield batch_of(topic, partition, row)
        scan.finish()

    def read_partition(
        self, topic: str, partition: int, start: int | None = None, end: int | None = None
    ) -> PartitionLog:
        """One partition's records between ``start`` and ``end``, transactions resolved (the
        whole read decoded and replayed by the core)."""
        leader, first, high = self._bounds(topic, partition, start, end)
        scan = PartitionScan(topic, partition, first, end, high, replay=True)
        for _ in self._scan(scan, topic, partition, leader):
            pass
        committed, aborted, open_, commits, aborts, last = scan.finish()
        log = PartitionLog(
            topic, partition, first, last, committed, aborted, open_, commits, aborts
        )
        if end is not None:
            log.end_offset = max(log.end_offset, end)
        return log

    def read_topic(
        self, topic: str, partitions: Sequence[int] | None = None
    ) -> dict[int, PartitionLog]:
        """Every partition (or the given ones) of ``topic``, transactions resolved."""
        chosen = list(self.partition_leaders(topic)) if partitions is None else list(partitions)
        return {p: self.read_partition(topic, p) for p in chosen}

    # -- the sink's witness (docs/protocol.md §1, step 5) --------------------------------------

    def witness(
        self, topic: str, sink_id: str, *, max_records: int, first_window: int = 1_024
    ) -> WitnessResult:
        """The highest ``laminar.epoch`` among the committed records whose ``laminar.sink`` is
        ``sink_id``: each partition read backwards from its end in windows (``first_window``
        records, four times larger each time) up to ``max_records`` records (-1: no limit). A
        partition that reaches the limit without a record of the sink is settled by time when
        another partition found one: a later epoch's records are timestamped after that
        epoch's records (less `WITNESS_CLOCK_SKEW_MS`), so ListOffsets at that time says
        whether the read covered
        them. Otherwise it stays ``undecided``."""
        before = ReadStats(**vars(self.stats))
        leaders = self.partition_leaders(topic)
        marks = self.partition_watermarks(topic)
        found: dict[int, tuple[int, int]] = {}
        limited: dict[int, int] = {}
        for p, (low, high) in marks.items():
            window, start = first_window, high
            while start > low:
                start = max(low, high - window)
                if max_records >= 0:
                    start = max(start, high - max_records)
                scan = PartitionScan(topic, p, start, None, high, replay=False, sink_id=sink_id)
                for _ in self._scan(scan, topic, p, leaders[p]):
                    pass
                hit = scan.finish()
                if hit is not None:
                    found[p] = hit
                    break
                if start > low and max_records >= 0 and high - start >= max_records:
                    limited[p] = start
                    break
                window *= 4
        best = max(found.values()) if found else None
        if limited and best is not None:
            since = self.list_offsets(topic, best[1] - WITNESS_CLOCK_SKEW_MS, list(limited))
            for p, start in list(limited.items()):
                if since[p] < 0 or since[p] >= start:
                    del limited[p]
        read = ReadStats(**{k: v - getattr(before, k) for k, v in vars(self.stats).items()})
        return WitnessResult(
            epoch=None if best is None else best[0],
            undecided=tuple(sorted(limited)),
            partitions=len(marks),
            nonempty=sum(1 for low, high in marks.values() if high > low),
            read=read,
        )

    # -- coordinators: consumer group offsets (the marker, the identity) and EndTxn -----------

    def _find_coordinator(self, key: str, key_type: int) -> tuple[int, str, int]:
        """``(node id, host, port)`` of the group (``key_type=0``) or transaction (1)
        coordinator of ``key``. A coordinator that is moving or loading, or no broker that
        answers, is a `BrokerUnavailableError`; other refusals an `EndTxnError` with the code."""
        cid = self.client_id
        error, message, node_id, host, port = self._call(
            self._bootstrap_connection(),
            FIND_COORDINATOR,
            lambda v, c: _core.encode_find_coordinator(key, key_type, v, c, cid),
            _core.decode_find_coordinator,
        )
        if error != 0:
            text = f"FindCoordinator({key!r}) failed: {error_name(error)}" + (
                f" ({message})" if message else ""
            )
            if error in RETRIABLE_GROUP_CODES:
                raise BrokerUnavailableError(text, code=error)
            denied = authorization_error(f"FindCoordinator({key!r})", error, "DESCRIBE", key)
            if denied is not None:
                raise denied
            raise EndTxnError(text, code=error, name=error_name(error))
        return node_id, host, port

    def _coordinator(self, key: str, key_type: int) -> Connection:
        """A connection to the group (``key_type=0``) or transaction (1) coordinator of
        ``key`` (`_find_coordinator`)."""
        node_id, host, port = self._find_coordinator(key, key_type)
        conn_key = (-1000 if key_type else -2000) - node_id  # apart from partition leaders
        conn = self._connections.get(conn_key)
        if conn is None or conn.address != f"{host}:{port}":
            conn = self._open(host, port)
            self._connections[conn_key] = conn
        return conn

    def coordinator_node(self, key: str, key_type: int) -> int:
        """The node id of the group (``key_type=0``) or transaction (1) coordinator of ``key``
        (failover tests choose the broker to kill by it)."""
        return self._retry(
            f"FindCoordinator({key!r})", lambda: self._find_coordinator(key, key_type)[0]
        )

    def find_coordinator(self, transactional_id: str) -> Connection:
        """A connection to the transaction coordinator of ``transactional_id``."""
        return self._retry(
            f"FindCoordinator({transactional_id!r})",
            lambda: self._coordinator(transactional_id, _COORDINATOR_TRANSACTION),
        )

    def _group_call(
        self,
        group: str,
        what: str,
        api_key: int,
        encode: Callable[[int, int], bytes],
        decode: Callable[[bytes, int, int], Any],
        *,
        topic: str,
        version: Callable[[Connection], int | None] | None = None,
    ) -> Any:
        """A request to ``group``'s coordinator on ``topic``'s offsets, found again whenever it
        moves (class docstring); a refusal that is not a move is a `KafkaLogError` naming
        ``what`` (a `KafkaAuthorizationError` naming the ACL: an OffsetCommit needs READ on the
        group and the topic, an OffsetFetch DESCRIBE)."""
        operation = "READ" if api_key == OFFSET_COMMIT else "DESCRIBE"

        def attempt() -> Any:
            try:
                conn = self._coordinator(group, _COORDINATOR_GROUP)
            except EndTxnError as e:
                raise KafkaLogError(f"{what} of group {group!r} failed: {e}") from e
            answer = self._call(
                conn, api_key, encode, decode, version=None if version is None else version(conn)
            )
            code = answer[0] if isinstance(answer, tuple) else answer
            if code in RETRIABLE_GROUP_CODES:
                raise BrokerUnavailableError(
                    f"{what} of group {group!r}: {error_name(code)} from {conn.address}",
                    address=conn.address,
                    code=code,
                )
            resource = topic if code == 29 else group
            denied = authorization_error(f"{what} of group {group!r}", code, operation, resource)
            if denied is not None:
                raise denied
            if code != 0:
                raise KafkaLogError(f"{what} of group {group!r} failed: {error_name(code)}")
            return answer

        return self._retry(f"{what} of group {group!r}", attempt)

    def committed_offset(
        self, group: str, topic: str, partition: int
    ) -> tuple[int, str | None] | None:
        """``group``'s committed ``(offset, metadata)`` on ``topic[partition]``, ``None`` if it
        has none (OffsetFetch)."""
        cid = self.client_id
        _code, offset, metadata = self._group_call(
            group,
            "OffsetFetch",
            OFFSET_FETCH,
            lambda v, c: _core.encode_offset_fetch(group, topic, partition, v, c, cid),
            lambda d, v, c: _core.decode_offset_fetch(d, v, c, topic, partition),
            topic=topic,
        )
        return None if offset < 0 else (offset, metadata)

    def commit_offset(
        self, group: str, topic: str, partition: int, offset: int, metadata: str, retention_ms: int
    ) -> bool:
        """Commits ``offset`` for ``group`` (no members) on ``topic[partition]`` with an explicit
        ``retention_ms`` (OffsetCommit v2-v4). True if the broker took a version that carries
        the retention; False if it only offers later versions (the broker's
        ``offsets.retention.minutes`` then applies)."""
        cid = self.client_id
        retained: list[int | None] = [None]

        def version(conn: Connection) -> int | None:
            retained[0] = next((v for v in (4, 3, 2) if conn.offers(OFFSET_COMMIT, v)), None)
            return retained[0]

        self._group_call(
            group,
            "OffsetCommit",
            OFFSET_COMMIT,
            lambda v, c: _core.encode_offset_commit(
                group, topic, partition, offset, metadata, retention_ms, v, c, cid
            ),
            lambda d, v, c: _core.decode_offset_commit(d, v, c, topic, partition),
            topic=topic,
            version=version,
        )
        return retained[0] is not None

    # -- transactions -----------------------------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        retry_for_s: float | None = None,
    ) -> None:
        """Complete the transaction of ``transactional_id`` opened by producer ``producer_id`` /
        ``producer_epoch``: commit (``commit=True``) or abort it (EndTxn).

        A coordinator that moves, loads or is busy with the transaction (CONCURRENT_TRANSACTIONS),
        and a broker that does not answer, are retried for up to ``retry_for_s`` (default: the
        client's) with the coordinator found again; past that a `BrokerUnavailableError`. Any
        other refusal raises `EndTxnError` (``definitive``: the transaction cannot be completed
        this way).
        """
        bound = self.retry_for_s if retry_for_s is None else retry_for_s
        cid = self.client_id

        def attempt() -> None:
            conn = self._coordinator(transactional_id, _COORDINATOR_TRANSACTION)
            error = self._call(
                conn,
                _END_TXN,
                lambda v, c: _core.encode_end_txn(
                    transactional_id, producer_id, producer_epoch, commit, v, c, cid
                ),
                _core.decode_end_txn,
            )
            if error == 0:
                return
            text = (
                f"EndTxn({transactional_id!r}, producer {producer_id}/{producer_epoch}, "
                f"{'commit' if commit else 'abort'}) refused: {error_name(error)}"
            )
            if error in RETRIABLE_TXN_CODES:
                raise BrokerUnavailableError(text, address=conn.address, code=error)
            denied = authorization_error(
                f"EndTxn({transactional_id!r})", error, "WRITE", transactional_id
            )
            if denied is not None:
                raise denied
            raise EndTxnError(text, code=error, name=error_name(error))

        saved, self.retry_for_s = self.retry_for_s, bound
        try:
            self._retry(f"EndTxn({transactional_id!r})", attempt)
        finally:
            self.retry_for_s = saved


def read_partition(
    bootstrap_servers: str,
    topic: str,
    partition: int,
    *,
    start: int | None = None,
    timeout: float = 10.0,
    security: ClientSecurity | None = None,
) -> PartitionLog:
    """One partition's records up to the end of its log, transactions resolved."""
    with KafkaLogClient(bootstrap_servers, timeout=timeout, security=security) as client:
        return client.read_partition(topic, partition, start)


def read_committed(
    bootstrap_servers: str,
    topic: str,
    *,
    partitions: Sequence[int] | None = None,
    timeout: float = 10.0,
    security: ClientSecurity | None = None,
) -> list[LogRecord]:
    """The records of committed transactions (and non-transactional records) in every partition
    of ``topic``, up to the end of each partition's log, ordered by partition then offset."""
    with KafkaLogClient(bootstrap_servers, timeout=timeout, security=security) as client:
        logs = client.read_topic(topic, partitions)
    return [record for p in sorted(logs) for record in logs[p].committed]
