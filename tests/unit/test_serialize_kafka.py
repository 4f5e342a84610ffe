"""Kafka payload encoding: JSON parsed back and compared value by value with the Arrow input."""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import laminar
from laminar import ConfigError, encode_kafka


def rows(data: Any, **kwargs: Any) -> list[dict[str, Any]]:
    records = encode_kafka(data, **kwargs)
    return [json.loads(v, parse_float=Decimal) for v in records.values]


def column_json(array: pa.Array) -> list[Any]:
    return [r["c"] for r in rows(pa.table({"c": array}))]


def test_field_order_nulls_and_counts() -> None:
    table = pa.table({"z": [1, None], "a": [None, "x"], "m": [True, False]})
    records = encode_kafka(table)
    assert records.values == [b'{"z":1,"a":null,"m":true}', b'{"z":null,"a":"x","m":false}']
    assert records.keys is None
    assert records.num_rows == len(records) == 2
    assert records.total_bytes == sum(len(v) for v in records.values if v is not None)
    assert [list(json.loads(v)) for v in records.values] == [["z", "a", "m"]] * 2


@pytest.mark.parametrize(
    ("arrow_type", "values"),
    [
        (pa.int8(), [-128, 127]),
        (pa.int16(), [-32768, 32767]),
        (pa.int32(), [-(2**31), 2**31 - 1]),
        (pa.int64(), [-(2**63), 2**63 - 1, 0]),
        (pa.uint8(), [0, 255]),
        (pa.uint16(), [65535]),
        (pa.uint32(), [2**32 - 1]),
        (pa.uint64(), [2**64 - 1, 0]),
    ],
)
def test_integer_extremes(arrow_type: pa.DataType, values: list[int]) -> None:
    assert column_json(pa.array([*values, None], arrow_type)) == [*values, None]


def test_float_edge_values_and_non_finite_strings() -> None:
    finite = [0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1, -1.5]
    got = [json.loads(v)["c"] for v in encode_kafka(pa.table({"c": finite})).values]
    assert got == finite
    assert [math.copysign(1, x) for x in got] == [math.copysign(1, x) for x in finite]
    special = column_json(pa.array([math.nan, math.inf, -math.inf, None]))
    assert special == ["NaN", "Infinity", "-Infinity", None]
    f32 = [
        json.loads(v)["c"]
        for v in encode_kafka(pa.table({"c": pa.array([0.1, 3.4e38], pa.float32())})).values
    ]
    assert f32 == [0.1, 3.4e38]
    f16 = column_json(pa.array([1.5, -0.25], pa.float16()))
    assert f16 == [Decimal("1.5"), Decimal("-0.25")]


UNICODE = [
    "plain",
    'quote " backslash \\ slash /',
    "controls \x00 \x01 \x08 \t \n \x0c \r \x1f \x7f",
    "latin é ß, cjk 漢字, rtl עברית",
    "astral 𝄞 😀 🏳️‍🌈",
    "separators \u2028 \u2029",
    "",
]


@pytest.mark.parametrize("arrow_type", [pa.string(), pa.large_string(), pa.string_view()])
def test_unicode_and_control_characters(arrow_type: pa.DataType) -> None:
    records = encode_kafka(pa.table({"c": pa.array(UNICODE, arrow_type)}))
    for raw, expected in zip(records.values, UNICODE, strict=False):
        assert raw is not None
        raw.decode("utf-8")  # valid UTF-8
        assert json.loads(raw)["c"] == expected
        assert not any(b < 0x20 for b in raw)  # every control character is escaped


def test_decimals_exact_at_full_precision() -> None:
    values = [
        Decimal("9999999999999999999999999999.9999999999"),
        Decimal("-9999999999999999999999999999.9999999999"),
        Decimal("0.0000000001"),
        Decimal("1.5000000000"),
        Decimal("0E-10"),
    ]
    table = pa.table({"c": pa.array([*values, None], pa.decimal128(38, 10))})
    records = encode_kafka(table)
    assert records.values[3] == b'{"c":1.5000000000}'  # the scale is kept
    assert column_json(table["c"]) == [*values, None]
    big = Decimal("-" + "9" * 66 + "." + "1" * 10)
    assert column_json(pa.array([big], pa.decimal256(76, 10))) == [big]
    assert column_json(pa.array([Decimal("12.34")], pa.decimal32(4, 2))) == [Decimal("12.34")]


