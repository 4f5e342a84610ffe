"""laminar.embedded.EphemeralPostgres against a real PostgreSQL server."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from laminar.embedded import EphemeralPostgres
from laminar.embedded._process import port_accepts


def test_session_server_allows_prepared_transactions(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SHOW max_prepared_transactions").fetchone()
    assert row is not None
    assert int(row[0]) > 0


def test_starts_on_loopback_with_the_requested_database(
    postgres_factory: Callable[..., EphemeralPostgres],
) -> None:
    server = postgres_factory(database="orders_db")
    assert server.dsn.startswith(f"postgresql://postgres@127.0.0.1:{server.port}/orders_db")
    with psycopg.connect(server.dsn) as conn:
        database, listen = conn.execute(
            "SELECT current_database(), current_setting('listen_addresses')"
        ).fetchone() or ("", "")
    assert database == "orders_db"
    assert listen == "127.0.0.1"


def test_runs_as_an_unprivileged_user(postgres_factory: Callable[..., EphemeralPostgres]) -> None:
    server = postgres_factory()
    assert server.pid is not None
    owner = Path(f"/proc/{server.pid}").stat().st_uid
    if os.geteuid() == 0:
        assert owner != 0, "PostgreSQL must run as an unprivileged account when we are root"
    else:
        assert owner == os.geteuid()


def test_prepare_transaction_then_commit_prepared(
    clean_prepared_xacts: str, table_name: str
) -> None:
    gid = f"laminar:{table_name}:1:0"
    with psycopg.connect(clean_prepared_xacts, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table_name} (id int PRIMARY KEY)")
        conn.execute("BEGIN")
        conn.execute(f"INSERT INTO {table_name} VALUES (1), (2)")
        conn.execute(f"PREPARE TRANSACTION '{gid}'")
        prepared = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE gid = %s", (gid,)
        ).fetchone()
        assert prepared == (1,)
        assert conn.execute(f"SELECT count(*) FROM {table_name}").fetchone() == (0,)
        conn.execute(f"COMMIT PREPARED '{gid}'")
        assert conn.execute(f"SELECT count(*) FROM {table_name}").fetchone() == (2,)


def test_clean_prepared_xacts_rolls_back_leftovers(
    postgres: object, pg_dsn: str, table_name: str
) -> None:
    from tests.fixtures import _rollback_prepared

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table_name} (id int)")
        conn.execute("BEGIN")
        conn.execute(f"INSERT INTO {table_name} VALUES (1)")
        conn.execute(f"PREPARE TRANSACTION 'laminar:{table_name}:7:0'")
    _rollback_prepared(pg_dsn)
    with psycopg.connect(pg_dsn) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchone()
        rows = conn.execute(f"SELECT count(*) FROM {table_name}").fetchone()
    assert left == (0,)
    assert rows == (0,)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_restart_keeps_data_and_prepared_transactions(
    postgres_factory: Callable[..., EphemeralPostgres], mode: str
) -> None:
    server = postgres_factory()
    port = server.port
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int)")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t VALUES (2)")
        conn.execute("PREPARE TRANSACTION 'laminar:restart:1:0'")
    survivor = psycopg.connect(server.dsn)

    server.restart(mode)  # type: ignore[arg-type]

    assert server.port == port
    with pytest.raises(psycopg.OperationalError):
        survivor.execute("SELECT 1")  # the restart cut existing connections
    survivor.close()
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall() == [
            ("laminar:restart:1:0",)
        ]
        conn.execute("COMMIT PREPARED 'laminar:restart:1:0'")
        assert conn.execute("SELECT id FROM t ORDER BY id").fetchall() == [(1,), (2,)]


def test_kill_then_start_recovers_committed_data(
    postgres_factory: Callable[..., EphemeralPostgres],
) -> None:
    server = postgres_factory()
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t AS SELECT generate_series(1, 100) AS id")
    pid = server.pid
    assert pid is not None

    server.kill()

    assert not server.is_running()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    server.start()
    with psycopg.connect(server.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (100,)


def test_password_authentication(postgres_factory: Callable[..., EphemeralPostgres]) -> None:
    server = postgres_factory(password="s3cret pass")
    with psycopg.connect(server.dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    without = server.dsn.replace(":s3cret%20pass@", "@")
    assert without != server.dsn
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(without, connect_timeout=5)


def test_stop_removes_the_cluster_and_the_process() -> None:
    server = EphemeralPostgres().start()
    root, pid, port = server.data_dir.parent, server.pid, server.port
    assert root.is_dir()
    assert pid is not None

    server.stop()

    assert not root.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not port_accepts("127.0.0.1", port)


def test_context_manager_stops_on_error() -> None:
    server = EphemeralPostgres()
    seen: list[Path] = []

    def fail_inside() -> None:
        with server:
            seen.append(server.data_dir.parent)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert seen
    assert not seen[0].exists()
    assert not server.is_running()


@pytest.mark.e2e
def test_starts_while_a_spark_connect_client_is_live(
    spark: Any, postgres_factory: Callable[..., EphemeralPostgres]
) -> None:
    """A live Spark Connect client (gRPC threads) in this process must not break PostgreSQL.

    gRPC's fork handlers can abort a plain fork()ed child (SIGABRT) before it execs: seen when the
    integration tests started a second server after the e2e tests had opened a Spark session, and
    the demo restarts PostgreSQL while its Spark client is live. The servers are started so that no
    fork handler runs in the child (privileges dropped by setpriv after exec, not by Popen).
    """
    assert spark.range(3).count() == 3
    for _ in range(3):
        server = postgres_factory()
        server.restart()
        with psycopg.connect(server.dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
