"""Shared helpers of the Postgres sink's integration tests (not a test module)."""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

REPO = Path(__file__).resolve().parents[2]

DDL = "(id int8 NOT NULL, epoch int8 NOT NULL, payload text, amount numeric(12, 2))"


def create_table(dsn: str, name: str, ddl: str = DDL, schema: str | None = None) -> str:
    """Create ``name`` (in ``schema``) and return it as a sink's ``table=`` string."""
    ident = sql.Identifier(schema, name) if schema else sql.Identifier(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if schema:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {} " + ddl).format(ident))
    quoted = '"' + name.replace('"', '""') + '"'
    return f'"{schema}".{quoted}' if schema else quoted


def batch(epoch: int, rows: int = 5, start: int = 0, tag: str = "x") -> pa.Table:
    """Rows ``start..start+rows`` of ``epoch``: ids are unique across epochs."""
    ids = [epoch * 1_000_000 + start + i for i in range(rows)]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "epoch": pa.array([epoch] * rows, pa.int64()),
            "payload": pa.array([f"{tag}-{epoch}-{i}" for i in ids], pa.string()),
            "amount": pa.array([i % 1000 for i in ids], pa.int64()),
        }
    )


def query(dsn: str, statement: str | sql.Composable, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


def count_by_epoch(dsn: str, table: str) -> dict[int, int]:
    rows = query(dsn, f"SELECT epoch, count(*) FROM {table} GROUP BY epoch ORDER BY epoch")
    return {int(e): int(n) for e, n in rows}


def duplicates(dsn: str, table: str) -> int:
    rows = query(dsn, f"SELECT count(*) - count(DISTINCT id) FROM {table}")
    return int(rows[0][0])


def sink_epoch(dsn: str, sink_id: str) -> int | None:
    rows = query(dsn, "SELECT epoch FROM laminar.sink_epochs WHERE sink_id = %s", (sink_id,))
    return int(rows[0][0]) if rows else None


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def run_child(
    sink: Any,
    epochs: list[int],
    *,
    crash_at: str | None = None,
    rows: int = 5,
    tag: str = "x",
    timeout: float = 120.0,
    extra_env: dict[str, str] | None = None,
    batches: str = "tests.integration.pg_helpers",
) -> subprocess.CompletedProcess[str]:
    """Write ``epochs`` with ``exactly_once(sink)`` in a fresh Python process (the sink travels
    pickled, as Spark Connect ships it), optionally killed at a crash point. ``batches``: the
    module whose ``batch(epoch, rows, tag=...)`` makes each epoch's rows."""
    script = textwrap.dedent(
        f"""
        import pickle, sys
        sys.path.insert(0, {str(REPO)!r})
        import laminar
        from {batches} import batch
        sink = pickle.loads(bytes.fromhex(sys.argv[1]))
        writer = laminar.exactly_once(sink, retry_backoff_s=0.05)
        for epoch in {epochs!r}:
            result = writer.write_epoch(epoch, batch(epoch, {rows}, tag={tag!r}))
            print(epoch, "committed" if result.committed else "skipped", flush=True)
        writer.close()
        """
    )
    env = dict(os.environ)
    env.pop("LAMINAR_CRASH_AT", None)
    if crash_at:
        env["LAMINAR_CRASH_AT"] = crash_at
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-c", script, pickle.dumps(sink).hex()],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
        check=False,
    )


def backend_pids(dsn: str, application_name: str) -> list[int]:
    rows = query(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
        (application_name,),
    )
    return [int(r[0]) for r in rows]


def terminate(dsn: str, pid: int) -> None:
    query(dsn, "SELECT pg_terminate_backend(%s)", (pid,))


class CommitReplyDropper:
    """A TCP proxy in front of PostgreSQL. Once `arm`-ed, it forwards the client's next COMMIT
    (or COMMIT PREPARED) to the server, waits for the server's reply and then cuts both
    connections without relaying it: the commit happened, but the client cannot know."""

    def __init__(self, host: str, port: int) -> None:
        import socket

        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._armed = threading.Event()
        self.cuts = 0
        self._closed = False
        self._sockets: list[Any] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self) -> None:
        self._armed.set()

    def dsn(self, dsn: str) -> str:
        return psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(self.port))

    def _accept(self) -> None:
        import socket

        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            self._sockets += [client, server]
            state = {"swallow": False}
            threading.Thread(
                target=self._pump, args=(client, server, state, True), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(server, client, state, False), daemon=True
            ).start()

    def _pump(self, src: Any, dst: Any, state: dict[str, bool], upstream: bool) -> None:
        import socket

        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream and self._armed.is_set() and b"COMMIT" in data:
                    self._armed.clear()
                    state["swallow"] = True
                    dst.sendall(data)
                    continue
                if not upstream and state["swallow"]:
                    self.cuts += 1  # the server answered the COMMIT: drop the answer
                    break
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