def test_timestamps_dates_times_durations() -> None:
    instant = dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc)
    utc = pa.array([instant], pa.timestamp("us", tz="UTC"))
    assert column_json(utc) == ["2024-01-02T03:04:05.123456Z"]
    new_york = pa.array([instant], pa.timestamp("us", tz="America/New_York"))
    assert column_json(new_york) == ["2024-01-02T03:04:05.123456Z"]  # the same instant, in UTC
    assert column_json(pa.array([instant], pa.timestamp("ms", tz="UTC"))) == [
        "2024-01-02T03:04:05.123Z"
    ]
    assert column_json(pa.array([instant], pa.timestamp("s", tz="UTC"))) == ["2024-01-02T03:04:05Z"]
    assert column_json(pa.array([0], pa.timestamp("ns", tz="+02:00"))) == [
        "1970-01-01T00:00:00.000000000Z"
    ]
    naive = pa.array([dt.datetime(1969, 12, 31, 23, 59, 59, 999999)], pa.timestamp("us"))
    assert column_json(naive) == ["1969-12-31T23:59:59.999999"]
    parsed = dt.datetime.fromisoformat(column_json(utc)[0].replace("Z", "+00:00"))
    assert parsed == instant
    assert column_json(pa.array([dt.date(2024, 2, 29), dt.date(1, 1, 1)], pa.date32())) == [
        "2024-02-29",
        "0001-01-01",
    ]
    assert column_json(pa.array([dt.date(2024, 2, 29)], pa.date64())) == ["2024-02-29"]
    assert column_json(pa.array([dt.time(1, 2, 3, 4)], pa.time64("us"))) == ["01:02:03.000004"]
    assert column_json(pa.array([dt.time(23, 59, 59)], pa.time32("s"))) == ["23:59:59"]
    durations = pa.array([dt.timedelta(seconds=-1.5), dt.timedelta(days=1)], pa.duration("us"))
    assert column_json(durations) == ["-PT1.500000S", "PT86400.000000S"]


@pytest.mark.parametrize(
    "arrow_type", [pa.binary(), pa.large_binary(), pa.binary_view(), pa.binary(3)]
)
def test_binary_is_standard_padded_base64(arrow_type: pa.DataType) -> None:
    values = [b"\x00\xff\xfe", b"ab\n"]
    got = column_json(pa.array(values, arrow_type))
    assert got == [base64.b64encode(v).decode() for v in values]


def test_nested_types() -> None:
    assert column_json(pa.array([[1, None, 3], None, []], pa.list_(pa.int64()))) == [
        [1, None, 3],
        None,
        [],
    ]
    assert column_json(pa.array([["a"]], pa.large_list(pa.string()))) == [["a"]]
    assert column_json(pa.array([[1, 2]], pa.list_(pa.int32(), 2))) == [[1, 2]]
    struct = pa.array(
        [{"x": 1, "y": {"z": "é"}}, None],
        pa.struct([("x", pa.int32()), ("y", pa.struct([("z", pa.string())]))]),
    )
    assert column_json(struct) == [{"x": 1, "y": {"z": "é"}}, None]
    string_map = pa.array([[("k", 1), ("n", None)]], pa.map_(pa.string(), pa.int32()))
    assert column_json(string_map) == [{"k": 1, "n": None}]
    int_map = pa.array([[(7, "v")]], pa.map_(pa.int32(), pa.string()))
    assert column_json(int_map) == [{"7": "v"}]
    dictionary = pa.array(["red", None, "red", "blue"]).dictionary_encode()
    assert column_json(dictionary) == ["red", None, "red", "blue"]


def test_keys() -> None:
    table = pa.table(
        {
            "id": pa.array([-7, None, 2**63 - 1], pa.int64()),
            "s": ["k1", None, "ü"],
            "b": pa.array([b"\x00", b"x", None]),
            "d": pa.array([dt.date(2024, 1, 2)] * 3, pa.date32()),
            "st": pa.array([{"a": 1}] * 3, pa.struct([("a", pa.int8())])),
            "f": [1.5, math.nan, None],
        }
    )
    assert encode_kafka(table, key="id").keys == [b"-7", None, b"9223372036854775807"]
    assert encode_kafka(table, key="s").keys == [b"k1", None, "ü".encode()]
    assert encode_kafka(table, key="b").keys == [b"\x00", b"x", None]
    assert encode_kafka(table, key="d").keys == [b'"2024-01-02"'] * 3
    assert encode_kafka(table, key="st").keys == [b'{"a":1}'] * 3
    assert encode_kafka(table, key="f").keys == [b"1.5", b'"NaN"', None]
    records = encode_kafka(table, key="s")
    assert records.key_bytes == 2 + len("ü".encode())
    assert records.total_bytes == records.key_bytes + records.value_bytes


