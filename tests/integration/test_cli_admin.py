"""`laminar status|resolve|recover|reset` against real servers, on hand-made in-doubt
transactions and on a crashed atomic writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

import laminar
from laminar.cli import main
from tests.integration.atomic_helpers import (
    abort_prepared,
    create_table,
    epoch_table,
    killed,
    make_group,
    run_writer,
)


def hand_made_prepared(dsn: str, table: str, gid: str) -> None:
    """PREPARE TRANSACTION by hand, as a crashed scale-out task would leave it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("BEGIN")
        conn.execute(f"INSERT INTO {table} VALUES (424242, 'hand', 7)")
        conn.execute(f"PREPARE TRANSACTION '{gid}'")


def hand_made_decision(dsn: str, dtid: str, epoch: int, state: str, gid: str | None = None) -> None:
    """A ``laminar.dt_state`` record by hand (and the PostgreSQL participant ``gid``)."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO laminar.dt_state (dtid, group_id, epoch, state) VALUES (%s, 'g', %s, %s)",
            (dtid, epoch, state),
        )
        if gid is not None:
            conn.execute(
                "INSERT INTO laminar.dt_participant (dtid, participant, kind, resource) VALUES "
                "(%s, 'pg', 'postgres', %s)",
                (dtid, gid),
            )


def count(dsn: str, query: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def test_status_shows_and_resolve_commits_a_hand_made_in_doubt_transaction(
    clean_prepared_xacts: str, table_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = clean_prepared_xacts
    create_table(dsn, table_name)
    laminar.PostgresSink(dsn, table_name).init_transactions()  # the laminar schema
    gid = f"laminar:public.{table_name}:7:0"
    hand_made_prepared(dsn, table_name, gid)

    assert main(["status", "--dsn", dsn]) == 5
    out = capsys.readouterr().out
    assert gid in out
    assert "participant" in out
    assert "none" in out
    assert main(["status", "--dsn", dsn, "--json"]) == 5
    doc = json.loads(capsys.readouterr().out)
    assert gid in [i["id"] for i in doc["in_doubt"]]
    assert "password" not in doc["database"]

    assert main(["resolve", gid, "--commit", "--dsn", dsn]) == 0
    assert "commit done" in capsys.readouterr().out
    assert count(dsn, f"SELECT count(*) FROM {table_name} WHERE id = 424242") == 1
    main(["status", "--dsn", dsn])
    assert gid not in capsys.readouterr().out
    assert main(["resolve", gid, "--commit", "--dsn", dsn]) == 6


def test_status_calls_an_item_lingering_by_the_lingering_after_threshold(
    clean_prepared_xacts: str, table_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--lingering-after S``: an in-doubt transaction at least S seconds old lingers (the
    core's rule, `is_lingering`), in the table, the JSON item and the JSON count."""
    dsn = clean_prepared_xacts
    create_table(dsn, table_name)
    laminar.PostgresSink(dsn, table_name).init_transactions()
    gid = f"laminar:public.{table_name}:8:0"
    hand_made_prepared(dsn, table_name, gid)

    def listed(*extra: str) -> tuple[dict[str, Any], str]:
        capsys.readouterr()
        assert main(["status", "--dsn", dsn, "--json", *extra]) == 5
        doc = json.loads(capsys.readouterr().out)
        assert main(["status", "--dsn", dsn, *extra]) == 5
        (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(gid)]
        (item,) = [i for i in doc["in_doubt"] if i["id"] == gid]
        assert doc["lingering"] == sum(1 for i in doc["in_doubt"] if i["lingering"])
        return item, line

    item, line = listed()  # the default, 300 s: a new one does not linger
    assert item["lingering"] is False
    assert line.split()[5] == "no"
    item, line = listed("--lingering-after", "0")
    assert item["lingering"] is True
    assert line.split()[5] == "yes"


