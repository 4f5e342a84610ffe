"""COPY BINARY buffers loaded into a real PostgreSQL and read back value by value."""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa
import pytest

import laminar
from laminar import ConfigError, DataError, encode_pg_copy

pytestmark = pytest.mark.integration

TABLE = "laminar_copy_roundtrip"

DDL = f"""
CREATE TABLE {TABLE} (
    i2 int2, i4 int4, i8 int8, i8_from_i32 int8, i4_from_u16 int4,
    f4 float4, f8 float8,
    n numeric, n_int numeric, n_float numeric, n_typed numeric(12, 2), n_big numeric,
    txt text, txt_large text, txt_view text, vc varchar(10), bc char(5), txt_dict text,
    by bytea, by_fixed bytea,
    b bool,
    d date, d64 date, tm time,
    ts timestamp, ts_ns timestamp, tstz timestamptz, tstz_ms timestamptz,
    j json, jb_text jsonb, jb_struct jsonb, jb_list jsonb, jb_map jsonb,
    u uuid, u_fixed uuid,
    a_i4 int4[], a_i8 int8[], a_txt text[], a_f8 float8[], a_num numeric[], a_bool bool[],
    a_tstz timestamptz[], a_date date[], a_uuid uuid[], a_fixed int2[]
)
"""

UTC = dt.timezone.utc
U1 = uuid.UUID("123e4567-e89b-12d3-a456-426614174000")
U2 = uuid.UUID("ffffffff-ffff-ffff-ffff-ffffffffffff")
D38 = Decimal("9999999999999999999999999999.9999999999")
D38_NEG = Decimal(
    "-9999999999999999999999999999.9999999999"
)  # not D38_NEG: context precision is 28
UNICODE = 'é 漢字 𝄞 😀 \t\n\x01 "q" \\'


def source_table() -> pa.Table:
    """Three rows: extremes, ordinary values, and all nulls."""
    ts_utc = dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    naive = dt.datetime(1999, 12, 31, 23, 59, 59, 999999)
    columns: dict[str, pa.Array] = {
        "i2": pa.array([-32768, 32767, None], pa.int16()),
        "i4": pa.array([-(2**31), 2**31 - 1, None], pa.int32()),
        "i8": pa.array([-(2**63), 2**63 - 1, None], pa.int64()),
        "i8_from_i32": pa.array([-(2**31), 7, None], pa.int32()),
        "i4_from_u16": pa.array([65535, 0, None], pa.uint16()),
        "f4": pa.array([3.4028234663852886e38, -1.5, None], pa.float32()),
        "f8": pa.array([1.7976931348623157e308, 5e-324, None], pa.float64()),
        "n": pa.array([D38, D38_NEG, None], pa.decimal128(38, 10)),
        "n_int": pa.array([-(2**63), 2**63 - 1, None], pa.int64()),
        "n_float": pa.array([0.1, math.nan, None], pa.float64()),
        "n_typed": pa.array(
            [Decimal("1234567890.12"), Decimal("-0.01"), None], pa.decimal128(12, 2)
        ),
        "n_big": pa.array(
            [Decimal("-" + "9" * 66 + "." + "1" * 10), Decimal("0.0000000000"), None],
            pa.decimal256(76, 10),
        ),
        "txt": pa.array([UNICODE, "", None]),
        "txt_large": pa.array(["large", "x" * 10_000, None], pa.large_string()),
        "txt_view": pa.array(["a view string longer than 12", "s", None], pa.string_view()),
        "vc": pa.array(["exactly 10", "é" * 10, None]),
        "bc": pa.array(["ab", "abcde", None]),
        "txt_dict": pa.array(["red", "red", None]).dictionary_encode(),
        "by": pa.array([bytes(range(256)), b"", None], pa.binary()),
        "by_fixed": pa.array([b"\x00\x01", b"\xff\xfe", None], pa.binary(2)),
        "b": pa.array([True, False, None]),
        "d": pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31), None], pa.date32()),
        "d64": pa.array([dt.date(2024, 2, 29), dt.date(1970, 1, 1), None], pa.date64()),
        "tm": pa.array([dt.time(0, 0), dt.time(23, 59, 59, 999999), None], pa.time64("us")),
        "ts": pa.array([naive, dt.datetime(1, 1, 1), None], pa.timestamp("us")),
        "ts_ns": pa.array([1_000_000_000_123_456_789, 0, None], pa.timestamp("ns")),
        "tstz": pa.array([ts_utc, ts_utc, None], pa.timestamp("us", tz="America/New_York")),
        "tstz_ms": pa.array(
            [ts_utc.replace(microsecond=123000), ts_utc, None], pa.timestamp("ms", tz="UTC")
        ),
        "j": pa.array(['{"b": 1, "a": [true, null]}', "[]", None]),
        "jb_text": pa.array(['{"k": "é", "n": 1.50}', '"just a string"', None]),
        "jb_struct": pa.array(
            [{"x": 1, "s": UNICODE, "f": math.nan}, {"x": None, "s": "", "f": 1.5}, None],
            pa.struct([("x", pa.int64()), ("s", pa.string()), ("f", pa.float64())]),
        ),
        "jb_list": pa.array([[1, None, 3], [], None], pa.list_(pa.int32())),
        "jb_map": pa.array([[("k", 1.25)], [], None], pa.map_(pa.string(), pa.float64())),
        "u": pa.array([str(U1), U2.hex, None]),
        "u_fixed": pa.array([U1.bytes, U2.bytes, None], pa.binary(16)),
        "a_i4": pa.array([[1, None, -(2**31)], [], None], pa.list_(pa.int32())),
        "a_i8": pa.array([[2**63 - 1, None], [None], None], pa.large_list(pa.int64())),
        "a_txt": pa.array([[UNICODE, None, ""], ["x"], None], pa.list_(pa.string())),
        "a_f8": pa.array([[math.inf, -math.inf, None], [0.5], None], pa.list_(pa.float64())),
        "a_num": pa.array([[D38, None], [Decimal("0E-10")], None], pa.list_(pa.decimal128(38, 10))),
        "a_bool": pa.array([[True, None, False], [], None], pa.list_(pa.bool_())),
        "a_tstz": pa.array([[ts_utc, None], [], None], pa.list_(pa.timestamp("us", tz="UTC"))),
        "a_date": pa.array([[dt.date(2000, 1, 1)], [None], None], pa.list_(pa.date32())),
        "a_uuid": pa.array([[str(U1), None], [], None], pa.list_(pa.string())),
        "a_fixed": pa.array([[1, 2], [3, None], None], pa.list_(pa.int8(), 2)),
    }
    return pa.table(columns)