def test_raw_format() -> None:
    table = pa.table({"v": pa.array([b"\x00\x01", None, b""]), "k": ["a", "b", "c"]})
    records = encode_kafka(table, value_format="raw", value_column="v", key="k")
    assert records.values == [b"\x00\x01", None, b""]
    assert records.keys == [b"a", b"b", b"c"]
    single = encode_kafka(pa.table({"s": ["é", "x"]}), value_format="raw")
    assert single.values == ["é".encode(), b"x"]
    with pytest.raises(ConfigError, match="value_column"):
        encode_kafka(table, value_format="raw")
    with pytest.raises(ConfigError, match=r"column 'k' has Arrow type Int64"):
        encode_kafka(pa.table({"k": [1]}), value_format="raw")
    with pytest.raises(ConfigError, match="value_format"):
        encode_kafka(table, value_format="avro")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arrow_type", "value"),
    [
        (pa.month_day_nano_interval(), pa.MonthDayNano([1, 2, 3])),
        (pa.list_view(pa.int32()), [1]),
        (pa.dense_union([pa.field("i", pa.int32())]), None),
    ],
)
def test_unsupported_types_fail_before_encoding(arrow_type: pa.DataType, value: Any) -> None:
    schema = pa.schema([("ok", pa.int32()), ("bad", arrow_type)])
    with pytest.raises(ConfigError, match="column 'bad'"):
        laminar.check_kafka_schema(schema)
    if value is not None:
        table = pa.table({"ok": [1], "bad": pa.array([value], arrow_type)})
        with pytest.raises(ConfigError, match="column 'bad'"):
            encode_kafka(table)


def test_unknown_key_column() -> None:
    with pytest.raises(ConfigError, match="key column 'nope'"):
        laminar.check_kafka_schema(pa.schema([("a", pa.int32())]), key="nope")


def test_input_kinds() -> None:
    table = pa.table({"a": [1, 2, 3]})
    expected = [b'{"a":1}', b'{"a":2}', b'{"a":3}']
    assert encode_kafka(table).values == expected
    assert encode_kafka(table.to_batches()[0]).values == expected
    chunked = pa.concat_tables([table.slice(0, 1), table.slice(1)])
    assert encode_kafka(chunked).values == expected
    assert (
        encode_kafka(pa.RecordBatchReader.from_batches(table.schema, table.to_batches())).values
        == expected
    )
    assert encode_kafka(table.slice(1, 1)).values == expected[1:2]

    class StreamOnly:
        def __arrow_c_stream__(self, requested_schema: object = None) -> object:
            return table.__arrow_c_stream__(requested_schema)

    assert encode_kafka(StreamOnly()).values == expected
    assert encode_kafka(pa.table({"a": pa.array([], pa.int64())})).values == []
    with pytest.raises(TypeError, match="pyarrow Table"):
        encode_kafka([{"a": 1}])


def test_check_schema_accepts_tables_without_consuming_readers() -> None:
    table = pa.table({"a": [1]})
    laminar.check_kafka_schema(table)
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    laminar.check_kafka_schema(reader)
    assert encode_kafka(reader).values == [b'{"a":1}']


def test_invalid_utf8_is_a_data_error() -> None:
    broken = pa.array([b"\xff\xfe"], pa.binary()).view(pa.string())
    with pytest.raises(laminar.DataError, match="column 'c'"):
        encode_kafka(pa.table({"c": broken}))


@given(st.lists(st.text(), max_size=20))
def test_any_text_round_trips(texts: list[str]) -> None:
    records = encode_kafka(pa.table({"c": pa.array(texts, pa.string())}))
    assert [json.loads(v)["c"] for v in records.values] == texts


@given(
    st.lists(
        st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**53), 2**53), max_size=20
    )
)
def test_any_float_round_trips(values: list[float]) -> None:
    floats = [float(v) for v in values]
    records = encode_kafka(pa.table({"c": pa.array(floats, pa.float64())}))
    assert [json.loads(v)["c"] for v in records.values] == floats


@pytest.mark.parametrize(
    "options",
    [{}, {"key": "k"}, {"value_format": "raw", "value_column": "v", "key": "k"}],
)
def test_stream_yields_the_same_pairs_as_the_lists(options: dict[str, Any]) -> None:
    n = 30_000  # several chunks
    table = pa.table(
        {
            "k": pa.array([None if i % 7 == 0 else i for i in range(n)], pa.int64()),
            "v": pa.array([None if i % 5 == 0 else f"{i:064d}".encode() for i in range(n)]),
        }
    )
    batches = pa.Table.from_batches(table.to_batches(max_chunksize=4_000))
    records = laminar.encode_kafka(batches, **options)
    stream = laminar.iter_kafka(batches, **options)
    assert stream.num_rows == n
    keys = records.keys if records.keys is not None else [None] * n
    assert list(stream) == list(zip(keys, records.values, strict=True))
    assert list(stream) == []  # exhausted


def test_stream_checks_before_encoding() -> None:
    with pytest.raises(ConfigError, match="column 'bad'"):
        laminar.iter_kafka(pa.table({"bad": pa.array([pa.MonthDayNano([1, 2, 3])])}))
