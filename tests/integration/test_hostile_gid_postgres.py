"""Hostile pass over the core-made gid (08f80c8), end to end on a real PostgreSQL: sinks whose
ids hold ``:``, ``~``, ``%``, spaces, NUL-free control characters, combining marks, NFC vs NFD
twins and a 10 kB id (hashed) prepare an epoch, are left in doubt, and are then listed by
``laminar status``, seen by a new sink of the same id, and committed by ``laminar resolve``;
every row lands once. A NUL in a sink id: see the last test. DEFECT tests fail on the branch;
SOUND tests passed when written."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import laminar
from laminar.cli import main
from laminar.errors import ConfigError, LaminarError
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


def test_sound_hostile_sink_ids_prepare_list_and_resolve_end_to_end(
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
    assert main(["status", "--dsn", dsn, "--json"]) == 0
    left = {i["id"] for i in json.loads(capsys.readouterr().out)["in_doubt"]}
    assert not (left & set(gids))


def test_defect_minor_a_nul_in_a_sink_id_is_blamed_on_the_connection_string(
    clean_prepared_xacts: str, table_name: str
) -> None:
    """DEFECT (minor, pre-existing — not the gid: the gid percent-encodes NUL as %00): a NUL in
    a sink id reaches libpq through ``application_name=laminar <sink id>`` and fails as a
    FatalError "connecting to database … unterminated quoted string in connection info
    string" — it names neither sink_id as the cause nor the fix. Nothing is written (checked)."""
    dsn = clean_prepared_xacts
    create_table(dsn, table_name)
    writer = laminar.exactly_once(laminar.PostgresSink(dsn, table_name, sink_id="a\x00b"))
    with pytest.raises(LaminarError) as caught:
        writer.write_epoch(0, epoch_table(0))
    writer.close()
    assert _count(dsn, table_name) == 0
    assert isinstance(caught.value, ConfigError), repr(caught.value)
    assert "sink_id" in str(caught.value), caught.value
