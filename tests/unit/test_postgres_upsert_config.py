"""PostgresSink's ``mode=`` / ``key=`` options and the key check against a table's unique
indexes, without a server (the catalog's description is built by hand)."""

from __future__ import annotations

import pickle

import pytest

from laminar import ConfigError, PostgresSink
from laminar.postgres._table import ColumnInfo, TableInfo, UniqueIndex
from laminar.postgres._upsert import resolve_key

DSN = "postgresql://app:S3cr3t-pw@db.example:5432/shop"


def test_append_is_the_default() -> None:
    sink = PostgresSink(DSN, "orders")
    assert (sink.mode, sink.key) == ("append", None)


@pytest.mark.parametrize(
    ("key", "expected"),
    [("id", ("id",)), (["window_start", "user_id"], ("window_start", "user_id")), (("a",), ("a",))],
)
def test_upsert_with_a_key(key: object, expected: tuple[str, ...]) -> None:
    sink = PostgresSink(DSN, "orders", mode="upsert", key=key)  # type: ignore[arg-type]
    assert (sink.mode, sink.key) == ("upsert", expected)
    copy = pickle.loads(pickle.dumps(sink))
    assert (copy.mode, copy.key) == ("upsert", expected)
    assert "mode='upsert'" in repr(sink)
    assert "S3cr3t" not in repr(sink)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "upsert"}, r"mode='upsert' needs key="),
        ({"key": "id"}, r"key='id' is only used with mode='upsert'"),
        ({"mode": "append", "key": ["id"]}, r"only used with mode='upsert'"),
        ({"mode": "merge", "key": "id"}, r"mode= must be 'append' .* or 'upsert'"),
        ({"mode": "upsert", "key": []}, r"key= must be a column name or a non-empty list"),
        ({"mode": "upsert", "key": b"id"}, r"key= must be a column name"),
        ({"mode": "upsert", "key": ["id", ""]}, r"non-empty strings"),
        ({"mode": "upsert", "key": ["id", "id"]}, r"names a column twice"),
    ],
)
def test_bad_combinations_are_config_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        PostgresSink(DSN, "orders", **kwargs)  # type: ignore[arg-type]


def column(name: str) -> ColumnInfo:
    return ColumnInfo(name, "int8", -1, "bigint", False, False, "", "")


TABLE = TableInfo(
    oid=1,
    schema="public",
    name="totals",
    kind="r",
    columns=tuple(column(n) for n in ("Region", "user_id", "total", "flag")),
    database="shop",
    can_insert=True,
    unique_indexes=(
        UniqueIndex("totals_pkey", ("Region", "user_id")),
        UniqueIndex("totals_total_partial", ("total",), "partial"),
        UniqueIndex("totals_expr", ("flag", None), "expression"),
    ),
)


def test_a_key_matches_a_usable_unique_index_in_any_order_and_case() -> None:
    assert resolve_key(TABLE, ["user_id", "Region"]) == ("user_id", "Region")
    assert resolve_key(TABLE, ["region", "USER_ID"]) == ("Region", "user_id")


@pytest.mark.parametrize("key", [["total"], ["user_id"], ["Region", "user_id", "total"]])
def test_a_key_without_its_unique_index_names_table_key_and_indexes(key: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_key(TABLE, key)
    message = caught.value.message
    assert message.startswith("table public.totals: upsert key (")
    assert 'totals_pkey ("Region", user_id)' not in message  # shown as the catalog names them
    assert "totals_pkey (Region, user_id)" in message
    assert "totals_total_partial (total) [partial]" in message
    assert "totals_expr (flag, <expression>) [expression]" in message
    assert "ADD UNIQUE" in message


def test_a_key_column_the_table_lacks() -> None:
    with pytest.raises(ConfigError, match=r"key column 'day' is not a column of the table"):
        resolve_key(TABLE, ["Region", "day"])
