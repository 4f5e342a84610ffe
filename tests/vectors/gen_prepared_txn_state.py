"""Writes ``prepared_txn_state.json``, the golden vectors of the PreparedTxnState format.

This is a second, independent implementation of the format in plain Python (its own LEB128,
zigzag and CRC32C, nothing from laminar), written from docs/formats.md §1. The Rust and Python
test suites check laminar's codec against its output, so an error in one implementation shows up
as a mismatch instead of being round-tripped away. Run it only to add vectors, then review the diff:

    python tests/vectors/gen_prepared_txn_state.py
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("prepared_txn_state.json")

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
U32_MAX, U64_MAX = 2**32 - 1, 2**64 - 1


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), reflected polynomial 0x82F63B78, bit by bit."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C


def uvarint(value: int) -> bytes:
    assert value >= 0
    out = bytearray()
    while True:
        group = value & 0x7F
        value >>= 7
        if value:
            out.append(group | 0x80)
        else:
            out.append(group)
            return bytes(out)


def zigzag(value: int, bits: int) -> int:
    assert -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def compact_nullable_string(value: str | None) -> bytes:
    if value is None:
        return uvarint(0)
    raw = value.encode("utf-8")
    return uvarint(len(raw) + 1) + raw


def body(f: dict[str, Any], tags: list[tuple[int, bytes]]) -> bytes:
    out = compact_nullable_string(f["transactional_id"])
    out += uvarint(zigzag(f["epoch"], 64))
    out += uvarint(f["attempt"])
    out += uvarint(zigzag(f["producer_id"], 64))
    out += uvarint(zigzag(f["producer_epoch"], 32))
    out += uvarint(f["record_count"])
    out += uvarint(zigzag(f["created_at_ms"], 64))
    out += uvarint(len(tags))
    for tag, value in tags:
        out += uvarint(tag) + uvarint(len(value)) + value
    return out


def seal(payload: bytes) -> bytes:
    """Appends the big-endian CRC-32C of everything before it."""
    return payload + crc32c(payload).to_bytes(4, "big")


def text(binary: bytes) -> str:
    return "lm1." + base64.urlsafe_b64encode(binary).decode("ascii").rstrip("=")


def fields(
    transactional_id: str | None = "sink-0",
    epoch: int = 0,
    attempt: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    record_count: int = 0,
    created_at_ms: int = 0,
) -> dict[str, Any]:
    return {
        "transactional_id": transactional_id,
        "epoch": epoch,
        "attempt": attempt,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "record_count": record_count,
        "created_at_ms": created_at_ms,
    }


VALID: list[tuple[str, dict[str, Any], list[tuple[int, bytes]]]] = [
    ("null_transactional_id", fields(transactional_id=None), []),
    ("empty_transactional_id", fields(transactional_id=""), []),
    (
        "typical",
        fields(
            "orders-sink-0",
            epoch=42,
            attempt=1,
            producer_id=1000,
            producer_epoch=3,
            record_count=5000,
            created_at_ms=1_700_000_000_000,
        ),
        [],
    ),
    ("unicode_transactional_id", fields("zürich-🚀-订单", epoch=7), []),
    ("id_100_bytes", fields("x" * 100, epoch=1), []),
    (
        "id_100_bytes_every_field_at_its_longest",
        fields(
            "y" * 100,
            epoch=I64_MIN,
            attempt=U64_MAX,
            producer_id=I64_MIN,
            producer_epoch=I32_MIN,
            record_count=U64_MAX,
            created_at_ms=I64_MIN,
        ),
        [],
    ),
    ("unknown_producer", fields(producer_id=-1, producer_epoch=-1), []),
    ("negative_producer_values", fields(producer_id=-2, producer_epoch=-32768), []),
    ("epoch_63_one_byte_zigzag", fields(epoch=63), []),
    ("epoch_64_two_byte_zigzag", fields(epoch=64), []),
    ("epoch_minus_64_one_byte_zigzag", fields(epoch=-64), []),
    ("epoch_minus_65_two_byte_zigzag", fields(epoch=-65), []),
    ("attempt_127_one_byte", fields(attempt=127), []),
    ("attempt_128_two_bytes", fields(attempt=128), []),
    ("epoch_2_pow_31", fields(epoch=2**31, record_count=2**31), []),
    ("epoch_i64_max", fields(epoch=I64_MAX, created_at_ms=I64_MAX), []),
    ("producer_epoch_i32_bounds", fields(producer_epoch=I32_MAX, producer_id=I64_MAX), []),
    ("record_count_u64_max", fields(record_count=U64_MAX, attempt=2**32), []),
    ("negative_created_at", fields(created_at_ms=-1), []),
    ("unknown_tag_0_empty", fields(epoch=5), [(0, b"")]),
    (
        "unknown_tags_preserved",
        fields("kafka-pg-7", epoch=9, producer_id=4242, producer_epoch=0, record_count=12),
        [(0, b"\x01\x02\x03"), (1, b"redo://laminar.redo/9"), (300, bytes(range(200)))],
    ),
    ("unknown_tag_u32_max", fields(epoch=1), [(7, b"a"), (U32_MAX, b"\xff")]),
]

BASE = fields("t", epoch=1)


def raw_body_with(**overrides: bytes) -> bytes:
    """A v1 body whose named fields are replaced by the given raw bytes (for malformed varints)."""
    parts = {
        "transactional_id": compact_nullable_string(BASE["transactional_id"]),
        "epoch": uvarint(zigzag(BASE["epoch"], 64)),
        "attempt": uvarint(0),
        "producer_id": uvarint(zigzag(-1, 64)),
        "producer_epoch": uvarint(zigzag(-1, 32)),
        "record_count": uvarint(0),
        "created_at_ms": uvarint(0),
        "tags": uvarint(0),
    }
    parts.update(overrides)
    return b"".join(parts.values())


def sealed(version: int, payload: bytes) -> bytes:
    return seal(b"LM" + bytes([version]) + payload)


GOOD = sealed(1, body(BASE, []))
FLIPPED_BODY = bytearray(GOOD)
FLIPPED_BODY[5] ^= 0x01
FLIPPED_CRC = bytearray(GOOD)
FLIPPED_CRC[-1] ^= 0x80

INVALID_BINARY: list[tuple[str, bytes, str, str]] = [
    ("empty", b"", "empty", "empty"),
    ("bad_magic", b"XY\x01" + GOOD[3:], "bad_magic", 'magic bytes "LM"'),
    ("magic_lowercase", b"lm\x01" + GOOD[3:], "bad_magic", "found 0x6c6d"),
    ("only_L", b"L", "truncated", "before the magic bytes"),
    ("only_magic", b"LM", "truncated", "before the format version"),
    ("no_room_for_crc", b"LM\x01\x00\x00", "truncated", "before the checksum"),
    ("newer_version_2", sealed(2, body(BASE, [])), "newer_version", "format version 2"),
    ("newer_version_255", sealed(255, b""), "newer_version", "upgrade laminar"),
    ("version_0", sealed(0, body(BASE, [])), "unknown_version", "version 0"),
    ("crc_byte_flipped", bytes(FLIPPED_CRC), "bad_crc", "checksum mismatch"),
    ("body_bit_flipped", bytes(FLIPPED_BODY), "bad_crc", "corrupt or truncated"),
    ("cut_before_crc", GOOD[:-1], "bad_crc", "checksum mismatch"),
    (
        "string_longer_than_input",
        sealed(1, uvarint(5) + b"ab"),
        "truncated",
        "transactional_id",
    ),
    ("ends_inside_varint", sealed(1, uvarint(2) + b"t" + b"\x80"), "truncated", "epoch"),
    ("fields_missing", sealed(1, uvarint(0)), "truncated", "epoch"),
    ("tagged_fields_missing", sealed(1, raw_body_with(tags=b"")), "truncated", "tagged field"),
    (
        "tagged_value_truncated",
        sealed(1, raw_body_with(tags=uvarint(1) + uvarint(3) + uvarint(10) + b"ab")),
        "truncated",
        "tagged field",
    ),
    (
        "trailing_byte_after_tagged_fields",
        sealed(1, body(BASE, []) + b"\x00"),
        "trailing_bytes",
        "1 unexpected byte",
    ),
    (
        "overlong_epoch_zero",
        sealed(1, raw_body_with(epoch=b"\x80\x00")),
        "overlong_varint",
        "epoch",
    ),
    (
        "overlong_string_length",
        sealed(1, raw_body_with(transactional_id=b"\x82\x00t")),
        "overlong_varint",
        "transactional_id",
    ),
    (
        "overlong_tag_count",
        sealed(1, raw_body_with(tags=b"\x80\x80\x00")),
        "overlong_varint",
        "tagged field count",
    ),
    (
        "attempt_11_bytes",
        sealed(1, raw_body_with(attempt=b"\xff" * 10 + b"\x01")),
        "varint_overflow",
        "attempt",
    ),
    (
        "record_count_above_u64",
        sealed(1, raw_body_with(record_count=b"\xff" * 9 + b"\x02")),
        "varint_overflow",
        "record_count",
    ),
    (
        "producer_epoch_above_32_bits",
        sealed(1, raw_body_with(producer_epoch=b"\xff\xff\xff\xff\x10")),
        "varint_overflow",
        "producer_epoch",
    ),
    (
        "invalid_utf8_id",
        sealed(1, raw_body_with(transactional_id=uvarint(3) + b"\xff\xfe")),
        "invalid_utf8",
        "UTF-8",
    ),
    (
        "tags_descending",
        sealed(1, raw_body_with(tags=uvarint(2) + b"\x02\x00" + b"\x01\x00")),
        "tags_not_ascending",
        "strictly ascending",
    ),
    (
        "tags_duplicated",
        sealed(1, raw_body_with(tags=uvarint(2) + b"\x01\x00" + b"\x01\x00")),
        "tags_not_ascending",
        "strictly ascending",
    ),
    (
        "tag_above_u32",
        sealed(1, raw_body_with(tags=uvarint(1) + b"\xff\xff\xff\xff\x1f" + b"\x00")),
        "varint_overflow",
        "tag",
    ),
]

GOOD_TEXT = text(GOOD)

INVALID_TEXT: list[tuple[str, str, str, str]] = [
    ("empty_text", "", "empty", "empty"),
    ("no_prefix", GOOD_TEXT[4:], "bad_prefix", 'must start with "lm1."'),
    ("uppercase_prefix", "LM1." + GOOD_TEXT[4:], "bad_prefix", "lm1."),
    ("prefix_without_dot", "lm1" + GOOD_TEXT[4:], "bad_prefix", "lm1."),
    ("version_0_prefix", "lm0." + GOOD_TEXT[4:], "bad_prefix", "lm1."),
    ("newer_text_format", "lm2." + GOOD_TEXT[4:], "newer_text_version", "upgrade laminar"),
    ("padding", GOOD_TEXT + "=", "bad_base64", "base64"),
    ("standard_alphabet", "lm1.+/+/", "bad_base64", "offset 4"),
    ("whitespace", GOOD_TEXT + " ", "bad_base64", "base64"),
    ("length_not_whole_bytes", "lm1.TE0BA", "bad_base64", "whole bytes"),
    ("nonzero_trailing_bits", "lm1.TE1", "bad_base64", "trailing bits"),
    ("prefix_only", "lm1.", "empty", "empty"),
    ("good_base64_bad_crc", text(bytes(FLIPPED_CRC)), "bad_crc", "checksum mismatch"),
    ("good_base64_newer_version", text(sealed(3, b"")), "newer_version", "format version 3"),
]


def build() -> dict[str, Any]:
    """The golden-vector document."""
    valid = []
    for name, f, tags in VALID:
        binary = sealed(1, body(f, tags))
        valid.append(
            {
                "name": name,
                "fields": f,
                "tagged_fields": [[tag, value.hex()] for tag, value in tags],
                "hex": binary.hex(),
                "text": text(binary),
            }
        )
    invalid = [
        {"name": n, "hex": b.hex(), "error": kind, "message_contains": m}
        for n, b, kind, m in INVALID_BINARY
    ] + [
        {"name": n, "text": t, "error": kind, "message_contains": m}
        for n, t, kind, m in INVALID_TEXT
    ]
    return {
        "description": (
            "Golden vectors of the PreparedTxnState format (docs/formats.md §1), generated by "
            "gen_prepared_txn_state.py, an implementation independent of laminar's codec. "
            "'valid': fields + tagged_fields ([tag, hex value] ascending) encode to 'hex' "
            "(binary) and 'text'; decoding either gives the fields back. 'invalid': 'hex' "
            "(binary) or 'text' must fail with InvalidStateEncoding of kind 'error' whose "
            "message contains 'message_contains'."
        ),
        "valid": valid,
        "invalid": invalid,
    }


def main() -> None:
    OUT.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
