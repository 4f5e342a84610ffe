"""The per-process connection a ``format("laminar")`` task keeps for the next task of its Spark
worker (`laminar.spark._conn_cache`), on a real PostgreSQL: reused in one process, never across a
fork or between threads, closed at exit, replaced when it died."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from laminar.spark import _conn_cache
from laminar.spark.source import _read_epoch_base


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    _conn_cache.clear()
    yield
    _conn_cache.clear()


def backend_pid(conn: psycopg.Connection[Any]) -> int:
    return int(conn.info.backend_pid)


def test_reused_in_one_process_and_prepared_once(pg_dsn: str) -> None:
    prepared: list[int] = []

    def prepare(conn: psycopg.Connection[Any]) -> None:
        prepared.append(backend_pid(conn))

    first = _conn_cache.cached_connection(pg_dsn, application_name="t cache", prepare=prepare)
    again = _conn_cache.cached_connection(pg_dsn, application_name="t cache", prepare=prepare)
    assert again is first
    assert prepared == [backend_pid(first)]
    assert first.autocommit


def test_not_handed_out_in_a_transaction_or_closed(pg_dsn: str) -> None:
    first = _conn_cache.cached_connection(pg_dsn, application_name="t cache")
    first.autocommit = False
    first.execute("SELECT 1")  # a transaction left open: not idle
    second = _conn_cache.cached_connection(pg_dsn, application_name="t cache")
    assert second is not first
    assert first.closed
    second.close()
    third = _conn_cache.cached_connection(pg_dsn, application_name="t cache")
    assert third is not second
    assert not third.closed


def test_each_thread_has_its_own_and_an_ended_threads_is_closed(pg_dsn: str) -> None:
    """Threads never share one (a thread closed another's busy connection under its running
    query: the process crashed); the connection of a thread that ended is closed by the next
    call."""
    mine = _conn_cache.cached_connection(pg_dsn, application_name="t cache")
    theirs: list[psycopg.Connection[Any]] = []
    busy = threading.Event()
    done = threading.Event()

    def other() -> None:
        conn = _conn_cache.cached_connection(pg_dsn, application_name="t cache")
        theirs.append(conn)
        with conn.transaction():  # busy (not idle) while the main thread asks for its own
            conn.execute("SELECT 1")
            busy.set()
            done.wait(30)
        theirs.append(_conn_cache.cached_connection(pg_dsn, application_name="t cache"))

    t = threading.Thread(target=other)
    t.start()
    assert busy.wait(30)
    assert _conn_cache.cached_connection(pg_dsn, application_name="t cache") is mine
    assert not theirs[0].closed, "another thread's busy connection is left alone"
    done.set()
    t.join(30)
    assert not t.is_alive()
    assert theirs[1] is theirs[0], "the thread got its own back"
    assert theirs[0] is not mine
    assert not theirs[0].closed
    assert _conn_cache.cached_connection(pg_dsn, application_name="t cache") is mine
    assert theirs[0].closed, "the ended thread's connection is closed"


def test_a_fork_child_gets_its_own_and_leaves_the_parents_open(pg_dsn: str) -> None:
    parent = _conn_cache.cached_connection(pg_dsn, application_name="t cache")
    mine = backend_pid(parent)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            conn = _conn_cache.cached_connection(pg_dsn, application_name="t cache child")
            theirs = backend_pid(conn)
            _conn_cache.clear()  # closes the child's own, never the parent's
            os.write(write, f"{theirs} {conn is parent}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    _, status = os.waitpid(child, 0)
    reply = os.read(read, 100).decode().split()
    os.close(read)
    assert os.waitstatus_to_exitcode(status) == 0
    assert reply[1] == "False"
    assert int(reply[0]) != mine
    # the parent's session survived the child (and its clear)
    assert parent.execute("SELECT pg_backend_pid()").fetchone() == (mine,)
    assert _conn_cache.cached_connection(pg_dsn, application_name="t cache") is parent


def test_closed_at_interpreter_exit(pg_dsn: str) -> None:
    script = textwrap.dedent(
        """
        import atexit, sys
        seen = {}
        # registered first, so it runs after the cache's own exit handler
        atexit.register(lambda: print("closed" if seen["conn"].closed else "open"))
        from laminar.spark import _conn_cache
        seen["conn"] = _conn_cache.cached_connection(sys.argv[1], application_name="t exit")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script, pg_dsn], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "closed"


def test_a_dead_kept_connection_is_replaced_on_the_next_read(pg_dsn: str) -> None:
    kept = _conn_cache.cached_connection(pg_dsn, application_name="t cache")
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (backend_pid(kept),))
    # an unregistered group: epoch base 0, read on a new connection after the dead one failed
    assert _read_epoch_base(pg_dsn, "conn-cache-test", ["conn-cache-sink"], None, 0) == 0
    now = _conn_cache.cached_connection(pg_dsn, application_name="t cache")
    # not "laminar task", which names a task still writing (docs/spark.md, resolve_stopped)
    assert now.info.parameter_status("application_name") == "laminar worker"
    assert now is not kept
    assert not now.closed


def names(dsn: str, pid: int) -> str | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
    return None if row is None else str(row[0])


def test_a_kept_control_connection_gives_its_lock_back(pg_dsn: str) -> None:
    """A task's control connection kept for the worker's next task (`KeptControl`): handed out
    as ``laminar task`` with autocommit off; given back with its session lock released and its
    transaction ended (as closing it did), named ``laminar worker``; the next task gets the
    same session."""
    control = _conn_cache.KeptControl(pg_dsn)
    conn = control.open()
    pid = backend_pid(conn)
    assert not conn.autocommit
    assert names(pg_dsn, pid) == "laminar task"
    conn.execute("SELECT pg_advisory_lock(hashtextextended('t kept control', 0))")
    conn.commit()  # a session lock: it outlives the transaction, as the partition's does
    conn.execute("SELECT 1")  # and a transaction left open
    with psycopg.connect(pg_dsn, autocommit=True) as other:
        locked = "SELECT pg_try_advisory_lock(hashtextextended('t kept control', 0))"
        assert other.execute(locked).fetchone() == (False,)
        control.release(conn)
        assert not conn.closed
        assert names(pg_dsn, pid) == "laminar worker"
        assert other.execute(locked).fetchone() == (True,)
    again = control.open()
    assert again is conn
    assert names(pg_dsn, pid) == "laminar task"
    control.release(again)


def test_a_control_connection_that_died_is_replaced(pg_dsn: str) -> None:
    control = _conn_cache.KeptControl(pg_dsn)
    conn = control.open()
    pid = backend_pid(conn)
    with psycopg.connect(pg_dsn, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    control.release(conn)  # cannot be reset: closed, not kept
    assert conn.closed
    fresh = control.open()
    assert fresh is not conn
    assert backend_pid(fresh) != pid
    control.release(fresh)