def expected_rows() -> list[tuple[Any, ...]]:
    ts_utc = dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    nan = object()  # placeholder compared specially
    return [
        (
            -32768,
            -(2**31),
            -(2**63),
            -(2**31),
            65535,
            3.4028234663852886e38,
            1.7976931348623157e308,
            D38,
            Decimal(-(2**63)),
            Decimal("0.1"),
            Decimal("1234567890.12"),
            Decimal("-" + "9" * 66 + "." + "1" * 10),
            UNICODE,
            "large",
            "a view string longer than 12",
            "exactly 10",
            "ab   ",
            "red",
            bytes(range(256)),
            b"\x00\x01",
            True,
            dt.date(1, 1, 1),
            dt.date(2024, 2, 29),
            dt.time(0, 0),
            dt.datetime(1999, 12, 31, 23, 59, 59, 999999),
            dt.datetime(2001, 9, 9, 1, 46, 40, 123456),
            ts_utc,
            ts_utc.replace(microsecond=123000),
            {"b": 1, "a": [True, None]},
            {"k": "é", "n": 1.5},
            {"x": 1, "s": UNICODE, "f": "NaN"},
            [1, None, 3],
            {"k": 1.25},
            U1,
            U1,
            [1, None, -(2**31)],
            [2**63 - 1, None],
            [UNICODE, None, ""],
            [math.inf, -math.inf, None],
            [D38, None],
            [True, None, False],
            [ts_utc, None],
            [dt.date(2000, 1, 1)],
            [U1, None],
            [1, 2],
        ),
        (
            32767,
            2**31 - 1,
            2**63 - 1,
            7,
            0,
            -1.5,
            5e-324,
            D38_NEG,
            Decimal(2**63 - 1),
            nan,
            Decimal("-0.01"),
            Decimal("0E-10"),
            "",
            "x" * 10_000,
            "s",
            "é" * 10,
            "abcde",
            "red",
            b"",
            b"\xff\xfe",
            False,
            dt.date(9999, 12, 31),
            dt.date(1970, 1, 1),
            dt.time(23, 59, 59, 999999),
            dt.datetime(1, 1, 1),
            dt.datetime(1970, 1, 1),
            ts_utc,
            ts_utc.replace(microsecond=123000),  # pyarrow truncated the input to ms
            [],
            "just a string",
            {"x": None, "s": "", "f": 1.5},
            [],
            {},
            U2,
            U2,
            [],
            [None],
            ["x"],
            [0.5],
            [Decimal("0E-10")],
            [],
            [],
            [None],
            [],
            [3, None],
        ),
        tuple([None] * 45),
    ]


