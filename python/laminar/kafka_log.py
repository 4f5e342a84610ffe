"""Read what a Kafka topic really committed, without trusting the broker's ``read_committed``.

A minimal Kafka wire-protocol client (standard-library sockets and ``struct``): Metadata,
ListOffsets and Fetch (v4, isolation ``READ_UNCOMMITTED``), a decoder of record batches (message
format v2, uncompressed or gzip) that keeps the **control batches** (transaction commit and abort
markers), and a filter that replays those markers to keep only the records of committed
transactions, plus non-transactional records. Every record comes back with its partition, offset,
headers and producer id/epoch.

Why: a broker's ``read_committed`` isolation is the thing under test. Tansu 0.6.0, for one, writes
the commit/abort markers into the log but does not filter aborted records for ``read_committed``
consumers. Laminar's tests, its demo and ``laminar status`` use this module to prove that every
record is committed exactly once on any broker::

    from laminar.kafka_log import read_committed

    for record in read_committed("127.0.0.1:9092", "orders"):
        print(record.partition, record.offset, record.header("laminar.epoch"), record.value)

How markers resolve transactions (per partition, in offset order): a producer's transactional
records stay *pending* until a control batch of the same producer id arrives. A marker written
with producer epoch ``E`` resolves the pending records of epoch ``E`` if there are any (the
classic protocol), else those of epoch ``E - 1`` (a coordinator that bumps the epoch when it ends a
transaction: KIP-890's transactions v2, or the abort written when a newer producer fenced an older
one). Pending records of an even older epoch belonged to a producer that was fenced and never
ended its transaction: they are not committed. Records still pending at the end of the log belong
to open transactions and are not committed either.

The same client completes a prepared transaction at the protocol level (docs/protocol.md §3):
`KafkaLogClient.end_txn` sends FindCoordinator(transactional id) then EndTxn(transactional id,
producer id, producer epoch, commit) — what KIP-939's ``completeTransaction`` does — so that
recovery can commit a flushed transaction whose producer died, before any new producer's
``init_transactions`` aborts it.

Connections: plaintext, TLS (``security.protocol=ssl``, librdkafka's ``ssl.*`` settings) and SASL
PLAIN over either (``sasl_plaintext``/``sasl_ssl``), from the same configuration dict as the
producer (`ClientSecurity.from_config`). Other SASL mechanisms raise `UnsupportedSecurityError`, and
callers fall back (the sink reads through librdkafka; recovery skips protocol-level completion).
Message format v2 only (Kafka >= 0.11), gzip as the only compression codec.
"""

from __future__ import annotations

import gzip
import socket
import ssl
import struct
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from laminar._core import crc32c
from laminar.errors import LaminarError

__all__ = [
    "ClientSecurity",
    "Compression",
    "ControlType",
    "EndTxnError",
    "KafkaLogClient",
    "KafkaLogError",
    "LogRecord",
    "PartitionLog",
    "RecordBatch",
    "UnsupportedSecurityError",
    "committed_records",
    "decode_record_batches",
    "read_committed",
    "read_partition",
]


class KafkaLogError(LaminarError):
    """The log could not be read: unreachable broker, a broker error, or data this reader does
    not decode (an unsupported codec or message format, a corrupt batch)."""


class UnsupportedSecurityError(KafkaLogError):
    """The connection needs a security setting this client does not speak (a SASL mechanism
    other than PLAIN): the caller falls back to another way."""


class EndTxnError(KafkaLogError):
    """The broker refused ``EndTxn``: ``code`` is the Kafka error code, ``name`` its name.

    ``definitive`` errors mean the prepared transaction cannot be completed this way any more
    (the producer was fenced or its epoch bumped, the transaction was already aborted or timed
    out); the others (coordinator moving, loading, concurrent transactions) are worth retrying.
    """

    def __init__(self, message: str, *, code: int, name: str) -> None:
        super().__init__(message)
        self.code = code
        self.name = name

    @property
    def definitive(self) -> bool:
        """Whether retrying cannot help."""
        return self.code not in _RETRIABLE_TXN_CODES


