"""laminar.kafka.log on hand-made record batches: decoding (v2, every codec, control batches,
CRC) and the transaction filter (which records a replay of the markers keeps as committed).

The batches are built here by an encoder written independently of the reader, from the Kafka
protocol's description of message format v2; the compressed bodies come from pyarrow's codecs
(zstd and LZ4 frames, raw snappy) and the standard library's gzip.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Sequence

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from laminar._core import crc32c
from laminar.kafka.log import (
    Compression,
    ControlType,
    KafkaLogError,
    LogRecord,
    committed_records,
    decode_record_batches,
)

# -- an independent encoder ------------------------------------------------------------------------


def zigzag(n: int) -> bytes:
    value = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varbytes(data: bytes | None) -> bytes:
    return zigzag(-1) if data is None else zigzag(len(data)) + data


def record(
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    timestamp_delta: int = 0,
) -> bytes:
    body = (
        b"\x00"
        + zigzag(timestamp_delta)
        + zigzag(offset_delta)
        + varbytes(key)
        + varbytes(value)
        + zigzag(len(headers))
        + b"".join(varbytes(k) + varbytes(v) for k, v in headers)
    )
    return zigzag(len(body)) + body


def batch(
    base_offset: int,
    records: Sequence[bytes],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    transactional: bool = False,
    control: bool = False,
    codec: int = 0,
    base_timestamp: int = 1_700_000_000_000,
    last_offset_delta: int | None = None,
    corrupt_crc: bool = False,
    magic: int = 2,
) -> bytes:
    payload = b"".join(records)
    if codec == 1:
        payload = gzip.compress(payload)
    elif codec in _PYARROW_CODECS:
        payload = pa.compress(payload, codec=_PYARROW_CODECS[codec], asbytes=True)
    attributes = codec | (0x10 if transactional else 0) | (0x20 if control else 0)
    if last_offset_delta is None:
        last_offset_delta = len(records) - 1
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_offset_delta,
            base_timestamp,
            base_timestamp,
            producer_id,
            producer_epoch,
            0,
            len(records),
        )
        + payload
    )
    crc = crc32c(after_crc) ^ (1 if corrupt_crc else 0)
    rest = struct.pack(">ibI", 0, magic, crc) + after_crc
    return struct.pack(">qi", base_offset, len(rest)) + rest


_PYARROW_CODECS = {2: "snappy", 3: "lz4", 4: "zstd"}


def marker(offset: int, kind: ControlType, producer_id: int, producer_epoch: int) -> bytes:
    key = struct.pack(">hh", 0, int(kind))
    value = struct.pack(">hi", 0, 0)
    return batch(
        offset,
        [record(0, key, value)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def txn(offset: int, values: Sequence[bytes], pid: int, epoch: int) -> bytes:
    return batch(
        offset,
        [record(i, None, v) for i, v in enumerate(values)],
        producer_id=pid,
        producer_epoch=epoch,
        transactional=True,
    )


def values_of(records: Sequence[object]) -> list[bytes | None]:
    return [r.value for r in records]  # type: ignore[attr-defined]


# -- decoding ----------------------------------------------------------------------------------


def test_decodes_records_keys_headers_and_offsets() -> None:
    data = batch(
        40,
        [
            record(0, b"k1", b"v1", [(b"laminar.sink", b"s"), (b"laminar.epoch", b"7")]),
            record(1, None, None, [(b"h", None)], timestamp_delta=5),
        ],
        producer_id=9,
        producer_epoch=2,
    )
    (decoded,) = decode_record_batches(data, topic="t", partition=3)
    assert (decoded.base_offset, decoded.last_offset) == (40, 41)
    assert (decoded.producer_id, decoded.producer_epoch) == (9, 2)
    assert decoded.compression is Compression.NONE
    assert not decoded.is_control
    first, second = decoded.records
    assert (first.topic, first.partition, first.offset) == ("t", 3, 40)
    assert (first.key, first.value) == (b"k1", b"v1")
    assert first.header("laminar.epoch") == b"7"
    assert first.header("missing") is None
    assert (second.offset, second.key, second.value) == (41, None, None)
    assert second.headers == (("h", None),)
    assert second.timestamp_ms == first.timestamp_ms + 5


@pytest.mark.parametrize("codec", list(Compression)[1:], ids=lambda c: c.name.lower())
def test_every_codec_decodes_like_uncompressed_batches(codec: Compression) -> None:
    records = [record(i, None, f"value-{i}".encode(), [(b"h", b"x")]) for i in range(50)]
    plain = next(iter(decode_record_batches(batch(0, records))))
    packed = next(iter(decode_record_batches(batch(0, records, codec=int(codec)))))
    assert packed.compression is codec
    assert values_of(packed.records) == values_of(plain.records)
    assert packed.records == plain.records


def test_codecs_mix_within_one_partition() -> None:
    data = b"".join(
        txn_codec(i * 2, [f"c{i}".encode()], codec=int(c))
        + marker(i * 2 + 1, ControlType.COMMIT, 1, 0)
        for i, c in enumerate(Compression)
    )
    log = committed_records(decode_record_batches(data))
    assert values_of(log.committed) == [b"c0", b"c1", b"c2", b"c3", b"c4"]


def txn_codec(offset: int, values: Sequence[bytes], *, codec: int) -> bytes:
    return batch(
        offset,
        [record(i, None, v) for i, v in enumerate(values)],
        producer_id=1,
        producer_epoch=0,
        transactional=True,
        codec=codec,
    )


def test_a_corrupt_compressed_body_is_a_clear_error() -> None:
    good = bytearray(batch(0, [record(0, None, b"x" * 100)], codec=4))
    good[-5:] = b"\xff" * 5
    with pytest.raises(KafkaLogError, match="zstd batch does not decode"):
        list(decode_record_batches(bytes(good), verify_crc=False))


def test_log_records_compare_hash_and_show_like_values() -> None:
    (first,) = decode_record_batches(batch(3, [record(0, b"k", b"v", [(b"a", b"1")])]), topic="t")
    (again,) = decode_record_batches(batch(3, [record(0, b"k", b"v", [(b"a", b"1")])]), topic="t")
    one, two = first.records[0], again.records[0]
    assert one == two
    assert hash(one) == hash(two)
    assert one is not two
    assert len({one, two}) == 1
    assert "offset=3" in repr(one)
    assert "value=b'v'" in repr(one)
    built = LogRecord(
        topic="t",
        partition=0,
        offset=3,
        timestamp_ms=one.timestamp_ms,
        key=b"k",
        value=b"v",
        headers=(("a", b"1"),),
        producer_id=-1,
        producer_epoch=-1,
        transactional=False,
    )
    assert built == one


def test_control_batches_carry_commit_and_abort() -> None:
    data = marker(5, ControlType.COMMIT, 1, 0) + marker(6, ControlType.ABORT, 1, 0)
    commit, abort = decode_record_batches(data)
    assert commit.control is ControlType.COMMIT
    assert commit.is_control
    assert commit.records == ()
    assert abort.control is ControlType.ABORT


def test_a_bad_crc_is_an_error_unless_unchecked() -> None:
    data = batch(0, [record(0, None, b"x")], corrupt_crc=True)
    with pytest.raises(KafkaLogError, match="CRC mismatch"):
        list(decode_record_batches(data))
    assert len(list(decode_record_batches(data, verify_crc=False))) == 1


def test_old_message_formats_are_refused() -> None:
    with pytest.raises(KafkaLogError, match="message format v1 is not supported"):
        list(decode_record_batches(batch(0, [record(0, None, b"x")], magic=1)))


def test_a_partial_trailing_batch_is_ignored_and_garbage_is_an_error() -> None:
    whole = batch(0, [record(0, None, b"a")])
    cut = batch(1, [record(0, None, b"b")])[:-3]
    assert [b.base_offset for b in decode_record_batches(whole + cut)] == [0]
    bad = bytearray(batch(0, [record(0, None, b"a")]))
    bad[-8:] = b"\xff" * 8  # destroy the record body, fix nothing: CRC off
    with pytest.raises(KafkaLogError):
        list(decode_record_batches(bytes(bad)))
    with pytest.raises(KafkaLogError):
        list(decode_record_batches(bytes(bad), verify_crc=False))


# -- transaction resolution ----------------------------------------------------------------------


def resolve(*parts: bytes, start: int = 0):  # type: ignore[no-untyped-def]
    return committed_records(decode_record_batches(b"".join(parts)), start_offset=start)


def test_three_transactions_like_tansu_writes_them() -> None:
    """Two records per transaction, then a control record: markers at offsets 2, 5 and 8."""
    log = resolve(
        txn(0, [b"a", b"b"], 1, 0),
        marker(2, ControlType.COMMIT, 1, 0),
        txn(3, [b"c", b"d"], 1, 0),
        marker(5, ControlType.ABORT, 1, 0),
        txn(6, [b"e", b"f"], 1, 0),
        marker(8, ControlType.COMMIT, 1, 0),
    )
    assert values_of(log.committed) == [b"a", b"b", b"e", b"f"]
    assert values_of(log.aborted) == [b"c", b"d"]
    assert (log.commit_markers, log.abort_markers, log.open) == ([2, 8], [5], [])
    assert log.end_offset == 9


def test_open_transactions_are_not_committed() -> None:
    log = resolve(txn(0, [b"a"], 1, 0), marker(1, ControlType.COMMIT, 1, 0), txn(2, [b"b"], 1, 0))
    assert values_of(log.committed) == [b"a"]
    assert values_of(log.open) == [b"b"]


def test_interleaved_producers_are_resolved_independently() -> None:
    log = resolve(
        txn(0, [b"p1-a"], 1, 0),
        txn(1, [b"p2-a"], 2, 0),
        marker(2, ControlType.ABORT, 2, 0),
        txn(3, [b"p1-b"], 1, 0),
        marker(4, ControlType.COMMIT, 1, 0),
        batch(5, [record(0, None, b"plain")]),
    )
    assert values_of(log.committed) == [b"p1-a", b"p1-b", b"plain"]
    assert values_of(log.aborted) == [b"p2-a"]


def test_a_fenced_producers_records_never_count_as_committed() -> None:
    """Same producer id, older epoch left pending (a zombie), newer epoch commits."""
    log = resolve(
        txn(0, [b"zombie"], 7, 0),
        txn(1, [b"successor"], 7, 1),
        marker(2, ControlType.COMMIT, 7, 1),
    )
    assert values_of(log.committed) == [b"successor"]
    assert values_of(log.aborted) == [b"zombie"]


def test_a_marker_with_a_bumped_epoch_ends_the_previous_epochs_transaction() -> None:
    """Kafka's transactions v2 (KIP-890) and fencing aborts write markers with epoch + 1."""
    log = resolve(
        txn(0, [b"v2-a"], 3, 4),
        marker(1, ControlType.COMMIT, 3, 5),
        txn(2, [b"fenced"], 3, 5),
        marker(3, ControlType.ABORT, 3, 6),
    )
    assert values_of(log.committed) == [b"v2-a"]
    assert values_of(log.aborted) == [b"fenced"]


def test_records_before_the_start_offset_are_left_out() -> None:
    log = resolve(txn(0, [b"a", b"b", b"c"], 1, 0), marker(3, ControlType.COMMIT, 1, 0), start=1)
    assert values_of(log.committed) == [b"b", b"c"]


# -- SASL SCRAM (RFC 7677's example exchange) ----------------------------------------------------


def test_scram_sha_256_follows_rfc_7677() -> None:
    from laminar.kafka.conn import scram_exchange

    nonce = "rOprNGfwEbeRWgbNEkqO"
    server = f"{nonce}%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    sent: list[bytes] = []
    answers = iter(
        [
            f"r={server},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode(),
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
        ]
    )

    def step(message: bytes) -> bytes:
        sent.append(message)
        return next(answers)

    scram_exchange("SCRAM-SHA-256", "user", "pencil", step, nonce)
    assert sent == [
        f"n,,n=user,r={nonce}".encode(),
        f"c=biws,r={server},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode(),
    ]
    answers = iter([f"r={server},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode(), b"v=forged"])
    with pytest.raises(ValueError, match="signature does not verify"):
        scram_exchange("SCRAM-SHA-256", "user", "pencil", lambda m: next(answers), nonce)
