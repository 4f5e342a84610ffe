"""CRC-32C from the core against the standard check values (RFC 3720 §B.4 and the CRC catalogue)."""

from __future__ import annotations

import pytest

from laminar._core import crc32c


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0x00000000),
        (b"123456789", 0xE3069283),
        (bytes(32), 0x8A9136AA),
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
    ],
)
def test_known_vectors(data: bytes, expected: int) -> None:
    assert crc32c(data) == expected


def _reference_crc32c(data: bytes) -> int:
    """Bit-by-bit CRC-32C (reflected polynomial 0x82F63B78): slow, obviously right."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_large_input_path_matches_the_reference() -> None:
    data = bytes((i * 7 + 3) % 256 for i in range(64 * 1024))  # takes the GIL-released path
    assert crc32c(data) == _reference_crc32c(data)
    assert crc32c(data[:1000]) == _reference_crc32c(data[:1000])
