"""The core-made gid end to end on a real PostgreSQL: sinks whose
ids hold ``:``, ``~``, ``%``, spaces, NUL-free control characters, combining marks, NFC vs NFD
twins and a 10 kB id (hashed) prepare an epoch, are left in doubt, and are then listed by
``laminar status``, seen by a new sink of the same id, and committed by ``laminar resolve``;
every row lands once. A NUL in a sink id is refused when the sink is made (the last test)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import laminar
from laminar.cli import main
from laminar.errors import ConfigError
from laminar.postgres._names import make_gid, parse_gid
from tests.integration.atomic_helpers import create_table, epoch_table

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

HOSTILE_IDS = [
    "a:b ~%ü",
    "%7E~%25",
    "é",  # NFC
    "e\u0301",  # NFD twin of the one above: another sink
    "tab\there\nnewline",
    "x" * 10_000,  # hashed in the gid
    "~" * 300,  # hashed, and ~ everywhere
]


def _count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def test_odd_sink_ids_prepare_list_and_resolve_end_to_end(
    clean_prepared_xacts: str, unique_name: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = clean_prepared_xacts
    tables, gids = [], []
    for i, sid in enumerate(HOSTILE_IDS):
        table = unique_name(f"t{i}")
        create_table(dsn, table)
        sink = laminar.PostgresSink(dsn, table, sink_id=sid, two_phase_part=0)
        sink.init_transactions()
        assert sink.begin_transaction(7)
        sink.write(epoch_table(7))
        sink.prepare_transaction()
        sink.close()  # a crash after PREPARE: in doubt
        gid = make_gid(sid, 7, 0)
        tables.append(table)
        gids.append(gid)
    assert len(set(gids)) == len(gids), "two sinks share a gid"

    assert main(["status", "--dsn", dsn, "--json"]) == 5
    listed = {i["id"] for i in json.loads(capsys.readouterr().out)["in_doubt"]}
    missing = [g for g in gids if g not in listed]
    assert not missing, f"laminar status does not list {missing}"

    for sid, table, gid in zip(HOSTILE_IDS, tables, gids, strict=True):
        again = laminar.PostgresSink(dsn, table, sink_id=sid, two_phase_part=0)
        seen = [p.gid for p in again.prepared_transactions()]
        again.close()
        assert seen == [gid], (sid[:20], seen)
        parsed = parse_gid(gid)
        assert parsed is not None
        assert parsed.epoch == 7
        assert parsed.sink_id in (sid, None)
        assert main(["resolve", gid, "--commit", "--dsn", dsn]) == 0, capsys.readouterr()
        capsys.readouterr()
        assert _count(dsn, table) == len(epoch_table(7))
    main(["status", "--dsn", dsn, "--json"])  # its exit code counts other tests' leftovers too
    left = {i["id"] for i in json.loads(capsys.readouterr().out)["in_doubt"]}
    assert not (left & set(gids))


def test_a_nul_in_a_sink_id_is_refused_when_the_sink_is_made() -> None:
    """A NUL in a sink id would reach libpq through ``application_name`` and fail as an
    unterminated connection string, naming neither the sink id nor the fix: the sink refuses it
    when it is made, with a ConfigError naming ``sink_id``."""
    with pytest.raises(ConfigError, match="sink_id"):
        laminar.PostgresSink("postgresql://u@h/db", "t", sink_id="a\x00b")
