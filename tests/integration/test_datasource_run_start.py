"""A ``format("laminar")`` query run's start-up, once (docs/protocol.md §4, "A run's start-up,
once"): the data source's entry points called directly (`laminar.spark.source`, no Spark)
against a real PostgreSQL and a real Apache Kafka broker. The commits of one run start up once —
the group's generation stays where the run's first commit put it — and every later commit
resumes; a new run, an ``abort``, a failed ``commit``, another coordinator or a record left to
resolve make the next commit start up (fence, resolve) as every commit did before. Every row
lands once with its exact value either way."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import psycopg
import pytest

from laminar.errors import ConfigError
from laminar.spark import _run_memo
from laminar.spark.options import parse_options
from laminar.spark.source import LaminarCommitMessage, LaminarStreamWriter, _sinks, write_task
from tests.integration.datasource_helpers import (
    OWNER,
    VAR,
    both_stores,
    expected,
    kafka_rows,
    partition,
    pg_rows,
    stores,
)

PARTS = 2


@pytest.fixture
def group(
    clean_prepared_xacts: str,
    kafka_broker: Any,
    table_name: str,
    topic_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    dsn = clean_prepared_xacts
    monkeypatch.setenv(VAR, dsn)
    monkeypatch.setenv(_run_memo.ENV, str(tmp_path / "memo"))
    raw = both_stores(dsn, kafka_broker, table_name, topic_name)
    options = parse_options(raw)
    return {
        "options": options,
        "group": _sinks(options)[2],
        "dsn": dsn,
        "table": table_name,
        "topic": topic_name,
        "bootstrap": kafka_broker.bootstrap_servers,
    }


def tasks(g: dict[str, Any], batch: int, run: str | None) -> list[LaminarCommitMessage]:
    """Batch ``batch``'s tasks (partitions ``batch * PARTS ...``) in run ``run``."""
    return [
        write_task(
            g["options"],
            batch,
            OWNER,
            p,
            iter(partition(batch * PARTS + p)),
            attempt=f"0-{batch}-{p}",
            run=run,
        )
        for p in range(PARTS)
    ]


def commit(g: dict[str, Any], batch: int, run: str | None) -> None:
    """Batch ``batch`` of run ``run`` in Spark's order: the writer's creation (which lifts a stop
    fence), the tasks, then the driver's ``commit``."""
    writer = LaminarStreamWriter(g["options"])
    writer.commit(list(tasks(g, batch, run)), batch)


def generation(g: dict[str, Any]) -> int:
    with psycopg.connect(g["dsn"]) as conn:
        row = conn.execute(
            "SELECT generation FROM laminar.sinks WHERE sink_id = %s", (g["group"],)
        ).fetchone()
    assert row is not None
    return int(row[0])


def resumes(caplog: pytest.LogCaptureFixture) -> int:
    return sum("the run's start-up holds" in r.getMessage() for r in caplog.records)


def check_once(g: dict[str, Any], batches: int) -> None:
    ids = expected(range(batches * PARTS))
    pg, kafka, left = stores(g)
    assert (pg, kafka, left) == (ids, ids, [])
    exact = [(i, f"n{i}") for i in ids]
    assert pg_rows(g) == exact
    assert kafka_rows(g) == exact


def test_the_commits_of_a_run_start_up_once_and_a_new_run_starts_up_again(
    group: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    g = group
    caplog.set_level(logging.INFO, logger="laminar.atomic")
    for batch in range(3):
        commit(g, batch, "run-1")
        assert generation(g) == 1, "the run's first commit fenced; the others resumed"
    assert resumes(caplog) == 2
    writer = LaminarStreamWriter(g["options"])
    writer.commit(list(tasks(g, 2, "run-1")), 2)  # a replay of batch 2: skipped, then committed
    assert resumes(caplog) == 3
    commit(g, 3, "run-2")  # the query restarted: a new run starts up, fencing the old one
    assert generation(g) == 2
    commit(g, 4, "run-2")
    assert generation(g) == 2
    commit(g, 5, None)  # a task that knows no run: every commit starts up, as before
    assert generation(g) == 3
    check_once(g, 6)


def test_an_abort_or_a_failed_commit_makes_the_next_commit_start_up(
    group: dict[str, Any],
) -> None:
    g = group
    commit(g, 0, "run-1")
    memo = _run_memo._path(g["group"])
    assert memo.exists()
    LaminarStreamWriter(g["options"]).abort(list(tasks(g, 1, "run-1")), 1)
    assert not memo.exists(), "abort forgets the run's start"
    commit(g, 1, "run-2")
    assert generation(g) == 2
    assert memo.exists()
    # a commit that fails: its messages carry an epoch the group's epoch base does not give
    writer = LaminarStreamWriter(g["options"])
    bad = tasks(g, 2, "run-2")
    for m in bad:
        m.epoch += 100
    with pytest.raises(ConfigError, match="wrote epoch"):
        writer.commit(list(bad), 2)
    assert not memo.exists(), "a failed commit forgets the run's start"
    LaminarStreamWriter(g["options"]).abort(list(bad), 2)  # what Spark does next
    commit(g, 2, "run-3")
    check_once(g, 3)


def test_another_coordinator_since_the_run_started_makes_the_commit_start_up(
    group: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    g = group
    caplog.set_level(logging.INFO, logger="laminar.atomic")
    commit(g, 0, "run-1")
    with psycopg.connect(g["dsn"]) as conn:  # another coordinator of the group started
        conn.execute(
            "UPDATE laminar.sinks SET generation = generation + 1 WHERE sink_id = %s",
            (g["group"],),
        )
    commit(g, 1, "run-1")
    assert generation(g) == 3, "this commit started up and fenced it"
    assert resumes(caplog) == 0
    assert any("starting up again (the generation is 2" in r.getMessage() for r in caplog.records)
    commit(g, 2, "run-1")
    assert resumes(caplog) == 1
    check_once(g, 3)


def test_a_record_left_behind_makes_the_commit_start_up_and_resolve_it(
    clean_prepared_xacts: str,
    table_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dsn = clean_prepared_xacts
    monkeypatch.setenv(VAR, dsn)
    monkeypatch.setenv(_run_memo.ENV, str(tmp_path / "memo"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table_name} (id bigint, name text)")
    options = parse_options({"postgres.dsn.env": VAR, "postgres.table": table_name})
    g = {"options": options, "group": _sinks(options)[2], "dsn": dsn, "table": table_name}
    commit(g, 0, "run-1")
    tasks(g, 7, "run-1")  # a late attempt of some batch prepared what nobody decides
    with psycopg.connect(dsn) as conn:
        left = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
    assert left == (PARTS,)
    commit(g, 1, "run-1")
    assert generation(g) == 2, "the record sent the commit to the start-up"
    with psycopg.connect(dsn) as conn:
        prepared = conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()
        records = conn.execute("SELECT dtid FROM laminar.dt_state").fetchall()
    assert (prepared, records) == ([], []), "its watcher pass rolled the record back"
    assert pg_rows(g) == [(i, f"n{i}") for i in expected(range(2 * PARTS))]
