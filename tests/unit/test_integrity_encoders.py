"""Data integrity of the encoders as Python sees them (issue 11): nulls stay nulls at every
position — the first row of a ~1 MiB chunk included — in keys and values, JSON and raw, through
``encode_kafka`` and ``iter_kafka``; out-of-range times are refused by every encoder alike;
float16 keeps its shortest text. (The Rust property tests walk every chunk boundary with small
chunks; these go through the bindings with the real chunk size.)"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import laminar
from laminar import DataError

CHUNK = 1 << 20


def both(data: Any, **options: Any) -> tuple[list[Any], list[Any]]:
    """(key, value) pairs from encode_kafka and from iter_kafka."""
    records = laminar.encode_kafka(data, **options)
    keys = records.keys if records.keys is not None else [None] * records.num_rows
    return list(zip(keys, records.values, strict=True)), list(laminar.iter_kafka(data, **options))


def test_the_reported_cases() -> None:
    keyed = pa.table({"k": pa.array([None, 1, None], pa.int64()), "v": ["a", "b", "c"]})
    for pairs in both(keyed, key="k"):
        assert [k for k, _ in pairs] == [None, b"1", None]
    raw = pa.table({"v": pa.array([None, None], pa.binary())})
    for pairs in both(raw, value_format="raw"):
        assert pairs == [(None, None), (None, None)]


def test_a_null_at_the_first_row_of_every_chunk() -> None:
    """Three values of a third of a chunk fill one: rows 0, 4, 8, … open a chunk, and are null
    (key and raw value), beside empty payloads that must stay ``b''``."""
    big = b"x" * (CHUNK // 3 + 1)
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for i in range(16):
        if i % 4 == 0:
            keys.append(None)
            values.append(None)
        elif i % 4 == 1:
            keys.append(b"")
            values.append(b"")
        else:
            keys.append(str(i).encode())
            values.append(big)
    table = pa.table({"k": pa.array(keys, pa.binary()), "v": pa.array(values, pa.binary())})
    expected = list(zip(keys, values, strict=True))
    for pairs in both(table, value_format="raw", value_column="v", key="k"):
        assert pairs == expected


key_types = st.sampled_from(
    [pa.int64(), pa.int32(), pa.string(), pa.large_string(), pa.binary(), pa.float64()]
)


@settings(max_examples=60, deadline=None)
@given(
    key_type=key_types,
    present=st.lists(st.booleans(), min_size=1, max_size=40),
    big_rows=st.sets(st.integers(0, 39), max_size=6),
)
def test_nulls_at_any_position_in_keys_and_raw_values(
    key_type: pa.DataType, present: list[bool], big_rows: set[int]
) -> None:
    """Some rows are big enough to end a chunk, so nulls land at chunk starts, ends and
    middles; every null key is ``None`` and every null raw value a tombstone (``None``)."""
    n = len(present)
    raw_keys = [i if p else None for i, p in enumerate(present)]
    if pa.types.is_string(key_type) or pa.types.is_large_string(key_type):
        keys = pa.array([None if k is None else str(k) for k in raw_keys], key_type)
        expected_keys = [None if k is None else str(k).encode() for k in raw_keys]
    elif pa.types.is_binary(key_type):
        keys = pa.array([None if k is None else str(k).encode() for k in raw_keys], key_type)
        expected_keys = [None if k is None else str(k).encode() for k in raw_keys]
    elif pa.types.is_floating(key_type):
        keys = pa.array([None if k is None else k + 0.5 for k in raw_keys], key_type)
        expected_keys = [None if k is None else str(k + 0.5).encode() for k in raw_keys]
    else:
        keys = pa.array(raw_keys, key_type)
        expected_keys = [None if k is None else str(k).encode() for k in raw_keys]
    values = [
        None if not present[(i + 1) % n] else (b"v" * (CHUNK // 2) if i in big_rows else b"")
        for i in range(n)
    ]
    table = pa.table({"k": keys, "v": pa.array(values, pa.binary())})
    expected = list(zip(expected_keys, values, strict=True))
    for pairs in both(table, value_format="raw", value_column="v", key="k"):
        assert pairs == expected


@settings(max_examples=30, deadline=None)
@given(present=st.lists(st.booleans(), min_size=1, max_size=30))
def test_json_values_with_dictionary_and_null_typed_keys(present: list[bool]) -> None:
    """A dictionary key with nulls in its indices or its values, and a null-typed key column
    (Spark's ``lit(None)``): no key where the value is null, never the text ``null``."""
    n = len(present)
    words = pa.array(["a", None, "c"])
    indices = pa.array([(i % 3) if p else None for i, p in enumerate(present)], pa.int32())
    table = pa.table(
        {
            "d": pa.DictionaryArray.from_arrays(indices, words),
            "z": pa.nulls(n),
            "i": pa.array(range(n), pa.int64()),
        }
    )
    expected_d = [
        None if not p or i % 3 == 1 else words[i % 3].as_py().encode()
        for i, p in enumerate(present)
    ]
    for pairs in both(table, key="d"):
        assert [k for k, _ in pairs] == expected_d
    for pairs in both(table, key="z"):
        assert [k for k, _ in pairs] == [None] * n
        assert all(v.startswith(b'{"d":') for _, v in pairs)


@pytest.mark.parametrize(
    ("value", "unit"),
    [
        (-1, "ns"),
        (86_400 * 10**9 + 5, "ns"),
        (86_401, "s"),
        (-1, "ms"),
        (86_400 * 10**6 + 1, "us"),
    ],
)
def test_times_outside_the_day_are_refused_by_every_encoder(value: int, unit: str) -> None:
    arrow_type = pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
    table = pa.table({"t": pa.array([0, value], arrow_type)})
    with pytest.raises(DataError, match=r"column 't' row 1: time .* outside the day"):
        laminar.encode_kafka(table)
    with pytest.raises(DataError, match=r"column 't' row 1"):
        laminar.iter_kafka(table)
    with pytest.raises(DataError, match=r"column 't' row 1"):
        laminar.encode_pg_copy(table, [("t", "time", -1)])


def test_midnight_and_the_end_of_the_day_are_times() -> None:
    table = pa.table({"t": pa.array([0, 86_400 * 10**9], pa.time64("ns"))})
    assert laminar.encode_kafka(table).values == [
        b'{"t":"00:00:00.000000000"}',
        b'{"t":"24:00:00.000000000"}',
    ]
    assert laminar.encode_pg_copy(table, [("t", "time", -1)]).num_rows == 2


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.1, b"0.1"), (1 / 3, b"0.3333"), (65504.0, b"65500.0"), (-2.0, b"-2.0"), (1e-7, b"1e-7")],
)
def test_float16_is_written_with_its_shortest_text(value: float, text: bytes) -> None:
    table = pa.table({"f": pa.array([value], pa.float16())})
    [encoded] = laminar.encode_kafka(table).values
    assert encoded == b'{"f":' + text + b"}"


@pytest.mark.parametrize("start", [0, 5, 9])
def test_an_empty_slice_at_any_offset_encodes_to_nothing(start: int) -> None:
    """pyarrow exports ``batch.slice(k, 0)`` with its values buffer cut to nothing while its
    offsets still point past it (the scale-out writer's first half of a one-row chunk): no rows,
    no records, no error — and the rows around it are untouched."""
    batch = pa.record_batch({"id": list(range(20)), "name": [f"row-{i}" for i in range(20)]})
    empty = batch.slice(start, 0)
    for pairs in both(empty):
        assert pairs == []
    copy = laminar._core.encode_pg_copy(empty, [("id", "int8", 0), ("name", "text", 0)])
    assert copy.num_rows == 0
    around = pa.Table.from_batches([batch.slice(start, 0), batch.slice(start, 1)])
    for pairs in both(around):
        assert [v for _, v in pairs] == [f'{{"id":{start},"name":"row-{start}"}}'.encode()]
