"""The metadata migrations as data (no server): numbering, quoting, and the v1 tables."""

from __future__ import annotations

import pytest
from psycopg import sql

from laminar import metadata
from laminar.metadata import MIGRATIONS, SCHEMA_VERSION, Migration


def test_versions_are_consecutive_from_one() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert MIGRATIONS[-1].version == SCHEMA_VERSION


def test_a_gap_in_the_numbering_is_refused() -> None:
    with pytest.raises(AssertionError, match="numbered 1, 2, 3"):
        metadata._check_migrations((MIGRATIONS[0], Migration(3, "skips 2", ())))


def test_v1_creates_the_tables_of_protocol_section_7_with_quoted_names() -> None:
    text = " ".join(s.as_string(None) for s in MIGRATIONS[0].statements)
    for table in ("sinks", "sink_epochs"):
        assert f'CREATE TABLE IF NOT EXISTS "laminar"."{table}"' in text
    for column in (
        "owner text",
        "generation bigint",
        "config jsonb",
        "rows bigint",
        "bytes bigint",
    ):
        assert column in text


def test_metadata_table_names_are_identifiers() -> None:
    assert metadata.table("sink_epochs") == sql.Identifier("laminar", "sink_epochs")


def test_v3_appends_the_stop_fence_table() -> None:
    v3 = MIGRATIONS[2]
    assert v3.version == 3
    assert SCHEMA_VERSION >= 3
    text = " ".join(s.as_string(None) for s in v3.statements)
    assert 'CREATE TABLE IF NOT EXISTS "laminar"."stop_fence"' in text
    for column in ("group_id text PRIMARY KEY", "epoch bigint NOT NULL", "fenced_at timestamptz"):
        assert column in text


def test_v5_adds_the_stop_fences_writer() -> None:
    v5 = MIGRATIONS[4]
    assert v5.version == 5
    text = " ".join(s.as_string(None) for s in v5.statements)
    assert 'ALTER TABLE "laminar"."stop_fence" ADD COLUMN IF NOT EXISTS writer text' in text


def test_v4_appends_the_commit_statistics_table() -> None:
    v4 = MIGRATIONS[3]
    assert v4.version == 4
    text = " ".join(s.as_string(None) for s in v4.statements)
    assert 'CREATE TABLE IF NOT EXISTS "laminar"."commit_stats"' in text
    for column in ("group_id text PRIMARY KEY", "commits bigint", "latency_buckets bigint[]"):
        assert column in text
