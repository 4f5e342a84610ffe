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

__all__ = ["DeadlineConnection", "connect"]

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


class DeadlineConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait for the server's answer ends within
    ``answer_timeout_s`` (None: no deadline), the connection given up past it (module
    docstring)."""

    answer_timeout_s: float | None = None

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
                raise psycopg.OperationalError(
                    f"PostgreSQL did not answer within {seconds:g} s (statement_timeout_s): a "
                    "hung server or backend; the connection was given up"
                ) from e
            raise
        finally:
            _WATCHDOG.disarm(armed)


def connect(dsn: str, *, answer_timeout_s: float | None, **kwargs: Any) -> DeadlineConnection:
    """``psycopg.connect(dsn, **kwargs)`` as a `DeadlineConnection` with ``answer_timeout_s``."""
    conn = DeadlineConnection.connect(dsn, **kwargs)
    conn.answer_timeout_s = answer_timeout_s
    return conn
