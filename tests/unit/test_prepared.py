"""laminar.PreparedTxnState: the persisted prepared-transaction state and its codec."""

from __future__ import annotations

import base64
import copy
import importlib.util
import json
import pickle
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import laminar
from laminar import PreparedTxnState
from laminar.errors import InvalidStateEncoding, LaminarError

VECTORS_DIR = Path(__file__).parent.parent / "vectors"
VECTORS = json.loads((VECTORS_DIR / "prepared_txn_state.json").read_text("utf-8"))
VALID: list[dict[str, Any]] = VECTORS["valid"]
INVALID: list[dict[str, Any]] = VECTORS["invalid"]


def _load_reference_encoder() -> ModuleType:
    """The independent pure-Python implementation of the format that generated the vectors."""
    path = VECTORS_DIR / "gen_prepared_txn_state.py"
    spec = importlib.util.spec_from_file_location("gen_prepared_txn_state", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE = _load_reference_encoder()


def state_of(vector: dict[str, Any]) -> PreparedTxnState:
    tags = {tag: bytes.fromhex(value) for tag, value in vector["tagged_fields"]}
    return PreparedTxnState(**vector["fields"], tagged_fields=tags)


@pytest.mark.parametrize("vector", VALID, ids=[v["name"] for v in VALID])
def test_golden_valid_vectors(vector: dict[str, Any]) -> None:
    state = state_of(vector)
    assert state.to_bytes().hex() == vector["hex"]
    assert str(state) == vector["text"]
    assert PreparedTxnState.from_bytes(bytes.fromhex(vector["hex"])) == state
    parsed = PreparedTxnState.parse(vector["text"])
    assert parsed == state
    for name, value in vector["fields"].items():
        assert getattr(parsed, name) == value
    assert parsed.tagged_fields == {t: bytes.fromhex(v) for t, v in vector["tagged_fields"]}


@pytest.mark.parametrize("vector", INVALID, ids=[v["name"] for v in INVALID])
def test_golden_invalid_vectors(vector: dict[str, Any]) -> None:
    if "hex" in vector:
        with pytest.raises(InvalidStateEncoding) as info:
            PreparedTxnState.from_bytes(bytes.fromhex(vector["hex"]))
    else:
        with pytest.raises(InvalidStateEncoding) as info:
            PreparedTxnState.parse(vector["text"])
    message = str(info.value)
    assert vector["message_contains"] in message
    assert f"({vector['error']})" in message
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, LaminarError)


def test_vectors_file_is_what_the_reference_generator_writes() -> None:
    assert REFERENCE.build() == VECTORS


def test_newer_version_says_upgrade() -> None:
    vector = next(v for v in INVALID if v["name"] == "newer_version_2")
    with pytest.raises(InvalidStateEncoding, match=r"newer laminar \(format version 2\)"):
        PreparedTxnState.from_bytes(bytes.fromhex(vector["hex"]))


def test_defaults_and_attributes() -> None:
    s = PreparedTxnState("orders-0", 3)
    assert (s.transactional_id, s.epoch, s.attempt) == ("orders-0", 3, 0)
    assert (s.producer_id, s.producer_epoch) == (-1, -1)
    assert (s.record_count, s.created_at_ms, s.tagged_fields) == (0, 0, {})
    assert PreparedTxnState(None, 0).transactional_id is None


def test_is_immutable_and_tagged_fields_are_a_copy() -> None:
    s = PreparedTxnState("a", 1, tagged_fields={5: b"x"})
    with pytest.raises(AttributeError):
        s.epoch = 2  # type: ignore[misc]
    s.tagged_fields[6] = b"y"
    assert s.tagged_fields == {5: b"x"}


def test_equality_and_hash_by_value() -> None:
    a = PreparedTxnState("a", 1, tagged_fields={1: b"x"})
    b = PreparedTxnState("a", 1, tagged_fields={1: b"x"})
    assert a == b
    assert hash(a) == hash(b)
    assert a != a.replace(epoch=2)
    assert a != a.replace(tagged_fields={1: b"y"})
    assert len({a, b, a.replace(attempt=1)}) == 2
    assert a != str(a)


def test_replace() -> None:
    a = PreparedTxnState("a", 1, producer_id=5)
    b = a.replace(epoch=2, transactional_id=None, record_count=10)
    assert (b.transactional_id, b.epoch, b.producer_id, b.record_count) == (None, 2, 5, 10)
    assert a.epoch == 1
    assert a.replace() == a
    with pytest.raises(TypeError, match="unexpected keyword argument 'epohc'"):
        a.replace(epohc=3)  # type: ignore[call-arg]


