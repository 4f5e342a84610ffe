"""`PostgresSink`'s session with the server: the DSN read in the writing process
(``laminar.env``) and kept out of messages, the connection each epoch and each read uses — each
with the sink's deadline on the server's answers (`_deadline`: a hung server or backend ends in
a retriable error, not a writer blocked forever) — and the mapping of what the server raised into
Laminar's errors (`_errors`) with the DSN's password masked."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from laminar._redact import parse_dsn, redact_dsn
from laminar._settings import Setting, resolve
from laminar.errors import AbortableError, ConfigError, LaminarError
from laminar.postgres._deadline import connect
from laminar.postgres._errors import map_pg_error

__all__ = ["IDLE", "Session", "check_dsn", "safe_conninfo"]

IDLE = psycopg.pq.TransactionStatus.IDLE


def check_dsn(dsn: object) -> tuple[str, str]:
    """``dsn`` checked: (the connection string, its password or ""); `ConfigError` otherwise."""
    if not isinstance(dsn, str) or not dsn.strip():
        raise ConfigError("PostgresSink needs dsn= a libpq connection string or URI")
    params = parse_dsn(dsn, "PostgresSink: dsn")
    return dsn, str(params.get("password") or "")


def safe_conninfo(dsn: str) -> dict[str, Any]:
    """The DSN's parameters ({} when libpq cannot parse it)."""
    try:
        return dict(conninfo_to_dict(dsn))
    except psycopg.ProgrammingError:
        return {}


class Session:
    """One sink's connection to PostgreSQL, opened lazily and again after a loss, and the errors
    of its statements. Lives in one process: the sink builds a new one when it is unpickled.

    ``resolved`` is `check_dsn`'s answer when the DSN was given as text (checked at once);
    a ``laminar.env`` setting is read on first use, in the process that writes.
    ``answer_timeout_s``: the deadline on each wait for the server's answer on every connection
    opened here (`_deadline`; None: none).
    """

    def __init__(
        self,
        setting: Setting,
        sink_id: str,
        connect_timeout: int,
        resolved: tuple[str, str] | None = None,
        answer_timeout_s: float | None = None,
    ) -> None:
        self.setting = setting
        self.sink_id = sink_id
        self.connect_timeout = connect_timeout
        self.answer_timeout_s = answer_timeout_s
        self._resolved = resolved
        #: The sink's own connection (None until connected, and after a loss).
        self.conn: psycopg.Connection[Any] | None = None

    # -- the DSN ------------------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The connection string in this process (a ``laminar.env`` setting is read here)."""
        if self._resolved is None:
            dsn = resolve(self.setting, f"PostgresSink {self.sink_id!r}: dsn")
            self._resolved = check_dsn(dsn)
        return self._resolved[0]

    def secrets(self) -> tuple[str, ...]:
        """Secret values to mask in messages (the DSN's password, once known)."""
        if self._resolved is None:
            with contextlib.suppress(ConfigError):
                _ = self.dsn
        password = self._resolved[1] if self._resolved is not None else ""
        return (password,) if password else ()

    def conninfo(self) -> dict[str, Any]:
        """The DSN's parameters (with its password: do not log them)."""
        return safe_conninfo(self.dsn)

    def where(self) -> str:
        """The database, as messages name it (password masked)."""
        params = self.conninfo()
        database = params.get("dbname") or params.get("user") or "(default database)"
        return f"database {database!r} ({redact_dsn(self.dsn)})"

    def error(self, err: BaseException, what: str, epoch: int | None = None) -> LaminarError:
        """The Laminar error for ``err`` raised while doing ``what`` (`_errors.map_pg_error`)."""
        return map_pg_error(err, what, sink_id=self.sink_id, epoch=epoch, secrets=self.secrets())

    # -- connections --------------------------------------------------------------------------

    def connection(self) -> psycopg.Connection[Any]:
        """The sink's own connection, opened (again) when there is none usable."""
        conn = self.conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self.drop()
        extra: dict[str, Any] = {"connect_timeout": self.connect_timeout}
        if "application_name" not in self.conninfo():
            extra["application_name"] = f"laminar {self.sink_id}"[:63]
        try:
            conn = connect(self.dsn, answer_timeout_s=self.answer_timeout_s, **extra)
        except psycopg.Error as e:
            raise self.error(e, f"connecting to {self.where()}") from e
        self.conn = conn
        return conn

    def epoch_connection(self, epoch: int | None) -> psycopg.Connection[Any]:
        """The connection holding the open epoch's transaction. Never a new one: a session that
        was lost took the transaction (and its claim) with it, so writing or committing on a
        fresh session would land rows outside the epoch's transaction."""
        conn = self.conn
        if conn is None or conn.closed or conn.broken:
            raise AbortableError(
                f"the connection holding epoch {epoch}'s transaction was lost (the server rolled "
                "the transaction back): abort the epoch and write it again",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        return conn

    def drop(self) -> None:
        """Close the sink's own connection (its open transaction, if any, is rolled back)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def end_transaction_quietly(self) -> None:
        """Roll back the connection's open transaction; a lost connection has none left (the
        server rolls back the transaction of a session that ends)."""
        conn = self.conn
        if conn is None:
            return
        try:
            if not conn.closed and not conn.broken:
                conn.rollback()
        except psycopg.Error:
            self.drop()
            return
        if conn.closed or conn.broken:
            self.drop()

    @contextlib.contextmanager
    def idle(self, epoch_open: bool) -> Iterator[psycopg.Connection[Any]]:
        """A connection with no transaction of ours open: the sink's own when it has none (a
        read transaction opened on it is ended afterwards), a short-lived one while an epoch's
        transaction (``epoch_open``) is open on it."""
        conn = self.conn
        usable = conn is not None and not conn.closed and not conn.broken
        if (usable and conn is not None and conn.info.transaction_status == IDLE) or (
            not usable and not epoch_open
        ):
            conn = self.connection()
            try:
                yield conn
            finally:
                if not conn.closed and conn.info.transaction_status != IDLE:
                    conn.rollback()
            return
        try:
            temp = connect(
                self.dsn,
                answer_timeout_s=self.answer_timeout_s,
                connect_timeout=self.connect_timeout,
            )
        except psycopg.Error as e:
            raise self.error(e, f"connecting to {self.where()}") from e
        with temp:
            yield temp

    def watch_connection(self) -> psycopg.Connection[Any]:
        """A connection of its own for a `_partners.Watch` (autocommit)."""
        return connect(
            self.dsn,
            answer_timeout_s=self.answer_timeout_s,
            autocommit=True,
            connect_timeout=self.connect_timeout,
            application_name="laminar partner watch",
        )
