"""Table names as users write them, and the prepared-transaction ids (gids) of the Postgres sink."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar import ConfigError
from laminar.postgres._names import (
    GID_MAX_BYTES,
    TableName,
    gid_prefix,
    make_gid,
    parse_gid,
    parse_table_name,
    render_identifier,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("orders", TableName(None, "orders")),
        ("public.orders", TableName("public", "orders")),
        ("Public.Orders", TableName("public", "orders")),  # unquoted: folded like SQL
        ('"Public"."Orders"', TableName("Public", "Orders")),
        ('"we.ird"."ta.ble"', TableName("we.ird", "ta.ble")),
        ('"say ""hi"""', TableName(None, 'say "hi"')),
        ('s."a b"', TableName("s", "a b")),
        ("order items", TableName(None, "order items")),  # not an identifier: verbatim
        ("  public . orders  ", TableName("public", "orders")),
        ("café.Ünïcode", TableName("café", "Ünïcode")),  # only ASCII letters fold
        ("CAFÉ", TableName(None, "cafÉ")),
        ('"select"', TableName(None, "select")),
        ('"; DROP TABLE x; --"', TableName(None, "; DROP TABLE x; --")),
        ("a$1", TableName(None, "a$1")),
    ],
)
def test_parse_table_name(text: str, expected: TableName) -> None:
    assert parse_table_name(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty name part"),
        ("a.", "empty name part"),
        (".a", "empty name part"),
        ('"unterminated', "unterminated"),
        ('""', "empty quoted identifier"),
        ('a"b', "double quote inside an unquoted part"),
        ('"a"b', "unexpected character"),
        ("db.schema.table", "3 parts"),
    ],
)
def test_bad_table_names_are_config_errors(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        parse_table_name(text)


def test_a_non_string_table_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="must be a string"):
        parse_table_name(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("part", "rendered"),
    [
        ("orders", "orders"),
        ("Orders", '"Orders"'),
        ("a b", '"a b"'),
        ('q"uote', '"q""uote"'),
        ("dot.ted", '"dot.ted"'),
        ("1abc", '"1abc"'),
        ("ünï", "ünï"),
    ],
)
def test_render_identifier(part: str, rendered: str) -> None:
    assert render_identifier(part) == rendered


identifiers = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1
).filter(lambda s: s.strip() == s)  # parts keep no outer whitespace


@given(schema=st.none() | identifiers, name=identifiers)
def test_display_parses_back_to_the_same_name(schema: str | None, name: str) -> None:
    table = TableName(schema, name)
    assert parse_table_name(table.display()) == table


# -- gids -----------------------------------------------------------------------------------------


def test_gid_format() -> None:
    assert make_gid("public.orders", 7, 3) == "laminar:public.orders:7:3"
    assert make_gid("public.orders", 7) == "laminar:public.orders:7:0"
    assert gid_prefix("public.orders") == "laminar:public.orders:"


def test_a_colon_in_the_sink_id_stays_unambiguous() -> None:
    gid = make_gid("a:1", 2, 0)
    assert gid == "laminar:a%3A1:2:0"
    assert make_gid("a", 1, 2) != make_gid("a:1", 2, 0)
    parsed = parse_gid(gid)
    assert parsed is not None
    assert (parsed.sink_id, parsed.epoch, parsed.part) == ("a:1", 2, 0)


def test_percent_and_unicode_are_encoded() -> None:
    assert make_gid("100%", 0) == "laminar:100%25:0:0"
    assert make_gid("é ~", 0) == "laminar:%C3%A9%20%7E:0:0"


def test_over_long_sink_ids_are_hashed_within_the_limit() -> None:
    long_id = "x" * 500
    gid = make_gid(long_id, 2**63 - 1, 2**31 - 1)
    assert len(gid.encode()) <= GID_MAX_BYTES
    parsed = parse_gid(gid)
    assert parsed is not None
    assert parsed.sink_id is None  # hashed: the id itself is not recoverable
    assert (parsed.epoch, parsed.part) == (2**63 - 1, 2**31 - 1)
    assert gid.startswith(gid_prefix(long_id))
    assert make_gid("x" * 499 + "y", 0) != make_gid(long_id, 0)


def test_hashing_never_cuts_a_percent_escape() -> None:
    for n in range(150, 170):
        prefix = gid_prefix("é" * n)
        head = prefix[len("laminar:") : prefix.index("~")]
        assert "%" not in head[-2:]


def test_gids_refuse_negative_numbers() -> None:
    with pytest.raises(ConfigError):
        make_gid("s", -1)
    with pytest.raises(ConfigError):
        make_gid("s", 0, -1)


@pytest.mark.parametrize(
    "gid",
    [
        "",
        "other:a:1:0",
        "laminar:a:1",
        "laminar:a:x:0",
        "laminar:a:1:0:9",
        "laminar:a:\u0661:0",
    ],  # an Arabic-Indic digit,
)
def test_parse_gid_rejects_foreign_ids(gid: str) -> None:
    assert parse_gid(gid) is None


@given(
    sink_id=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1),
    epoch=st.integers(0, 2**63 - 1),
    part=st.integers(0, 2**31 - 1),
)
def test_gids_round_trip_and_fit(sink_id: str, epoch: int, part: int) -> None:
    gid = make_gid(sink_id, epoch, part)
    assert len(gid.encode()) <= GID_MAX_BYTES
    assert gid.startswith(gid_prefix(sink_id))
    parsed = parse_gid(gid)
    assert parsed is not None
    assert (parsed.epoch, parsed.part) == (epoch, part)
    assert parsed.sink_id in (sink_id, None)
