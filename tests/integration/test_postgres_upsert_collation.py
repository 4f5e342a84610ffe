"""Upsert mode under every kind of collation PostgreSQL offers (issue 29): the last row of a key
wins under the collation the key's unique index compares with — libc and ICU deterministic
collations (bytes), ICU nondeterministic ones (case-insensitive, accent-insensitive, ignoring
punctuation, Unicode-canonical) — whether the collation is the column's or only the index's;
keys whose equality cannot be reproduced are a `ConfigError` at start-up naming the column.

Before: one epoch with keys 'a' and 'A' under a case-insensitive key stopped the pipeline
(``ON CONFLICT DO UPDATE command cannot affect row a second time``, a FatalError on every try):
the staging table compared keys under its own (deterministic) collation.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import psycopg
import pyarrow as pa
import pytest

import laminar
from laminar import ConfigError, DataError, PostgresSink
from tests.integration.pg_helpers import create_table, query

pytestmark = pytest.mark.integration

#: The batch's keys, in order (a row's value is its position): every kind of "equal but not the
#: same bytes" the collations below tell apart or not.
KEYS = [
    "a",
    "A",
    "\u00e1",  # á
    "\u00c1",  # Á
    "ab",
    "a-b",
    "\u00e9",  # é, one code point
    "e\u0301",  # é, e + combining acute: canonically equivalent to the previous one
    "b",
]
ALL_APART = [[i] for i in range(len(KEYS))]

#: name → (CREATE COLLATION options, or None for one PostgreSQL has; the keys' classes).
COLLATIONS: dict[str, tuple[str | None, list[list[int]]]] = {
    # deterministic: equal only when the bytes are
    "C": (None, ALL_APART),
    "POSIX": (None, ALL_APART),
    "libc_c_utf8": ("provider = libc, locale = 'C.UTF-8'", ALL_APART),
    "und-x-icu": (None, ALL_APART),
    "icu_numeric": ("provider = icu, locale = 'und-u-kn-true'", ALL_APART),
    # nondeterministic (ICU): equal as the collation's strength says
    "icu_canonical": (
        "provider = icu, locale = 'und', deterministic = false",
        [[0], [1], [2], [3], [4], [5], [6, 7], [8]],
    ),
    "icu_case_insensitive": (
        "provider = icu, locale = 'und-u-ks-level2', deterministic = false",
        [[0, 1], [2, 3], [4], [5], [6, 7], [8]],
    ),
    "icu_case_accent_insensitive": (
        "provider = icu, locale = 'und-u-ks-level1', deterministic = false",
        [[0, 1, 2, 3], [4], [5], [6, 7], [8]],
    ),
    "icu_accent_insensitive": (
        "provider = icu, locale = 'und-u-ks-level1-kc-true', deterministic = false",
        [[0, 2], [1, 3], [4], [5], [6, 7], [8]],
    ),
    "icu_ignore_punctuation": (
        "provider = icu, locale = 'und-u-ka-shifted', deterministic = false",
        [[0], [1], [2], [3], [4, 5], [6, 7], [8]],
    ),
}


def ddl(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


def ensure_collation(dsn: str, name: str) -> str:
    """The collation as SQL (created in public when it is not one PostgreSQL has)."""
    options = COLLATIONS[name][0]
    if options is not None:
        ddl(dsn, f'CREATE COLLATION IF NOT EXISTS public."{name}" ({options})')
        return f'public."{name}"'
    return f'pg_catalog."{name}"'


def keyed(keys: list[str], values: list[int]) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.string()), "v": pa.array(values, pa.int64())})


def rows_of(dsn: str, table: str) -> dict[str, int]:
    rows = query(dsn, f"SELECT k, v FROM {table}")
    return {k: int(v) for k, v in rows}


def upsert(dsn: str, table: str, epochs: list[pa.Table]) -> None:
    writer = laminar.exactly_once(PostgresSink(dsn, table, mode="upsert", key="k"))
    try:
        for epoch, data in enumerate(epochs):
            assert writer.write_epoch(epoch, data).committed
    finally:
        writer.close()


def test_the_collations_classes_are_postgresqls(pg_dsn: str) -> None:
    """The classes below are the server's own: every pair of keys is equal under a collation
    exactly when the test says they are one key (so the upsert tests judge against PostgreSQL,
    not against this file's guess)."""
    for name, (_, classes) in COLLATIONS.items():
        collation = ensure_collation(pg_dsn, name)
        same = {(i, j) for c in classes for i in c for j in c}
        for i, a in enumerate(KEYS):
            for j, b in enumerate(KEYS):
                (equal,) = query(pg_dsn, f"SELECT %s = %s COLLATE {collation}", (a, b))[0]
                assert equal == ((i, j) in same), (name, a, b)
    # and the two é are different bytes (the composed and decomposed forms)
    assert unicodedata.normalize("NFC", KEYS[7]) == KEYS[6] != KEYS[7]


@pytest.mark.parametrize("where", ["column", "index"])
@pytest.mark.parametrize("name", list(COLLATIONS))
def test_the_last_row_of_a_key_wins_under_its_collation(
    pg_dsn: str, table_name: str, name: str, where: str
) -> None:
    collation = ensure_collation(pg_dsn, name)
    if where == "column":  # the key column's own collation (its primary key compares with it)
        table = create_table(
            pg_dsn, table_name, f"(k text COLLATE {collation} PRIMARY KEY, v int8)"
        )
    else:  # only the unique index's: CREATE UNIQUE INDEX ... (k COLLATE ci)
        table = create_table(pg_dsn, table_name, "(k text NOT NULL, v int8)")
        ddl(pg_dsn, f"CREATE UNIQUE INDEX {table_name}_k ON {table} (k COLLATE {collation})")
    classes = COLLATIONS[name][1]
    # epoch 0: every key once, in order; each class keeps its last row, with that row's key
    # epoch 1: each class again, written with its first spelling: the stored row is replaced
    # (its key stays as stored: ON CONFLICT updates the other columns)
    again = [c[0] for c in classes]
    upsert(
        pg_dsn,
        table,
        [
            keyed(KEYS, list(range(len(KEYS)))),
            keyed([KEYS[i] for i in again], [100 + i for i in again]),
        ],
    )
    assert rows_of(pg_dsn, table) == {KEYS[c[-1]]: 100 + c[0] for c in classes}


def test_a_composite_key_with_a_case_insensitive_column(pg_dsn: str, table_name: str) -> None:
    collation = ensure_collation(pg_dsn, "icu_case_insensitive")
    table = create_table(
        pg_dsn, table_name, f"(k text COLLATE {collation}, n int8, v int8, PRIMARY KEY (n, k))"
    )
    data = pa.table(
        {
            "k": ["a", "A", "a", "B", "b"],
            "n": pa.array([1, 1, 2, 1, 1], pa.int64()),
            "v": pa.array([0, 1, 2, 3, 4], pa.int64()),
        }
    )
    writer = laminar.exactly_once(PostgresSink(pg_dsn, table, mode="upsert", key=["k", "n"]))
    try:
        assert writer.write_epoch(0, data).committed
    finally:
        writer.close()
    rows = query(pg_dsn, f"SELECT k, n, v FROM {table} ORDER BY n, v")
    assert rows == [("A", 1, 1), ("b", 1, 4), ("a", 2, 2)]


def test_a_deterministic_primary_key_and_a_case_insensitive_index_on_the_same_column(
    pg_dsn: str, table_name: str
) -> None:
    """ON CONFLICT (k) arbitrates with both indexes: keys are one when either says so, i.e.
    under the case-insensitive collation."""
    collation = ensure_collation(pg_dsn, "icu_case_insensitive")
    table = create_table(pg_dsn, table_name, "(k text PRIMARY KEY, v int8)")
    ddl(pg_dsn, f"CREATE UNIQUE INDEX {table_name}_ci ON {table} (k COLLATE {collation})")
    upsert(pg_dsn, table, [keyed(["x", "X", "y"], [0, 1, 2]), keyed(["x", "Y"], [3, 4])])
    assert rows_of(pg_dsn, table) == {"X": 3, "y": 4}


def test_two_nondeterministic_collations_on_one_key_are_a_config_error(
    pg_dsn: str, table_name: str
) -> None:
    ci = ensure_collation(pg_dsn, "icu_case_insensitive")
    ai = ensure_collation(pg_dsn, "icu_accent_insensitive")
    table = create_table(pg_dsn, table_name, "(k text NOT NULL, v int8)")
    ddl(pg_dsn, f"CREATE UNIQUE INDEX {table_name}_ci ON {table} (k COLLATE {ci})")
    ddl(pg_dsn, f"CREATE UNIQUE INDEX {table_name}_ai ON {table} (k COLLATE {ai})")
    sink = PostgresSink(pg_dsn, table, mode="upsert", key="k")
    with pytest.raises(ConfigError) as err:
        sink.init_transactions()  # at start-up, before any row
    message = str(err.value)
    assert "upsert key column 'k'" in message
    assert f"{table_name}_ci" in message
    assert f"{table_name}_ai" in message
    assert "Drop all but one" in message
    sink.close()


def test_an_operator_class_with_another_equality_is_a_config_error(
    pg_dsn: str, table_name: str, unique_name: Any
) -> None:
    """record_image_ops compares composite values by their bytes (1.0 and 1.00 differ), the
    type's default `=` by value: DISTINCT ON would join keys the index keeps apart."""
    pair = unique_name("pair")
    ddl(pg_dsn, f"CREATE TYPE {pair} AS (a numeric, b text)")
    table = create_table(pg_dsn, table_name, f"(p {pair} NOT NULL, v int8)")
    ddl(pg_dsn, f"CREATE UNIQUE INDEX {table_name}_img ON {table} (p record_image_ops)")
    sink = PostgresSink(pg_dsn, table, mode="upsert", key="p")
    with pytest.raises(ConfigError) as err:
        sink.init_transactions()
    message = str(err.value)
    assert "upsert key column 'p'" in message
    assert "record_image_ops" in message
    assert f"{table_name}_img" in message
    sink.close()


def test_an_operator_class_with_the_default_equality_is_a_key(pg_dsn: str, table_name: str) -> None:
    """text_pattern_ops orders differently but its `=` is text's: a key like any other."""
    table = create_table(pg_dsn, table_name, "(k text NOT NULL, v int8)")
    ddl(pg_dsn, f"CREATE UNIQUE INDEX {table_name}_pat ON {table} (k text_pattern_ops)")
    upsert(pg_dsn, table, [keyed(["a", "A", "a"], [0, 1, 2]), keyed(["A"], [3])])
    assert rows_of(pg_dsn, table) == {"a": 2, "A": 3}


def test_a_trigger_that_changes_the_key_is_a_data_error_naming_it(
    pg_dsn: str, table_name: str
) -> None:
    """Two rows DISTINCT ON keeps apart that a BEFORE INSERT trigger makes one key: PostgreSQL's
    'cannot affect row a second time' is said as a DataError naming the table and the key."""
    table = create_table(pg_dsn, table_name, "(k text PRIMARY KEY, v int8)")
    ddl(
        pg_dsn,
        f"CREATE FUNCTION {table_name}_lower() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN NEW.k := lower(NEW.k); RETURN NEW; END$$",
    )
    ddl(
        pg_dsn,
        f"CREATE TRIGGER {table_name}_t BEFORE INSERT ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {table_name}_lower()",
    )
    writer = laminar.exactly_once(PostgresSink(pg_dsn, table, mode="upsert", key="k"))
    try:
        with pytest.raises(DataError, match=r"became the same key \(k\)"):
            writer.write_epoch(0, keyed(["a", "A"], [0, 1]))
        assert writer.write_epoch(0, keyed(["a", "b"], [0, 1])).committed  # fixed: written
    finally:
        writer.close()
    assert rows_of(pg_dsn, table) == {"a": 0, "b": 1}