def test_repr_evaluates_back() -> None:
    s = PreparedTxnState("it's-ü", -5, 1, 2, 3, 4, 5, tagged_fields={9: b"\x00'"})
    assert repr(s).startswith("PreparedTxnState(transactional_id=")
    assert eval(repr(s), {"PreparedTxnState": PreparedTxnState}) == s
    assert "tagged_fields" not in repr(PreparedTxnState(None, 0))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_round_trip(protocol: int) -> None:
    s = PreparedTxnState("orders", 7, producer_id=1, tagged_fields={300: b"redo"})
    assert pickle.loads(pickle.dumps(s, protocol=protocol)) == s
    assert copy.deepcopy(s) == s


def test_a_100_byte_id_fits_varchar_255() -> None:
    longest = PreparedTxnState(
        "x" * 100,
        -(2**63),
        2**64 - 1,
        -(2**63),
        -(2**31),
        2**64 - 1,
        -(2**63),
    )
    assert len(str(longest)) <= 255


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"epoch": 2**63}, OverflowError),
        ({"attempt": -1}, OverflowError),
        ({"producer_epoch": 2**31}, OverflowError),
        ({"record_count": 2**64}, OverflowError),
        ({"tagged_fields": {-1: b""}}, ValueError),
        ({"tagged_fields": {2**32: b""}}, ValueError),
        ({"tagged_fields": {1: "text"}}, TypeError),
        ({"tagged_fields": [(1, b"")]}, TypeError),
    ],
)
def test_out_of_range_fields_are_refused(kwargs: dict[str, Any], error: type[Exception]) -> None:
    fields: dict[str, Any] = {"transactional_id": "a", "epoch": 0, **kwargs}
    with pytest.raises(error):
        PreparedTxnState(**fields)


def test_wrong_input_types() -> None:
    with pytest.raises(TypeError):
        PreparedTxnState.from_bytes("lm1.AAAA")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        PreparedTxnState.parse(b"lm1.AAAA")  # type: ignore[arg-type]


def test_exported_from_the_package() -> None:
    assert "PreparedTxnState" in laminar.__all__


# --- property tests ------------------------------------------------------------------------------

i64 = st.integers(-(2**63), 2**63 - 1)
u64 = st.integers(0, 2**64 - 1)
states = st.builds(
    PreparedTxnState,
    transactional_id=st.none() | st.text(max_size=40),
    epoch=i64,
    attempt=u64,
    producer_id=i64,
    producer_epoch=st.integers(-(2**31), 2**31 - 1),
    record_count=u64,
    created_at_ms=i64,
    tagged_fields=st.dictionaries(st.integers(0, 2**32 - 1), st.binary(max_size=30), max_size=4),
)


@given(states)
def test_round_trips_are_canonical(state: PreparedTxnState) -> None:
    data = state.to_bytes()
    assert PreparedTxnState.from_bytes(data) == state
    assert PreparedTxnState.from_bytes(data).to_bytes() == data
    text = str(state)
    assert text.startswith("lm1.")
    assert "=" not in text
    assert PreparedTxnState.parse(text) == state
    assert str(PreparedTxnState.parse(text)) == text
    assert text == "lm1." + base64.urlsafe_b64encode(data).decode().rstrip("=")


@given(states)
def test_encoding_matches_the_independent_reference_encoder(state: PreparedTxnState) -> None:
    fields = {
        name: getattr(state, name)
        for name in (
            "transactional_id",
            "epoch",
            "attempt",
            "producer_id",
            "producer_epoch",
            "record_count",
            "created_at_ms",
        )
    }
    tags = sorted(state.tagged_fields.items())
    expected = REFERENCE.sealed(1, REFERENCE.body(fields, tags))
    assert state.to_bytes() == expected
    assert str(state) == REFERENCE.text(expected)


@given(st.binary(max_size=120))
def test_arbitrary_bytes_decode_or_raise_invalid_state_encoding(data: bytes) -> None:
    for candidate in (data, b"LM\x01" + data):
        try:
            state = PreparedTxnState.from_bytes(candidate)
        except InvalidStateEncoding:
            continue
        assert state.to_bytes() == candidate


@given(st.text(max_size=80))
def test_arbitrary_text_parses_or_raises_invalid_state_encoding(text: str) -> None:
    for candidate in (text, "lm1." + text):
        try:
            state = PreparedTxnState.parse(candidate)
        except InvalidStateEncoding:
            continue
        assert str(state) == candidate


@given(states, st.data())
def test_bit_flips_and_truncations_are_rejected(
    state: PreparedTxnState, data: st.DataObject
) -> None:
    raw = bytearray(state.to_bytes())
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(InvalidStateEncoding):
        PreparedTxnState.from_bytes(bytes(raw))
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(InvalidStateEncoding):
        PreparedTxnState.from_bytes(state.to_bytes()[:cut])
