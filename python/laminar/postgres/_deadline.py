"""A deadline on every wait for PostgreSQL's answer (docs/postgres.md, "A hung server").

libpq has no client-side query time-out, and the kernel still acknowledges the socket of a
backend that hangs (stopped, swapped out, wedged behind a storage stall), so a statement sent to
it — a COPY chunk, the epoch's COMMIT, the decision — would wait forever. `connect` opens a
`DeadlineConnection`: each wait of psycopg on the server (psycopg runs every statement, every
COPY chunk, every COMMIT through `psycopg.Connection.wait`) is armed with the sink's answer
deadline (the core's rule, `laminar._core.postgres_answer_timeout`), and one process-wide
watchdog thread shuts the socket down when a wait outlives it. The blocked call then fails at
once as a lost connection — `psycopg.OperationalError`, which the sinks map to a retriable
`AbortableError`, or to `InDoubtError` for a COMMIT in flight (its outcome unknown until
recovery reads it) — with a message that names the deadline. A COPY that streams for minutes is
not cut: each chunk is its own wait.

A backend given up on this way may still be alive — stopped, not dead — holding its transaction,
its locks, and perhaps a COMMIT it has not read yet. Until it has ended, nothing read about its
transaction is final (a read would find the epoch not committed, and the COMMIT could still land
after it). So the process remembers each such backend (`Lingering`), and every new connection to
the same server first settles them (`connect`): a backend that has ended is forgotten; one still
there is asked to terminate (``pg_terminate_backend``: a stopped one dies when it goes on, before
it reads what was sent) and the connection refused with a retriable error, so the caller retries
later and reads an outcome that no longer moves.

The watchdog polls (every quarter second while something is armed), so arming costs a lock and
a dict entry, not a thread wake-up per statement.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import Any

import psycopg

__all__ = ["LINGERING", "DeadlineConnection", "Lingering", "connect"]

#: How often the watchdog looks at the armed waits while any is armed (its precision).
_POLL_S = 0.25
#: How long the watchdog keeps polling after the last wait ended before it sleeps until armed.
_LINGER_S = 5.0


class _Wait:
    """One armed wait: the socket to shut down and when."""

    __slots__ = ("deadline", "fileno", "fired")

    def __init__(self, fileno: int, deadline: float) -> None:
        self.fileno = fileno
        self.deadline = deadline
        self.fired = False


class _Watchdog:
    """Shuts down the socket of every armed wait that outlived its deadline (module docstring).
    One daemon thread per process, started on first use and again in a forked child."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._armed: set[_Wait] = set()
        self._thread: threading.Thread | None = None
        self._sleeping = False

    def arm(self, fileno: int, seconds: float) -> _Wait:
        wait = _Wait(fileno, time.monotonic() + seconds)
        with self._cond:
            self._armed.add(wait)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="laminar-pg-deadline", daemon=True
                )
                self._thread.start()
            elif self._sleeping:
                self._cond.notify()
        return wait

    def disarm(self, wait: _Wait) -> None:
        with self._cond:
            self._armed.discard(wait)

    def _run(self) -> None:
        idle_since = time.monotonic()
        with self._cond:
            while True:
                now = time.monotonic()
                if not self._armed:
                    if now - idle_since > _LINGER_S:
                        self._sleeping = True
                        self._cond.wait()
                        self._sleeping = False
                        idle_since = time.monotonic()
                    else:
                        self._cond.wait(_POLL_S)
                    continue
                idle_since = now
                for wait in [w for w in self._armed if w.deadline <= now]:
                    self._armed.discard(wait)
                    wait.fired = True
                    _shut_down(wait.fileno)
                self._cond.wait(_POLL_S)

    def _forked(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._armed = set()
        self._thread = None
        self._sleeping = False


def _shut_down(fileno: int) -> None:
    """Shut the socket behind ``fileno`` down (both ways): a wait on it returns, and libpq reads
    the end of the connection. The descriptor itself stays psycopg's to close."""
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=os.dup(fileno))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


_WATCHDOG = _Watchdog()
os.register_at_fork(after_in_child=_WATCHDOG._forked)