def test_resolve_refuses_to_go_against_a_recorded_decision_without_force(
    clean_prepared_xacts: str, table_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = clean_prepared_xacts
    create_table(dsn, table_name)
    laminar.PostgresSink(dsn, table_name).init_transactions()
    gid = f"laminar:public.{table_name}:3:1"
    hand_made_decision(dsn, f"laminar:g:3:{table_name}", 3, "rollback", gid)
    hand_made_prepared(dsn, table_name, gid)
    assert main(["resolve", gid, "--commit", "--dsn", dsn]) == 4
    assert "ROLLBACK" in capsys.readouterr().err
    assert main(["resolve", gid, "--commit", "--force", "--dsn", dsn]) == 0
    assert count(dsn, f"SELECT count(*) FROM {table_name} WHERE id = 424242") == 1


def test_a_prepared_gid_belongs_to_the_record_that_names_it_exactly(
    clean_prepared_xacts: str, table_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One matching rule (docs/engine.md §4): a ``dt_participant`` row owns the gid it names,
    exactly. The scale-out coordinator's case — the row names the task's gid — finds its
    decision; the watcher's old prefix rule took ``…:1`` for ``…:10``, whose partition has no
    record: it is an orphan, not the ``rollback`` decision of partition 1. Judged where the
    matching is done: the watcher's inspection (the core's pass), item by prepared gid."""
    from laminar.protocol.watcher import inspect

    dsn = clean_prepared_xacts
    create_table(dsn, table_name)
    laminar.PostgresSink(dsn, table_name).init_transactions()
    dtid = f"laminar:g:3:{table_name}"
    named = f"laminar:public.{table_name}:3:1"
    longer = f"laminar:public.{table_name}:3:10"
    hand_made_decision(dsn, dtid, 3, "rollback", named)
    hand_made_prepared(dsn, table_name, named)
    hand_made_prepared(dsn, table_name, longer)
    with psycopg.connect(dsn) as conn:
        found = {i.id: i for i in inspect(conn) if i.id in (named, longer)}
    # the gid the record names: its decision, of that distributed transaction
    assert (found[named].kind, found[named].decision) == ("participant", "rollback")
    assert f"(decision {dtid})" in found[named].detail
    # the longer gid: no decision at all
    item = found[longer]
    assert (item.kind, item.decision) == ("participant", None)
    assert "(decision none)" in item.detail
    # no decision names it: committing it is not against one (the prefix rule refused it,
    # exit 4, as if it were partition 1's rollback)
    capsys.readouterr()
    assert main(["resolve", longer, "--commit", "--dsn", dsn]) == 0
    assert "commit done" in capsys.readouterr().out
    assert count(dsn, f"SELECT count(*) FROM {table_name} WHERE id = 424242") == 1
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT state FROM laminar.dt_state WHERE dtid = %s", (dtid,))
        assert row.fetchone() == ("rollback",)  # partition 1's record untouched


def test_resolve_never_writes_a_transition_the_table_refuses(
    clean_prepared_xacts: str, table_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``laminar resolve <dtid> --rollback`` of a record decided ``commit`` is refused by the
    core (exit 4, the record unchanged); with ``--force`` it is the table's ``force_rollback``."""
    dsn = clean_prepared_xacts
    create_table(dsn, table_name)
    laminar.PostgresSink(dsn, table_name).init_transactions()
    dtid = f"laminar:g:4:{table_name}"
    hand_made_decision(dsn, dtid, 4, "commit")
    assert main(["resolve", dtid, "--rollback", "--dsn", dsn]) == 4
    assert "COMMIT" in capsys.readouterr().err
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT state FROM laminar.dt_state WHERE dtid = %s", (dtid,))
        assert row.fetchone() == ("commit",)
    assert main(["resolve", dtid, "--rollback", "--force", "--dsn", dsn]) == 0
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM laminar.dt_state WHERE dtid = %s", (dtid,))
        assert row.fetchone() == (0,)  # rolled back and concluded


def test_recover_rolls_back_an_undecided_participant_and_reports_lingering(
    clean_prepared_xacts: str, table_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = clean_prepared_xacts
    create_table(dsn, table_name)
    laminar.PostgresSink(dsn, table_name).init_transactions()
    gid = f"laminar:public.{table_name}:9:0"
    hand_made_prepared(dsn, table_name, gid)
    # too young for the default threshold: left alone
    assert main(["recover", "--dsn", dsn]) == 5
    assert "wait" in capsys.readouterr().out
    main(["recover", "--dsn", dsn, "--older-than", "0", "--json"])
    report = json.loads(capsys.readouterr().out)
    (ours,) = [i for i in report["items"] if i["id"] == gid]
    assert (ours["action"], ours["outcome"]) == ("roll_back", "resolved")
    assert count(dsn, f"SELECT count(*) FROM {table_name}") == 0


def test_status_and_resolve_a_crashed_atomic_writer(
    kafka_broker: Any,
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic, table = unique_name("topic"), unique_name("tbl")
    kafka_broker.create_topic(topic, partitions=1)
    create_table(pg_dsn, table)
    tid = f"tid-{topic}"
    argv = [kafka_bootstrap, topic, pg_dsn, table, tid, "3", str(tmp_path / "ckpt"), "replay"]
    assert killed(run_writer(argv, "atomic.after_decision@2"))
    abort_prepared(kafka_bootstrap, tid)  # the broker gave the transaction up
    assert main(["status", "--dsn", pg_dsn, "--json"]) == 5
    doc = json.loads(capsys.readouterr().out)
    behind = [i for i in doc["in_doubt"] if i["id"] == f"kafka:{tid}"]
    assert behind
    assert behind[0]["kind"] == "kafka_behind"
    assert behind[0]["epoch"] == 1
    # no redo log and no transaction left: only the replay can complete it
    assert main(["resolve", f"kafka:{tid}", "--commit", "--dsn", pg_dsn]) == 5
    assert "replay" in capsys.readouterr().out
    assert main(["resolve", f"kafka:{tid}", "--rollback", "--dsn", pg_dsn]) == 4
    capsys.readouterr()
    # the writer restarted from its checkpoint replays batch 1 and completes it
    writer = make_group(kafka_bootstrap, topic, pg_dsn, table, tid)
    assert writer.write_epoch(1, epoch_table(1)).committed
    assert writer.write_epoch(2, epoch_table(2)).committed
    writer.close()
    assert main(["status", "--dsn", pg_dsn, "--json"]) in (0, 5)
    doc = json.loads(capsys.readouterr().out)
    assert not [i for i in doc["in_doubt"] if i["id"] == f"kafka:{tid}"]


def test_reset_starts_a_group_over_for_a_new_query(
    kafka_broker: Any,
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic, table = unique_name("topic"), unique_name("tbl")
    kafka_broker.create_topic(topic, partitions=1)
    create_table(pg_dsn, table)
    tid = f"tid-{topic}"
    old = make_group(kafka_bootstrap, topic, pg_dsn, table, tid, owner="query-a")
    for epoch in range(3):
        old.write_epoch(epoch, epoch_table(epoch))
    old.close()
    new = make_group(kafka_bootstrap, topic, pg_dsn, table, tid, owner="query-b")
    with pytest.raises(laminar.ConfigError, match="query-a"):
        new.write_epoch(0, epoch_table(10))
    new.close()
    group = new.group_id
    assert group is not None
    assert main(["reset", group, "--dsn", pg_dsn]) == 0
    assert "epoch 3" in capsys.readouterr().out
    again = make_group(kafka_bootstrap, topic, pg_dsn, table, tid, owner="query-b")
    assert again.write_epoch(0, epoch_table(10)).committed
    assert again.epoch_base == 3
    again.close()
    assert count(pg_dsn, f"SELECT count(*) FROM {table} WHERE epoch = 10") == 20


def test_a_sink_whose_brokers_are_gone_does_not_stall_status_or_recover(
    postgres: Any,
    broker_factory: Any,
    unique_name: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A registered Kafka sink on a decommissioned cluster: `status` reports it as unknown and
    `recover` still resolves the rest, each within seconds, not librdkafka's retry horizon."""
    import time

    dsn = postgres.create_database(unique_name("db"))
    broker = broker_factory()
    topic, table = unique_name("topic"), unique_name("tbl")
    broker.create_topic(topic, partitions=1)
    create_table(dsn, table)
    writer = make_group(broker.bootstrap_servers, topic, dsn, table, f"tid-{topic}")
    writer.write_epoch(0, epoch_table(0))
    writer.close()
    gid = f"laminar:public.{table}:7:0"
    hand_made_prepared(dsn, table, gid)
    broker.stop()

    started = time.monotonic()
    assert main(["status", "--dsn", dsn, "--json"]) == 5
    doc = json.loads(capsys.readouterr().out)
    kafka_rows = [s for s in doc["sinks"] if s["kind"] == "kafka"]
    assert len(kafka_rows) == 1
    assert str(kafka_rows[0]["last_committed_epoch"]).startswith("?")
    assert gid in [i["id"] for i in doc["in_doubt"]]
    assert main(["recover", "--dsn", dsn, "--older-than", "0"]) in (0, 5)
    capsys.readouterr()
    assert count(dsn, f"SELECT count(*) FROM pg_prepared_xacts WHERE gid = '{gid}'") == 0
    assert time.monotonic() - started < 60
