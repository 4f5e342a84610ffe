"""Least privilege, written down and proven (docs/operations.md, "Least privilege"): on a Kafka
broker that enforces ACLs (``allow.everyone.if.no.acl.found=false``) and a PostgreSQL that takes
TLS + SCRAM only, principals and roles with exactly the documented rights — read from the docs'
tables — run the atomic pair, survive a crash after the decision (completed by EndTxn through
``laminar recover``), and serve ``laminar status`` and the exporter; and each right removed in
turn is an `AuthorizationError` that names it, never a hang, a retry loop or another error.

The crash runs on the OAUTHBEARER listener (a user's ``oauth_cb``) and on the mTLS one (a
client certificate whose key has a password); the removals on the OAUTHBEARER listener with
librdkafka's and the wire client's OIDC method.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from laminar import KafkaSink, PostgresSink, cli, exactly_once
from laminar.embedded.kafka_secure import SecuredKafkaBroker
from laminar.embedded.postgres_secure import SecuredPostgres
from laminar.errors import AuthorizationError
from laminar.exporter import LaminarCollector
from laminar.kafka.log import read_committed
from tests.integration.atomic_helpers import ROWS_PER_EPOCH, assert_exactly_once, epoch_table
from tests.integration.secured_helpers import WRITER_SCRIPT, Right, World, documented_rights

RIGHTS = documented_rights()
EPOCHS = 4


@pytest.fixture
def oauth_world(secured_kafka: SecuredKafkaBroker, secured_postgres: SecuredPostgres) -> World:
    return World(secured_kafka, secured_postgres, "OAUTH")


def run_writer(
    world: World, checkpoint: Path, crash_at: str | None
) -> subprocess.CompletedProcess[str]:
    producer = world.settings("writer")
    token = producer.pop("oauth_cb", None)
    spec = {
        "bootstrap": world.bootstrap,
        "topic": world.topic,
        "tid": world.tid,
        "dsn": world.dsns["writer"],
        "table": world.table,
        "epochs": EPOCHS,
        "checkpoint": str(checkpoint),
        "producer": producer,
        "token": [token.url, token.client_id, token.secret] if token else None,
    }
    env = {**os.environ, "LAMINAR_TEST_SECURED": json.dumps(spec)}
    env.pop("LAMINAR_CRASH_AT", None)
    if crash_at:
        env["LAMINAR_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, str(WRITER_SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def laminar_cli(
    world: World, who: str, *args: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> tuple[int, str]:
    """``laminar <args>`` in this process as ``who`` (its DSN, its Kafka settings): exit code
    and everything it printed."""
    for key, value in world.oauth_env(who).items():
        monkeypatch.setenv(key, value)
    argv = [*args, "--dsn", world.dsns[who]]
    for key, value in world.cli_config(who).items():
        argv += ["--kafka-config", f"{key}={value}"]
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out + out.err


def scrape(world: World, monkeypatch: pytest.MonkeyPatch) -> LaminarCollector:
    """One scrape of the exporter as the reader (its Kafka clients closed after it)."""
    for key, value in world.oauth_env("reader").items():
        monkeypatch.setenv(key, value)
    collector = LaminarCollector(world.dsns["reader"], kafka_extra=world.cli_config("reader"))
    try:
        collector.read()
    finally:
        collector.close()
    return collector


@pytest.mark.parametrize(
    ("listener", "recovered_by"),
    [("OAUTH", "laminar recover"), ("MTLS", "the writer's start-up")],
)
def test_the_documented_rights_suffice_through_a_crash_completed_by_endtxn(
    secured_kafka: SecuredKafkaBroker,
    secured_postgres: SecuredPostgres,
    listener: str,
    recovered_by: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(secured_kafka, secured_postgres, listener)
    world.grant(RIGHTS)
    checkpoint = tmp_path / "checkpoint"
    outputs: list[str] = []
    completion = ""

    # killed after epoch 1's decision: PostgreSQL committed, Kafka's transaction prepared
    crashed = run_writer(world, checkpoint, "atomic.after_decision@2")
    outputs.append(crashed.stdout + crashed.stderr)
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr[-3000:]
    assert crashed.stdout.splitlines() == ["epoch 0: committed"]

    # the reader sees the decided epoch behind in Kafka, with nothing but its rights
    code, shown = laminar_cli(
        world, "reader", "status", "--json", monkeypatch=monkeypatch, capsys=capsys
    )
    outputs.append(shown)
    assert code == 5, shown
    status = json.loads(shown)
    assert [i["id"] for i in status["in_doubt"]] == [f"kafka:{world.tid}"], shown
    kafka_row = next(s for s in status["sinks"] if s["sink_id"] == world.tid)
    assert (kafka_row["last_committed_epoch"], kafka_row["decided_epoch"]) == (0, 1), kafka_row
    collector = scrape(world, monkeypatch)
    assert dict(collector.errors) == {"postgres": 0, "kafka": 0}, collector.last_error
    assert [t for t, _, _ in collector.read()[0].kafka_behind] == [world.tid]
    collector.close()

    if recovered_by == "laminar recover":
        # the writer's rights complete it at the protocol level: EndTxn, not the redo log
        with caplog.at_level(logging.INFO):
            code, shown = laminar_cli(
                world, "writer", "recover", "--older-than", "0", monkeypatch=monkeypatch,
                capsys=capsys,
            )  # fmt: skip
        outputs += [shown, caplog.text]
        assert code == 0, shown + caplog.text[-3000:]
        completion = caplog.text
        code, shown = laminar_cli(
            world, "reader", "status", "--json", monkeypatch=monkeypatch, capsys=capsys
        )
        assert code == 0, shown
        assert json.loads(shown)["in_doubt"] == []

    # the restarted writer (its start-up completes epoch 1 if recover did not) skips the
    # replayed epoch 1 and writes the rest
    restarted = run_writer(world, checkpoint, None)
    outputs.append(restarted.stdout + restarted.stderr)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr[-3000:]
    assert restarted.stdout.splitlines() == [
        "epoch 1: skipped", "epoch 2: committed", "epoch 3: committed", "done"
    ]  # fmt: skip
    if recovered_by == "the writer's start-up":
        completion = restarted.stderr
    assert "decided epoch 1 committed in Kafka by EndTxn" in completion, completion[-3000:]
    assert "redo log" not in completion, completion[-3000:]
    assert_exactly_once(
        secured_kafka.bootstrap_servers, world.topic, world.admin_dsn, world.table, EPOCHS
    )
    collector = scrape(world, monkeypatch)
    outputs += [repr(collector), str(collector.last_error)]
    assert collector.errors == {"postgres": 0, "kafka": 0}, collector.last_error
    # no token, client secret, key password or role password in any of it
    assert world.leaked("\n".join(outputs)) == []


def _cases() -> list[Any]:
    return [pytest.param(r, id=r.id) for r in RIGHTS if not r.best_effort]


@pytest.mark.parametrize("right", _cases())
def test_each_right_removed_is_an_authorization_error_naming_it(
    oauth_world: World, right: Right, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    world = oauth_world
    world.grant([r for r in RIGHTS if r != right])
    named = _named(world, right)
    started = time.monotonic()
    if right.who == "writer":
        try:
            write_epochs(world, 2)
        except AuthorizationError as e:
            message = f"{type(e).__name__}: {e}"
        else:  # the writer went through: `laminar recover` (the writer's tool) must need it
            code, message = laminar_cli(
                world, "writer", "recover", "--older-than", "0", monkeypatch=monkeypatch,
                capsys=capsys,
            )  # fmt: skip
            assert code == 1, message  # an error, not "unresolved" (5)
        assert "AuthorizationError" in message, message
        assert all(part in message for part in named), (named, message)
        assert world.leaked(message) == []
        # each store holds the same epochs, each once (none when the writer was refused)
        with psycopg.connect(world.admin_dsn) as conn:
            (rows,) = conn.execute(f"SELECT count(*) FROM {world.table}").fetchone() or (0,)
        epochs = rows // ROWS_PER_EPOCH
        assert_exactly_once(
            world.kafka.bootstrap_servers, world.topic, world.admin_dsn, world.table, epochs
        )
    else:
        write_epochs(world, 1)  # as the writer, with every right
        code, shown = laminar_cli(world, "reader", "status", monkeypatch=monkeypatch, capsys=capsys)
        marker_refused = right.store == "kafka" and "AuthorizationError" in shown
        if marker_refused:  # a marker unreadable: "nothing in doubt" unproven
            assert "unreadable: 1 Kafka marker(s)" in shown, shown
            # 5 when the unreadable marker leaves a decided epoch unproven (listed in doubt,
            # outcome "unreadable"), else 1: never 0
            assert code == (1 if "in doubt: none" in shown else 5), shown
        collector = scrape(world, monkeypatch)
        if marker_refused and "in doubt: none" not in shown:
            # the exporter cannot read it either: an error counted, not a silent "behind"
            assert collector.errors["kafka"] >= 1, (collector.errors, collector.last_error)
        said = [shown, str(collector.last_error)]
        assert any(
            "AuthorizationError" in text and all(part in text for part in named) for text in said
        ), (named, said)
        assert world.leaked("\n".join(said)) == []
    # refused at once, not retried until a bound
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("right", [r for r in RIGHTS if r.best_effort], ids=lambda r: r.id)
def test_a_best_effort_grant_removed_is_a_warning_naming_it(
    oauth_world: World, right: Right, caplog: pytest.LogCaptureFixture
) -> None:
    world = oauth_world
    world.grant([r for r in RIGHTS if r != right])
    with caplog.at_level(logging.WARNING, logger="laminar.stats"):
        write_epochs(world, 2)
    warned = [r.getMessage() for r in caplog.records if r.name == "laminar.stats"]
    assert len(warned) == 1, warned
    assert "GRANT SELECT, INSERT, UPDATE ON laminar.commit_stats" in warned[0]
    assert len(read_committed(world.kafka.bootstrap_servers, world.topic)) == 2 * ROWS_PER_EPOCH


def write_epochs(world: World, epochs: int) -> None:
    """The atomic pair as the writer (librdkafka and the wire client on the OIDC method)."""
    kafka = KafkaSink(
        world.bootstrap,
        world.topic,
        world.tid,
        key="id",
        producer_config=world.settings("writer", oidc=True),
        init_timeout_s=10.0,
        commit_timeout_s=10.0,
    )
    postgres = PostgresSink(world.dsns["writer"], world.table)
    writer = exactly_once(kafka, postgres, redo="log", retry_backoff_s=0.1)
    try:
        for epoch in range(epochs):
            writer.write_epoch(epoch, epoch_table(epoch))
    finally:
        writer.close()


def _named(world: World, right: Right) -> list[str]:
    """What an error must say to name ``right``: the operation and the object (a Kafka error
    names the resource; PostgreSQL's names the table, the hint the privileges to grant)."""
    name = world.resolve(right.obj)
    if right.store == "kafka":
        return [f"on {right.kind.lower().replace('_', ' ')} {name!r}", right.operation]
    if right.kind == "SCHEMA":
        return [f"GRANT {right.operation} ON SCHEMA {name}"]
    return [name, right.operation]
