"""One autocommit PostgreSQL connection per process, thread, DSN and use, kept for the next
``format("laminar")`` task that the same Spark Python worker runs (docs/benchmarks.md, "Where a
task's time goes"; Spark reuses its Python workers between tasks, ``spark.python.worker.reuse``)
or the next micro-batch's writer in a driver-side Python process Spark reuses.

Three uses, each with a connection of its own: the task's read of the group's epoch base
(`laminar.spark.source.write_task`, whose schema check, `laminar.metadata.ensure_schema`, is
then done once per process), the writer's lift of the stop fence (``use="lift"``: no schema
check, the lift never migrates) — both autocommit statements that hold no lock and no
transaction between uses — and the task's control connection (``use="control"``,
`KeptControl`: its partition's session lock and its claims, given back with the lock released
and its transaction ended, as closing it would). The participants' connections are never
cached: they belong to one attempt and the protocol's machines (docs/protocol.md §4).

- A connection is handed out again only if it is open, not broken and idle; otherwise it is
  closed and a new one made.
- Never shared between threads (a Spark worker runs one task at a time, but tests and a caller
  may run several in threads of one process): a thread that found another's connection busy
  closed it under the running query, which crashed the process (psycopg frees the connection a
  query still uses). Each thread has its own; a thread that ended has its connection closed by
  the next call of any thread.
- Fork-safe: a child process never uses, and never closes, a connection its parent opened
  (closing it would end the parent's session on the shared socket); after a fork the child
  starts with an empty cache and keeps the inherited objects alive, untouched.
- Closed at the interpreter's exit (``atexit``). A worker that ends with ``os._exit`` (Spark's
  forked workers) skips it; the server then sees the socket close, as for a killed process.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

import psycopg

__all__ = ["KeptControl", "cached_connection", "clear", "discard"]

#: Connections of this process by DSN, use and thread (`threading.get_ident`).
_cache: dict[tuple[str, str, int], psycopg.Connection[Any]] = {}
#: Inherited through a fork: kept referenced so the child never finalizes (closes) them.
_inherited: list[psycopg.Connection[Any]] = []
_owner = os.getpid()
_lock = threading.Lock()


def _usable(conn: psycopg.Connection[Any]) -> bool:
    return (
        not conn.closed
        and not conn.broken
        and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    )


def cached_connection(
    dsn: str,
    *,
    application_name: str,
    prepare: Callable[[psycopg.Connection[Any]], object] | None = None,
    use: str = "",
) -> psycopg.Connection[Any]:
    """This thread's autocommit connection to ``dsn`` for ``use`` (a new one if there is none
    usable). ``prepare(conn)`` runs once per connection, when it is made (the schema check).
    The caller must leave it idle (autocommit: no transaction stays open) and must not close
    it; on an error it calls `discard`. Raises what ``psycopg.connect`` and ``prepare`` raise."""
    key = (dsn, use, threading.get_ident())
    with _lock:
        _after_fork_check()
        _close_ended_threads()
        found = _cache.pop(key, None)
        if found is not None and _usable(found):
            _cache[key] = found
            return found
        if found is not None:
            _close(found)
    conn = psycopg.connect(dsn, autocommit=True, application_name=application_name)
    try:
        if prepare is not None:
            prepare(conn)
    except BaseException:
        _close(conn)
        raise
    with _lock:
        _cache[key] = conn
    return conn


#: A task's control connection while its attempt runs (what shows a task still writing in
#: ``pg_stat_activity``: docs/spark.md), and while the worker keeps it between tasks.
TASK_NAME, KEPT_NAME = "laminar task", "laminar worker"


class KeptControl:
    """The control connection of the data source's task attempts
    (`laminar.protocol.scaleout.ControlConnections`), kept by the Spark Python worker for its
    next task as the epoch base's is: a connect per task saved (~35 ms on loopback, measured in
    docs/benchmarks.md). Handed out named ``laminar task``, autocommit off; given back with its
    transaction rolled back, every session advisory lock released (``pg_advisory_unlock_all``:
    the partition's lock, which closing the connection used to release) and named ``laminar
    worker`` — an idle kept connection is not a task still writing. A connection that cannot be
    reset so is closed (which releases the lock too) and the next task makes a new one."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def open(self) -> psycopg.Connection[Any]:
        conn = cached_connection(self.dsn, application_name=TASK_NAME, use="control")
        try:
            if conn.info.parameter_status("application_name") != TASK_NAME:
                conn.execute("SELECT set_config('application_name', %s, false)", (TASK_NAME,))
            conn.autocommit = False
        except psycopg.Error:
            discard(self.dsn, use="control")
            raise
        return conn

    def release(self, conn: psycopg.Connection[Any]) -> None:
        try:
            if conn.closed or conn.broken:
                raise psycopg.InterfaceError("the control connection is closed")
            conn.rollback()
            conn.autocommit = True
            conn.execute(
                "SELECT pg_advisory_unlock_all(), set_config('application_name', %s, false)",
                (KEPT_NAME,),
            )
        except psycopg.Error:
            discard(self.dsn, use="control")
            _close(conn)


def discard(dsn: str, *, use: str = "") -> None:
    """Close and forget this thread's connection to ``dsn`` for ``use`` (after an error on
    it)."""
    with _lock:
        _after_fork_check()
        found = _cache.pop((dsn, use, threading.get_ident()), None)
    if found is not None:
        _close(found)


def clear() -> None:
    """Close every connection this process made (at exit; tests)."""
    with _lock:
        _after_fork_check()
        found = list(_cache.values())
        _cache.clear()
    for conn in found:
        _close(conn)


def _close(conn: psycopg.Connection[Any]) -> None:
    with contextlib.suppress(psycopg.Error):
        conn.close()


def _close_ended_threads() -> None:
    """Close the connections of threads that ended (called with ``_lock`` held: nobody else
    can use them)."""
    alive = {t.ident for t in threading.enumerate()}
    for key in [k for k in _cache if k[2] not in alive]:
        _close(_cache.pop(key))


def _after_fork_check() -> None:
    """In a child of the process that filled the cache: keep the parent's connections alive
    and unused, start empty (module docstring). Called with ``_lock`` held."""
    global _owner
    if os.getpid() != _owner:
        _inherited.extend(_cache.values())
        _cache.clear()
        _owner = os.getpid()


def _in_child() -> None:
    # the lock may have been held by another thread at the fork: a fresh one in the child
    global _lock
    _lock = threading.Lock()
    _after_fork_check()


os.register_at_fork(after_in_child=_in_child)
atexit.register(clear)
