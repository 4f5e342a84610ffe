"""The pure-Python record batch decoder and marker replay that `laminar.kafka.log` used before
the wire protocol moved into the Rust core — kept here, in the tests only, as an independent
reference: the flaky-read diagnosis (`test_kafka_sink`) and the decode-rate benchmark
(`benches/bench_kafka_log.py`) compare the core with it. Extended with pyarrow's codecs for
snappy (raw or Xerial-framed), lz4 and zstd so that it reads every topic the tests write.
"""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from laminar._core import crc32c
from laminar.kafka.log import Compression, ControlType, KafkaLogError


@dataclass(frozen=True)
class LogRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    producer_epoch: int
    transactional: bool

    def header(self, name: str) -> bytes | None:
        for key, value in reversed(self.headers):
            if key == name:
                return value
        return None


@dataclass(frozen=True)
class RecordBatch:
    topic: str
    partition: int
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    compression: Compression
    transactional: bool
    records: tuple[LogRecord, ...]
    control: ControlType | None = None


@dataclass
class PartitionLog:
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    committed: list[LogRecord] = field(default_factory=list)
    aborted: list[LogRecord] = field(default_factory=list)
    open: list[LogRecord] = field(default_factory=list)
    commit_markers: list[int] = field(default_factory=list)
    abort_markers: list[int] = field(default_factory=list)


_XERIAL = b"\x82SNAPPY\x00"


def _decompress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.SNAPPY and data.startswith(_XERIAL):
        out, pos = [], 16
        while pos < len(data):
            (size,) = struct.unpack_from(">i", data, pos)
            out.append(_snappy(data[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        return b"".join(out)
    if codec is Compression.SNAPPY:
        return _snappy(data)
    name = {Compression.LZ4: "lz4", Compression.ZSTD: "zstd"}[codec]
    return _stream(name, data)


def _snappy(block: bytes) -> bytes:
    # the uncompressed length is the block's leading varint
    size = shift = pos = 0
    while True:
        byte = block[pos]
        size |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            break
        shift += 7
    return pa.decompress(block, decompressed_size=size, codec="snappy", asbytes=True)


def _stream(name: str, data: bytes) -> bytes:
    with pa.input_stream(pa.py_buffer(data), compression=name) as stream:
        return stream.read()


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
        cur = _Cursor(_decompress(codec, data[cur.pos : end]))
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