class Lingering:
    """The backends of connections given up on past their deadline, per server (its DSN), with
    when each connection was opened: until each has ended its transaction may still commit
    (module docstring). Thread-safe; one per process (`LINGERING`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_server: dict[str, dict[int, float]] = {}

    def add(self, server: str, pid: int, opened_at: float) -> None:
        """The connection to ``server`` opened at ``opened_at`` (wall clock), served by backend
        ``pid``, was given up on."""
        with self._lock:
            self._by_server.setdefault(server, {})[pid] = opened_at

    def settle(self, conn: psycopg.Connection[Any], server: str) -> None:
        """On a new connection to ``server``: forget the given-up backends that have ended; ask
        those still there to terminate and raise `psycopg.OperationalError` (a lost connection
        to the caller: retriable) naming them."""
        with self._lock:
            backends = dict(self._by_server.get(server, {}))
        if not backends:
            return
        with conn.cursor() as cur:
            cur.execute(
                "SELECT pid, extract(epoch FROM backend_start)::float8 FROM pg_stat_activity"
                " WHERE pid = ANY(%s)",
                (list(backends),),
            )
            # the same pid and started no later than the connection it served: still that one
            alive = [int(p) for p, started in cur.fetchall() if started <= backends[p] + 1.0]
            for pid in alive:
                with contextlib.suppress(psycopg.Error):
                    cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with contextlib.suppress(psycopg.Error):
            conn.rollback()
        with self._lock:
            known = self._by_server.get(server, {})
            for pid in backends:
                if pid not in alive:
                    known.pop(pid, None)
            if not known:
                self._by_server.pop(server, None)
        if alive:
            raise psycopg.OperationalError(
                f"the backend of a connection given up on (pid {', '.join(map(str, alive))}) "
                "still runs, stopped or hung: its transaction's outcome is unknown until it "
                "ends (it was asked to terminate); try again"
            )

    def clear(self) -> None:
        """Forget every backend (tests)."""
        with self._lock:
            self._by_server.clear()


#: The process's given-up backends, shared by every `DeadlineConnection`.
LINGERING = Lingering()
os.register_at_fork(after_in_child=LINGERING.clear)


class DeadlineConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait for the server's answer ends within
    ``answer_timeout_s`` (None: no deadline), the connection given up past it (module
    docstring)."""

    answer_timeout_s: float | None = None
    #: The server (its DSN), the backend and when the connection was opened (wall clock):
    #: what `LINGERING` remembers when the deadline gives the connection up.
    server: str = ""
    backend_pid: int = 0
    opened_at: float = 0.0

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        """psycopg's wait on the server, armed with the answer deadline."""
        seconds = self.answer_timeout_s
        try:
            fileno = None if seconds is None or self.closed else self.pgconn.socket
        except psycopg.Error:  # the connection is gone already: psycopg says so
            fileno = None
        if fileno is None or seconds is None:
            return super().wait(gen, *args, **kwargs)
        armed = _WATCHDOG.arm(fileno, seconds)
        try:
            return super().wait(gen, *args, **kwargs)
        except psycopg.Error as e:
            if armed.fired:
                if self.backend_pid:
                    LINGERING.add(self.server, self.backend_pid, self.opened_at)
                raise psycopg.OperationalError(
                    f"PostgreSQL did not answer within {seconds:g} s (statement_timeout_s): a "
                    "hung server or backend; the connection was given up"
                ) from e
            raise
        finally:
            _WATCHDOG.disarm(armed)


def connect(dsn: str, *, answer_timeout_s: float | None, **kwargs: Any) -> DeadlineConnection:
    """``psycopg.connect(dsn, **kwargs)`` as a `DeadlineConnection` with ``answer_timeout_s``,
    once every backend this process gave up on at that server has ended (`Lingering.settle`:
    else `psycopg.OperationalError`)."""
    opened_at = time.time()
    conn = DeadlineConnection.connect(dsn, **kwargs)
    try:
        conn.answer_timeout_s = answer_timeout_s
        conn.server, conn.backend_pid, conn.opened_at = dsn, conn.info.backend_pid, opened_at
        LINGERING.settle(conn, dsn)
    except BaseException:
        conn.close()
        raise
    return conn