def catalog_columns(conn: psycopg.Connection[Any], table: str) -> list[tuple[str, str, int]]:
    """What the Postgres sink reads: (name, typname, atttypmod) in column order."""
    rows = conn.execute(
        """
        SELECT a.attname, t.typname, a.atttypmod
        FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
        WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY a.attnum
        """,
        (table,),
    ).fetchall()
    return [(name, typname, typmod) for name, typname, typmod in rows]


def copy_in(conn: psycopg.Connection[Any], table: str, buffer: laminar.PgCopyBuffer) -> None:
    columns = ", ".join(f'"{c}"' for c in buffer.columns)
    with (
        conn.cursor() as cur,
        cur.copy(f"COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)") as copy,
    ):
        for chunk in buffer.chunks:
            copy.write(chunk)


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as connection:
        connection.execute(f"DROP TABLE IF EXISTS {TABLE}")
        connection.execute(DDL)
        yield connection
        connection.execute(f"DROP TABLE IF EXISTS {TABLE}")


def same(a: Any, b: Any) -> bool:
    """Equal value and type, NaN equal to NaN, element by element for lists and objects."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def test_every_type_round_trips(conn: psycopg.Connection[Any]) -> None:
    columns = catalog_columns(conn, TABLE)
    table = source_table()
    laminar.check_pg_copy_schema(table.schema, columns)
    buffer = encode_pg_copy(table, columns)
    assert buffer.num_rows == 3
    assert buffer.total_bytes == sum(len(c) for c in buffer.chunks) == len(buffer.to_bytes())
    copy_in(conn, TABLE, buffer)

    names = ", ".join(c[0] for c in columns)
    got = conn.execute(f"SELECT {names} FROM {TABLE} ORDER BY i2 NULLS LAST").fetchall()
    expected = expected_rows()
    assert len(got) == len(expected)
    for row_index, (got_row, want_row) in enumerate(zip(got, expected, strict=False)):
        for (name, typname, _), g, w in zip(columns, got_row, want_row, strict=False):
            where = f"row {row_index} column {name} ({typname})"
            if name == "n_float" and row_index == 1:
                assert isinstance(g, Decimal), where
                assert g.is_nan(), where
                continue
            if name == "f4" and w is not None:
                assert g == pytest.approx(w, rel=1e-7), where
                continue
            assert same(g, w), f"{where}: got {g!r}, want {w!r}"
    # numeric keeps the decimal's scale (dscale) exactly.
    text = conn.execute(f"SELECT n::text, n_big::text FROM {TABLE} ORDER BY i2 LIMIT 1").fetchone()
    assert text == (str(D38), "-" + "9" * 66 + "." + "1" * 10)


def test_bulk_rows_and_chunks(conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TEMP TABLE bulk (id int8, s text, amount numeric(18, 2), ts timestamptz)")
    n = 200_000
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "s": pa.array([f"name-{i}" for i in range(n)]),
            "amount": pa.array([Decimal(i) / 100 for i in range(n)], pa.decimal128(18, 2)),
            "ts": pa.array(range(n), pa.timestamp("us", tz="UTC")),
        }
    )
    buffer = encode_pg_copy(table, catalog_columns(conn, "bulk"))
    assert len(buffer.chunks) > 1
    copy_in(conn, "bulk", buffer)
    count, total, last = conn.execute(
        "SELECT count(*), sum(amount), max(ts) FROM bulk"
    ).fetchone() or (None, None, None)
    assert count == n
    assert total == sum(Decimal(i) / 100 for i in range(n))
    assert last == dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=n - 1)


def test_source_columns_and_record_batch_reader(conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TEMP TABLE renamed (target_id int8, label text)")
    table = pa.table({"label_src": ["a", "b"], "id_src": pa.array([1, 2], pa.int16())})
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=1))
    buffer = encode_pg_copy(
        reader, catalog_columns(conn, "renamed"), source_columns=["id_src", "label_src"]
    )
    copy_in(conn, "renamed", buffer)
    assert conn.execute("SELECT * FROM renamed ORDER BY 1").fetchall() == [(1, "a"), (2, "b")]


@pytest.mark.parametrize(
    ("ddl_type", "array", "message"),
    [
        (
            "int4",
            pa.array([1, 2**31], pa.int64()),
            r"column 'v' row 1: value 2147483648 does not fit PostgreSQL int4",
        ),
        ("int2", pa.array([0, None, 2**16], pa.uint32()), r"column 'v' row 2"),
        ("int8", pa.array([2**64 - 1], pa.uint64()), r"column 'v' row 0.*int8"),
        ("varchar(3)", pa.array(["abc", "abcd"]), r"column 'v' row 1.*varchar\(3\)"),
        (
            "numeric(5,2)",
            pa.array([Decimal("999.99"), Decimal("1000.00")], pa.decimal128(10, 2)),
            r"row 1.*numeric\(5,2\)",
        ),
        ("uuid", pa.array(["123e4567-e89b-12d3-a456-42661417400"]), r"row 0.*not a UUID"),
        ("jsonb", pa.array(['{"a": 1}', "{nope"]), r"row 1.*not valid JSON"),
        ("text", pa.array(["nul \x00 inside"]), r"row 0.*NUL"),
        ("timestamp", pa.array([2**62], pa.timestamp("s")), r"row 0.*range"),
        ("float4", pa.array([1e300]), r"row 0.*float4"),
        ("int4[]", pa.array([[1], [2**40]], pa.list_(pa.int64())), r"row 1.*element 1"),
    ],
)
def test_values_that_do_not_fit_fail_before_any_byte(
    conn: psycopg.Connection[Any], ddl_type: str, array: pa.Array, message: str
) -> None:
    conn.execute(f"CREATE TEMP TABLE narrow (v {ddl_type})")
    columns = catalog_columns(conn, "narrow")
    laminar.check_pg_copy_schema(pa.schema([("v", array.type)]), columns)  # types are compatible
    with pytest.raises(DataError, match=message):
        encode_pg_copy(pa.table({"v": array}), columns)


@pytest.mark.parametrize(
    ("ddl_type", "arrow_type"),
    [
        ("int4", pa.string()),
        ("text", pa.int64()),
        ("timestamptz", pa.date32()),
        ("uuid", pa.binary(8)),
        ("int4[]", pa.int32()),
        ("int4[]", pa.list_(pa.list_(pa.int32()))),
        ("bool", pa.int8()),
        ("float8", pa.int64()),
        # bytes holding JSON text (Spark's Kafka value) are not base64 JSON strings
        ("jsonb", pa.binary()),
        ("json", pa.large_binary()),
    ],
)
def test_incompatible_types_are_config_errors(
    conn: psycopg.Connection[Any], ddl_type: str, arrow_type: pa.DataType
) -> None:
    conn.execute(f"CREATE TEMP TABLE incompatible (v {ddl_type})")
    columns = catalog_columns(conn, "incompatible")
    schema = pa.schema([("v", arrow_type)])
    with pytest.raises(ConfigError, match=r"column 'v'.*cannot be written to PostgreSQL type"):
        laminar.check_pg_copy_schema(schema, columns)
    with pytest.raises(ConfigError, match=r"column 'v'"):
        encode_pg_copy(pa.table({"v": pa.nulls(1, arrow_type)}), columns)


def test_missing_and_unsupported_columns(conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TEMP TABLE other (v int4, p point)")
    columns = catalog_columns(conn, "other")
    with pytest.raises(ConfigError, match=r"'v'.*not in the batch"):
        laminar.check_pg_copy_schema(pa.schema([("x", pa.int32())]), columns[:1])
    with pytest.raises(ConfigError, match="type point is not supported"):
        laminar.check_pg_copy_schema(pa.schema([("p", pa.string())]), columns[1:])
    with pytest.raises(ConfigError, match="source columns"):
        laminar.check_pg_copy_schema(pa.schema([("v", pa.int32())]), columns[:1], source_columns=[])


def test_a_failed_encode_leaves_the_table_untouched(conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TEMP TABLE atomic (v int2)")
    with pytest.raises(DataError):
        encode_pg_copy(pa.table({"v": pa.array([1, 2, 70_000])}), catalog_columns(conn, "atomic"))
    assert conn.execute("SELECT count(*) FROM atomic").fetchone() == (0,)


def test_json_column_text_is_kept_verbatim(conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TEMP TABLE js (v json)")
    text = '{"b": 1,   "a": 2}'
    copy_in(conn, "js", encode_pg_copy(pa.table({"v": [text]}), catalog_columns(conn, "js")))
    row = conn.execute("SELECT v::text FROM js").fetchone()
    assert row == (text,)
    assert json.loads(row[0]) == {"b": 1, "a": 2}