@dataclass(frozen=True)
class ClientSecurity:
    """How to connect: TLS and SASL settings, read from a librdkafka-style configuration."""

    protocol: str = "plaintext"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    verify_certificate: bool = True
    check_hostname: bool = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> ClientSecurity:
        """The settings of a producer/consumer configuration (``security.protocol``,
        ``sasl.mechanism(s)``, ``sasl.username``/``password``, ``ssl.ca.location``,
        ``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``,
        ``enable.ssl.certificate.verification``, ``ssl.endpoint.identification.algorithm``)."""
        config = dict(config or {})

        def text(key: str) -> str | None:
            value = config.get(key)
            return None if value is None else str(value)

        protocol = (text("security.protocol") or "plaintext").lower()
        if protocol not in ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"):
            raise UnsupportedSecurityError(f"security.protocol={protocol!r} is not supported here")
        mechanism = text("sasl.mechanism") or text("sasl.mechanisms")
        verify = str(config.get("enable.ssl.certificate.verification", "true")).lower()
        algorithm = (text("ssl.endpoint.identification.algorithm") or "https").lower()
        return cls(
            protocol=protocol,
            sasl_mechanism=mechanism.upper() if mechanism else None,
            sasl_username=text("sasl.username"),
            sasl_password=text("sasl.password"),
            ca_location=text("ssl.ca.location"),
            certificate_location=text("ssl.certificate.location"),
            key_location=text("ssl.key.location"),
            key_password=text("ssl.key.password"),
            verify_certificate=verify not in ("false", "0", "no"),
            check_hostname=algorithm == "https",
        )

    @property
    def uses_tls(self) -> bool:
        """Whether connections are wrapped in TLS."""
        return self.protocol in ("ssl", "sasl_ssl")

    @property
    def uses_sasl(self) -> bool:
        """Whether connections authenticate with SASL."""
        return self.protocol in ("sasl_plaintext", "sasl_ssl")

    def check(self) -> None:
        """Raise `UnsupportedSecurityError` if this client cannot connect with these settings."""
        if self.uses_sasl and (self.sasl_mechanism or "GSSAPI") != "PLAIN":
            raise UnsupportedSecurityError(
                f"SASL mechanism {self.sasl_mechanism or 'GSSAPI'} is not supported by laminar's "
                "wire client (PLAIN is)"
            )

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS client context from the ``ssl.*`` settings."""
        context = ssl.create_default_context(cafile=self.ca_location)
        if not self.verify_certificate:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context.check_hostname = self.check_hostname
        if self.certificate_location:
            context.load_cert_chain(
                self.certificate_location, self.key_location, password=self.key_password
            )
        return context


class Compression(IntEnum):
    """The compression codec of a record batch (attributes bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class ControlType(IntEnum):
    """What a control record marks: the end of a transaction."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True)
class LogRecord:
    """One record as it sits in the log."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    producer_epoch: int
    #: Whether the record was written inside a transaction.
    transactional: bool

    def header(self, name: str) -> bytes | None:
        """The value of the last header called ``name`` (``None`` if absent)."""
        for key, value in reversed(self.headers):
            if key == name:
                return value
        return None


@dataclass(frozen=True)
class RecordBatch:
    """A decoded record batch (message format v2)."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    compression: Compression
    transactional: bool
    #: The data records; empty for a control batch.
    records: tuple[LogRecord, ...]
    #: For a control batch: what it marks (commit or abort); ``None`` for data.
    control: ControlType | None = None

    @property
    def is_control(self) -> bool:
        """Whether this batch is a transaction marker."""
        return self.control is not None


@dataclass
class PartitionLog:
    """What one partition holds between two offsets, transactions resolved."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    #: Records of committed transactions and non-transactional records, in offset order.
    committed: list[LogRecord] = field(default_factory=list)
    #: Records of aborted transactions (including those of fenced producers).
    aborted: list[LogRecord] = field(default_factory=list)
    #: Records of transactions with no marker yet (open, or abandoned by a dead producer).
    open: list[LogRecord] = field(default_factory=list)
    #: Offsets of the commit and abort markers seen.
    commit_markers: list[int] = field(default_factory=list)
    abort_markers: list[int] = field(default_factory=list)


# -- record batch decoding (pure) ------------------------------------------------------------------

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, records count
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_BATCH_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
_CRC_START = 21  # the CRC covers everything from the attributes to the end of the batch

_ATTR_COMPRESSION = 0x07
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20


class _Cursor:
    """Reads Kafka's primitive types from a buffer (bounds-checked: a short read is an error)."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise KafkaLogError(
                f"truncated data: wanted {n} bytes at {self.pos}, {self.end - self.pos} left"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        if self.pos + fmt.size > self.end:
            raise KafkaLogError(f"truncated data at {self.pos}")
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def int8(self) -> int:
        return self.unpack(_I8)[0]

    def int16(self) -> int:
        return self.unpack(_I16)[0]

    def int32(self) -> int:
        return self.unpack(_I32)[0]

    def int64(self) -> int:
        return self.unpack(_I64)[0]

    def uvarint(self) -> int:
        shift = result = 0
        data, end = self.data, self.end
        while True:
            if self.pos >= end:
                raise KafkaLogError("truncated varint")
            byte = data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise KafkaLogError("malformed varint (more than 10 bytes)")

    def varint(self) -> int:
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def varbytes(self) -> bytes | None:
        n = self.varint()
        return None if n < 0 else self.take(n)

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise KafkaLogError("unexpected null string")
        return self.take(n).decode("utf-8", "replace")

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self.take(n).decode("utf-8", "replace")

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self.take(n)

    def array_len(self) -> int:
        n = self.int32()
        return max(n, 0)


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def decode_record_batches(
    data: bytes, *, topic: str = "", partition: int = 0, verify_crc: bool = True
) -> Iterator[RecordBatch]:
    """Decode the record batches in ``data`` (a Fetch response's ``records`` field).

    A trailing partial batch (a fetch cut at its byte limit) is ignored; anything else that does
    not decode raises `KafkaLogError`: a bad CRC, a message format other than v2, a codec other
    than none/gzip.
    """
    pos, size = 0, len(data)
    while pos + _BATCH_OVERHEAD <= size:
        base_offset, batch_length = struct.unpack_from(">qi", data, pos)
        end = pos + _BATCH_OVERHEAD + batch_length
        if end > size:
            return  # partial batch at the end of a fetch
        if batch_length < _BATCH_HEADER.size - _BATCH_OVERHEAD:
            raise KafkaLogError(f"{topic}[{partition}] offset {base_offset}: batch too short")
        magic = data[pos + 16]
        if magic != 2:
            raise KafkaLogError(
                f"{topic}[{partition}] offset {base_offset}: message format v{magic} is not "
                "supported (only v2, Kafka >= 0.11)"
            )
        yield _decode_batch(data, pos, end, topic, partition, verify_crc)
        pos = end


def _decode_batch(
    data: bytes, pos: int, end: int, topic: str, partition: int, verify_crc: bool
) -> RecordBatch:
    cur = _Cursor(data, pos, end)
    (
        base_offset,
        _length,
        _leader_epoch,
        _magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        _max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = cur.unpack(_BATCH_HEADER)
    where = f"{topic}[{partition}] offset {base_offset}"
    if verify_crc:
        actual = crc32c(data[pos + _CRC_START : end])
        if actual != crc:
            raise KafkaLogError(
                f"{where}: CRC mismatch (stored {crc:#010x}, computed {actual:#010x})"
            )
    codec_id = attributes & _ATTR_COMPRESSION
    try:
        codec = Compression(codec_id)
    except ValueError:
        raise KafkaLogError(f"{where}: unknown compression codec {codec_id}") from None
    transactional = bool(attributes & _ATTR_TRANSACTIONAL)
    is_control = bool(attributes & _ATTR_CONTROL)
    if codec is Compression.GZIP:
        try:
            body = gzip.decompress(data[cur.pos : end])
        except (OSError, EOFError, zlib.error) as e:
            raise KafkaLogError(f"{where}: gzip data does not decompress: {e}") from e
        cur = _Cursor(body)
    elif codec is not Compression.NONE:
        raise KafkaLogError(
            f"{where}: {codec.name.lower()} compression is not supported by this reader (only "
            "none and gzip); write the topic with compression.type=none or gzip to check it here"
        )
    records: list[LogRecord] = []
    control: ControlType | None = None
    for _ in range(count):
        length = cur.varint()
        record_end = cur.pos + length
        if length < 0 or record_end > cur.end:
            raise KafkaLogError(f"{where}: truncated record")
        cur.int8()  # record attributes: unused
        timestamp = base_timestamp + cur.varint()
        offset = base_offset + cur.varint()
        key = cur.varbytes()
        value = cur.varbytes()
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(cur.varint()):
            name = cur.varbytes() or b""
            headers.append((name.decode("utf-8", "replace"), cur.varbytes()))
        if cur.pos != record_end:
            raise KafkaLogError(f"{where}: record at offset {offset} has a bad length")
        if is_control:
            control = _control_type(key, where)
            continue
        records.append(
            LogRecord(
                topic=topic,
                partition=partition,
                offset=offset,
                timestamp_ms=timestamp,
                key=key,
                value=value,
                headers=tuple(headers),
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transactional=transactional,
            )
        )
    if is_control and control is None:
        raise KafkaLogError(f"{where}: control batch without a control record")
    return RecordBatch(
        topic=topic,
        partition=partition,
        base_offset=base_offset,
        last_offset=base_offset + last_offset_delta,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        compression=codec,
        transactional=transactional,
        records=tuple(records),
        control=control,
    )


def _control_type(key: bytes | None, where: str) -> ControlType:
    if key is None or len(key) < 4:
        raise KafkaLogError(f"{where}: control record without a key")
    _version, kind = struct.unpack_from(">hh", key)
    try:
        return ControlType(kind)
    except ValueError:
        raise KafkaLogError(f"{where}: unknown control record type {kind}") from None


# -- transaction resolution (pure) -----------------------------------------------------------------


def committed_records(
    batches: Iterable[RecordBatch], *, topic: str = "", partition: int = 0, start_offset: int = 0
) -> PartitionLog:
    """Replay the markers of one partition's batches (in offset order) and sort its records into
    committed, aborted and open (rules in the module docstring). Records before
    ``start_offset`` (a fetch returns whole batches) are left out."""
    log = PartitionLog(topic, partition, start_offset, start_offset)
    pending: dict[int, list[LogRecord]] = {}
    for batch in batches:
        log.end_offset = max(log.end_offset, batch.last_offset + 1)
        if batch.control is not None:
            if batch.base_offset < start_offset:
                continue
            if batch.control is ControlType.COMMIT:
                log.commit_markers.append(batch.base_offset)
            else:
                log.abort_markers.append(batch.base_offset)
            _resolve(log, pending, batch)
            continue
        records = [r for r in batch.records if r.offset >= start_offset]
        if not batch.transactional:
            log.committed.extend(records)
        else:
            pending.setdefault(batch.producer_id, []).extend(records)
    for records in pending.values():
        log.open.extend(records)
    log.committed.sort(key=_offset)
    log.aborted.sort(key=_offset)
    log.open.sort(key=_offset)
    return log


def _resolve(log: PartitionLog, pending: dict[int, list[LogRecord]], marker: RecordBatch) -> None:
    records = pending.pop(marker.producer_id, [])
    if not records:
        return
    epoch = marker.producer_epoch
    target = epoch if any(r.producer_epoch == epoch for r in records) else epoch - 1
    later = [r for r in records if r.producer_epoch > epoch]
    if later:  # a marker never ends a newer epoch's transaction
        pending[marker.producer_id] = later
    ended = [r for r in records if r.producer_epoch == target]
    fenced = [r for r in records if r.producer_epoch < target]
    log.aborted.extend(fenced)
    if marker.control is ControlType.COMMIT:
        log.committed.extend(ended)
    else:
        log.aborted.extend(ended)


def _offset(record: LogRecord) -> int:
    return record.offset


# -- the wire client -------------------------------------------------------------------------------

_METADATA, _LIST_OFFSETS, _FETCH = 3, 2, 1
_FIND_COORDINATOR, _END_TXN, _SASL_HANDSHAKE, _SASL_AUTHENTICATE = 10, 26, 17, 36
_COORDINATOR_TRANSACTION = 1
_METADATA_VERSION, _LIST_OFFSETS_VERSION, _FETCH_VERSION = 4, 1, 4
_EARLIEST, _LATEST = -2, -1
_READ_UNCOMMITTED = 0

# Error codes this reader explains (Kafka protocol numbering).
_ERRORS = {
    1: "OFFSET_OUT_OF_RANGE",
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_OR_FOLLOWER",
    7: "REQUEST_TIMED_OUT",
    14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR",
    29: "TOPIC_AUTHORIZATION_FAILED",
    33: "UNSUPPORTED_SASL_MECHANISM",
    35: "UNSUPPORTED_VERSION",
    47: "INVALID_PRODUCER_EPOCH",
    48: "INVALID_TXN_STATE",
    49: "INVALID_PRODUCER_ID_MAPPING",
    51: "CONCURRENT_TRANSACTIONS",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    58: "SASL_AUTHENTICATION_FAILED",
    90: "PRODUCER_FENCED",
}
# EndTxn/FindCoordinator errors worth retrying (the coordinator moves, loads, or is busy).
_RETRIABLE_TXN_CODES = frozenset({7, 14, 15, 16, 51})


def _error_name(code: int) -> str:
    return _ERRORS.get(code, f"error code {code}")


class _Connection:
    """One blocking TCP connection to a broker; requests are sent and answered one at a time."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float,
        client_id: str,
        security: ClientSecurity | None = None,
    ) -> None:
        self.address = f"{host}:{port}"
        self.timeout = timeout
        self._client_id = client_id.encode()
        self._correlation = 0
        security = security or ClientSecurity()
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise KafkaLogError(f"could not connect to the broker at {self.address}: {e}") from e
        if security.uses_tls:
            try:
                sock = security.ssl_context().wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise KafkaLogError(f"TLS handshake with {self.address} failed: {e}") from e
        self._sock = sock
        if security.uses_sasl:
            try:
                self._sasl_plain(security)
            except BaseException:
                sock.close()
                raise

    def _sasl_plain(self, security: ClientSecurity) -> None:
        """SaslHandshake v1 (PLAIN) then SaslAuthenticate v0 with NUL, user, NUL, password."""
        security.check()
        cur = self.request(_SASL_HANDSHAKE, 1, _string("PLAIN"))
        error = cur.int16()
        if error != 0:
            raise KafkaLogError(
                f"broker {self.address} refused SASL mechanism PLAIN ({_error_name(error)})"
            )
        token = b"\0" + (security.sasl_username or "").encode() + b"\0"
        token += (security.sasl_password or "").encode()
        cur = self.request(_SASL_AUTHENTICATE, 0, struct.pack(">i", len(token)) + token)
        error = cur.int16()
        message = cur.nullable_string()
        if error != 0:
            raise KafkaLogError(
                f"SASL PLAIN authentication with {self.address} failed "
                f"({_error_name(error)}: {message or 'no detail'}); check sasl.username and "
                "sasl.password"
            )

    def request(self, api_key: int, version: int, body: bytes) -> _Cursor:
        self._correlation += 1
        header = struct.pack(">hhih", api_key, version, self._correlation, len(self._client_id))
        message = header + self._client_id + body
        try:
            self._sock.sendall(struct.pack(">i", len(message)) + message)
            (size,) = struct.unpack(">i", self._recv(4))
            response = self._recv(size)
        except OSError as e:
            raise KafkaLogError(f"broker {self.address} did not answer: {e}") from e
        (correlation,) = struct.unpack_from(">i", response)
        if correlation != self._correlation:
            raise KafkaLogError(f"broker {self.address} answered out of order")
        return _Cursor(response, 4)

    def _recv(self, n: int) -> bytes:
        chunks: list[bytes] = []
        while n > 0:
            chunk = self._sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self._sock.close()


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _parse_bootstrap(bootstrap_servers: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for item in bootstrap_servers.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise KafkaLogError(f"bootstrap.servers entry {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise KafkaLogError("bootstrap.servers is empty")
    return out


class KafkaLogClient:
    """A minimal Kafka client that reads partitions record batch by record batch.

    Use as a context manager (it keeps one connection per broker)::

        with KafkaLogClient("127.0.0.1:9092") as client:
            log = client.read_partition("orders", 0)
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        timeout: float = 10.0,
        client_id: str = "laminar-kafka-log",
        fetch_max_bytes: int = 4 << 20,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout = timeout
        self.client_id = client_id
        self.fetch_max_bytes = fetch_max_bytes
        self.security = security or ClientSecurity()
        self.security.check()
        self._bootstrap = _parse_bootstrap(bootstrap_servers)
        self._connections: dict[int, _Connection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._any: _Connection | None = None

    # -- connections ------------------------------------------------------------------------

    def connect(self) -> None:
        """Connect to one of the bootstrap brokers (`KafkaLogError` if none answers)."""
        self._bootstrap_connection()

    def _bootstrap_connection(self) -> _Connection:
        if self._any is None:
            errors = []
            for host, port in self._bootstrap:
                try:
                    self._any = _Connection(host, port, self.timeout, self.client_id, self.security)
                    break
                except KafkaLogError as e:
                    errors.append(str(e))
            else:
                raise KafkaLogError(
                    f"no broker of bootstrap.servers={self.bootstrap_servers} answered within "
                    f"{self.timeout:g} s: " + "; ".join(errors)
                )
        return self._any

    def _broker(self, node_id: int) -> _Connection:
        conn = self._connections.get(node_id)
        if conn is None:
            if node_id not in self._brokers:
                raise KafkaLogError(f"broker {node_id} is not in the cluster metadata")
            host, port = self._brokers[node_id]
            conn = _Connection(host, port, self.timeout, self.client_id, self.security)
            self._connections[node_id] = conn
        return conn

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

    # -- requests ---------------------------------------------------------------------------

    def partition_leaders(self, topic: str) -> dict[int, int]:
        """``{partition: leader broker id}`` of ``topic`` (Metadata v4; never creates it)."""
        body = struct.pack(">i", 1) + _string(topic) + b"\x00"  # allow_auto_topic_creation=false
        cur = self._bootstrap_connection().request(_METADATA, _METADATA_VERSION, body)
        cur.int32()  # throttle
        for _ in range(cur.array_len()):
            node_id, host, port = cur.int32(), cur.string(), cur.int32()
            cur.nullable_string()  # rack
            self._brokers[node_id] = (host, port)
        cur.nullable_string()  # cluster id
        cur.int32()  # controller
        leaders: dict[int, int] = {}
        for _ in range(cur.array_len()):
            error, name = cur.int16(), cur.string()
            cur.int8()  # is_internal
            for _ in range(cur.array_len()):
                p_error, index, leader = cur.int16(), cur.int32(), cur.int32()
                for _ in range(2):  # replicas, isr
                    for _ in range(cur.array_len()):
                        cur.int32()
                if name == topic and p_error == 0:
                    leaders[index] = leader
                elif name == topic and p_error != 0 and error == 0:
                    raise KafkaLogError(
                        f"topic {topic!r} partition {index}: {_error_name(p_error)}"
                    )
            if name == topic and error != 0:
                if error == 3:
                    raise KafkaLogError(
                        f"topic {topic!r} does not exist on {self.bootstrap_servers}"
                    )
                raise KafkaLogError(f"topic {topic!r}: {_error_name(error)}")
        if not leaders:
            raise KafkaLogError(f"topic {topic!r} has no partitions on {self.bootstrap_servers}")
        return dict(sorted(leaders.items()))

    def list_offset(self, topic: str, partition: int, leader: int, timestamp: int) -> int:
        """ListOffsets v1: the earliest (-2) or latest (-1, high watermark) offset."""
        body = (
            struct.pack(">ii", -1, 1)
            + _string(topic)
            + struct.pack(">iiq", 1, partition, timestamp)
        )
        cur = self._broker(leader).request(_LIST_OFFSETS, _LIST_OFFSETS_VERSION, body)
        for _ in range(cur.array_len()):
            cur.string()
            for _ in range(cur.array_len()):
                index, error, _ts, offset = cur.int32(), cur.int16(), cur.int64(), cur.int64()
                if index == partition:
                    if error != 0:
                        raise KafkaLogError(
                            f"{topic}[{partition}]: ListOffsets failed: {_error_name(error)}"
                        )
                    return offset
        raise KafkaLogError(f"{topic}[{partition}]: no ListOffsets answer")

    def fetch(self, topic: str, partition: int, leader: int, offset: int) -> tuple[bytes, int]:
        """Fetch v4 (READ_UNCOMMITTED) from ``offset``: ``(raw record batches, high watermark)``."""
        body = (
            struct.pack(">iiiib", -1, 500, 1, self.fetch_max_bytes, _READ_UNCOMMITTED)
            + struct.pack(">i", 1)
            + _string(topic)
            + struct.pack(">iiqi", 1, partition, offset, self.fetch_max_bytes)
        )
        cur = self._broker(leader).request(_FETCH, _FETCH_VERSION, body)
        cur.int32()  # throttle
        for _ in range(cur.array_len()):
            cur.string()
            for _ in range(cur.array_len()):
                index, error = cur.int32(), cur.int16()
                high_watermark = cur.int64()
                cur.int64()  # last stable offset
                for _ in range(cur.array_len()):  # aborted transactions (none: read_uncommitted)
                    cur.int64()
                    cur.int64()
                records = cur.nullable_bytes() or b""
                if index == partition:
                    if error != 0:
                        raise KafkaLogError(
                            f"{topic}[{partition}] offset {offset}: Fetch failed: "
                            f"{_error_name(error)}"
                        )
                    return records, high_watermark
        raise KafkaLogError(f"{topic}[{partition}]: no Fetch answer")

    # -- transactions -----------------------------------------------------------------------

    def find_coordinator(self, transactional_id: str) -> _Connection:
        """A connection to the transaction coordinator of ``transactional_id`` (FindCoordinator
        v1, key type transaction)."""
        body = _string(transactional_id) + struct.pack(">b", _COORDINATOR_TRANSACTION)
        cur = self._bootstrap_connection().request(_FIND_COORDINATOR, 1, body)
        cur.int32()  # throttle
        error = cur.int16()
        message = cur.nullable_string()
        node_id, host, port = cur.int32(), cur.string(), cur.int32()
        if error != 0:
            raise EndTxnError(
                f"FindCoordinator({transactional_id!r}) failed: {_error_name(error)}"
                + (f" ({message})" if message else ""),
                code=error,
                name=_error_name(error),
            )
        key = -1000 - node_id  # coordinator connections kept apart from partition leaders'
        conn = self._connections.get(key)
        if conn is None or conn.address != f"{host}:{port}":
            conn = _Connection(host, port, self.timeout, self.client_id, self.security)
            self._connections[key] = conn
        return conn

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        retry_for_s: float = 10.0,
    ) -> None:
        """Complete the transaction of ``transactional_id`` opened by producer ``producer_id`` /
        ``producer_epoch``: commit (``commit=True``) or abort it (EndTxn v1).

        Retriable answers (coordinator moving or loading, concurrent transactions) are retried
        for up to ``retry_for_s``; any other refusal raises `EndTxnError` (``definitive``: the
        transaction cannot be completed this way). A broker that does not answer raises
        `KafkaLogError`.
        """
        body = (
            _string(transactional_id)
            + struct.pack(">qh", producer_id, producer_epoch)
            + struct.pack(">b", 1 if commit else 0)
        )
        deadline = time.monotonic() + retry_for_s
        delay = 0.05
        while True:
            try:
                conn = self.find_coordinator(transactional_id)
                cur = conn.request(_END_TXN, 1, body)
                cur.int32()  # throttle
                error = cur.int16()
                if error == 0:
                    return
                raise EndTxnError(
                    f"EndTxn({transactional_id!r}, producer {producer_id}/{producer_epoch}, "
                    f"{'commit' if commit else 'abort'}) refused: {_error_name(error)}",
                    code=error,
                    name=_error_name(error),
                )
            except EndTxnError as e:
                if e.definitive or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    # -- reading ----------------------------------------------------------------------------

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log start offset, high watermark)`` of one partition."""
        leader = self.partition_leaders(topic)[partition]
        return (
            self.list_offset(topic, partition, leader, _EARLIEST),
            self.list_offset(topic, partition, leader, _LATEST),
        )

    def iter_batches(
        self, topic: str, partition: int, start: int | None = None, end: int | None = None
    ) -> Iterator[RecordBatch]:
        """Every record batch of the partition from ``start`` (default: the log start) up to
        ``end`` (default: the end of the log when the read began), control batches included.

        Without ``end`` the read follows the log past the high watermark that ListOffsets
        reports until a fetch returns nothing new: some brokers (Tansu with S3 storage) report a
        high watermark behind records they already serve. Records of transactions still open
        there are left out by `committed_records`, so reading further never shows uncommitted
        data.
        """
        leaders = self.partition_leaders(topic)
        if partition not in leaders:
            raise KafkaLogError(f"topic {topic!r} has no partition {partition}")
        leader = leaders[partition]
        if start is None:
            start = self.list_offset(topic, partition, leader, _EARLIEST)
        follow = end is None
        if end is None:
            end = self.list_offset(topic, partition, leader, _LATEST)
        offset = start
        while follow or offset < end:
            data, high_watermark = self.fetch(topic, partition, leader, offset)
            progressed = False
            for batch in decode_record_batches(data, topic=topic, partition=partition):
                if batch.last_offset < offset:
                    continue
                if not follow and batch.base_offset >= end:
                    return
                yield batch
                offset = batch.last_offset + 1
                progressed = True
            if progressed:
                continue
            if offset >= max(end, high_watermark):
                return
            raise KafkaLogError(
                f"{topic}[{partition}]: no record batch at offset {offset} below the high "
                f"watermark {max(end, high_watermark)} (a batch larger than fetch_max_bytes="
                f"{self.fetch_max_bytes}?)"
            )

    def read_partition(
        self, topic: str, partition: int, start: int | None = None, end: int | None = None
    ) -> PartitionLog:
        """One partition's records between ``start`` and ``end``, transactions resolved."""
        batches = list(self.iter_batches(topic, partition, start, end))
        first = start if start is not None else (batches[0].base_offset if batches else 0)
        log = committed_records(batches, topic=topic, partition=partition, start_offset=first)
        if end is not None:
            log.end_offset = max(log.end_offset, end)
        return log

    def read_topic(
        self, topic: str, partitions: Sequence[int] | None = None
    ) -> dict[int, PartitionLog]:
        """Every partition (or the given ones) of ``topic``, transactions resolved."""
        chosen = list(self.partition_leaders(topic)) if partitions is None else list(partitions)
        return {p: self.read_partition(topic, p) for p in chosen}


def read_partition(
    bootstrap_servers: str,
    topic: str,
    partition: int,
    *,
    start: int | None = None,
    timeout: float = 10.0,
) -> PartitionLog:
    """One partition's records up to the end of its log, transactions resolved."""
    with KafkaLogClient(bootstrap_servers, timeout=timeout) as client:
        return client.read_partition(topic, partition, start)


def read_committed(
    bootstrap_servers: str,
    topic: str,
    *,
    partitions: Sequence[int] | None = None,
    timeout: float = 10.0,
) -> list[LogRecord]:
    """The records of committed transactions (and non-transactional records) in every partition
    of ``topic``, up to the end of each partition's log, ordered by partition then offset."""
    with KafkaLogClient(bootstrap_servers, timeout=timeout) as client:
        logs = client.read_topic(topic, partitions)
    return [record for p in sorted(logs) for record in logs[p].committed]
