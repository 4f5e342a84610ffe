"""The redo codec and the refusal bridge as Python sees them (pure). The protocol's decisions
themselves are tested in Rust beside their rules (docs/engine.md §8): the Python side only
performs them."""

from __future__ import annotations

import pytest

from laminar import (
    ConfigError,
    FatalError,
    FencedError,
    IllegalStateError,
    InDoubtError,
    InvalidStateEncoding,
)
from laminar._core import decode_redo, encode_redo
from laminar.protocol.recovery import refusal_error


def test_refusals_map_onto_the_error_tree() -> None:
    corrupt = refusal_error("corrupt_decision", "the row does not decode (bad crc)", sink_id="t")
    assert isinstance(corrupt, InvalidStateEncoding)
    assert "bad crc" in str(corrupt)
    assert isinstance(refusal_error("epoch_backwards", "older"), ConfigError)
    assert isinstance(refusal_error("other_epoch_while_incomplete", "replay"), FatalError)
    assert isinstance(refusal_error("fenced", "generation 2"), FencedError)
    assert isinstance(refusal_error("awaiting_replay", "replay", epoch=4), InDoubtError)
    assert isinstance(refusal_error("illegal_transition", "final"), IllegalStateError)
    assert isinstance(refusal_error(None, None), FatalError)


def test_redo_blobs_round_trip_and_reject_corruption() -> None:
    values = [b'{"id":1}', None, b"x" * 1000]
    keys = [b"1", None, b"3"]
    (blob,) = encode_redo(values, keys)
    assert decode_redo(blob) == (values, keys)
    assert decode_redo(encode_redo([b"v"])[0]) == ([b"v"], [None])
    with pytest.raises(InvalidStateEncoding, match="redo"):
        decode_redo(blob[:-1] + bytes([blob[-1] ^ 1]))
