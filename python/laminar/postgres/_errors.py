"""The one mapping from psycopg errors (SQLSTATE classes) to Laminar's error taxonomy (KIP-691).

| SQLSTATE                                   | Laminar error                                   |
| ------------------------------------------ | ----------------------------------------------- |
| no SQLSTATE: connection lost or refused    | AbortableError (reconnect, retry the epoch)     |
| 08 connection exception                    | AbortableError                                  |
| 28 invalid authorization, 42501 privilege  | AuthorizationError                              |
| 40 rollback (40001 serialization, 40P01    | AbortableError                                  |
|    deadlock)                               |                                                 |
| 53 insufficient resources, 58 system error | AbortableError                                  |
| 55P03 lock not available, 55006 in use     | AbortableError                                  |
| 57 operator intervention (57014 canceled / | AbortableError (57P04 database dropped:         |
|    statement timeout, 57P01 admin shutdown)|   ConfigError)                                  |
| 25 invalid transaction state               | AbortableError (25006 read-only: a standby)     |
| 22 data exception, 23 integrity, 54 limits | DataError                                       |
| 42 syntax/undefined object, 3D/3F, 0A, 55  | ConfigError                                     |
| anything else                              | FatalError                                      |

`classify` decides, once, what a psycopg error means: the Laminar error above, whether the
session is gone (what the core's `SinkTransaction.commit_failed` takes: a COMMIT in flight then
has an unknown outcome, decided by the caller, which knows it was in flight) and whether a
PREPARE TRANSACTION was refused because the server disables it. `map_pg_error` builds the
error from it; every message is redacted (DSN passwords).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg

from laminar._redact import redact_text
from laminar.errors import (
    AbortableError,
    AuthorizationError,
    ConfigError,
    DataError,
    FatalError,
    LaminarError,
)
from laminar.metadata import SCHEMA, WRITER_PRIVILEGES

__all__ = ["PgFailure", "classify", "map_pg_error", "sqlstate_of"]

# Connection failures psycopg reports without a SQLSTATE (libpq's own messages).
_AUTH_FAILURE = re.compile(
    r"password authentication failed|authentication failed|no pg_hba\.conf entry|"
    r"password is required|role \S+ does not exist|SSL authentication|certificate",
    re.IGNORECASE,
)
_DATABASE_MISSING = re.compile(r"database \S+ does not exist", re.IGNORECASE)


def sqlstate_of(err: BaseException) -> str | None:
    """The SQLSTATE of a psycopg error, when the server sent one."""
    state = getattr(err, "sqlstate", None)
    return state if isinstance(state, str) and len(state) == 5 else None


@dataclass(frozen=True)
class PgFailure:
    """What a psycopg error means (`classify`)."""

    #: The Laminar error it becomes (the table in this module's docstring).
    error: type[LaminarError]
    #: The session is gone, so a COMMIT (or PREPARE) in flight has an unknown outcome.
    connection_lost: bool
    #: A PREPARE TRANSACTION refused because ``max_prepared_transactions`` is 0.
    prepared_disabled: bool


def classify(err: BaseException, conn: psycopg.Connection[Any] | None = None) -> PgFailure:
    """What ``err`` means; ``conn``: the connection it was raised on, when known (a closed or
    broken one means the session is gone whatever the error says)."""
    state = sqlstate_of(err)
    lost = conn is not None and (conn.closed or conn.broken)
    if state is None:
        lost = lost or isinstance(err, psycopg.OperationalError | psycopg.InterfaceError)
    else:
        lost = lost or state[:2] == "08" or state in ("57P01", "57P02", "57P03")
    return PgFailure(
        error=_error_class(err, state),
        connection_lost=lost,
        prepared_disabled=state == "55000" and "disabled" in str(err),
    )


def _error_class(err: BaseException, state: str | None) -> type[LaminarError]:
    if state is None:
        text = str(err)
        if _AUTH_FAILURE.search(text):
            return AuthorizationError
        if _DATABASE_MISSING.search(text):
            return ConfigError
        if isinstance(err, psycopg.OperationalError | psycopg.InterfaceError):
            return AbortableError
        return FatalError
    klass = state[:2]
    if state == "42501" or klass == "28":
        return AuthorizationError
    if state == "57P04":
        return ConfigError
    if klass in ("08", "40", "53", "57", "58", "25") or state in ("55P03", "55006"):
        return AbortableError
    if klass in ("22", "23", "54"):
        return DataError
    if klass in ("42", "3D", "3F", "0A", "55", "2B", "44", "P0"):
        return ConfigError
    return FatalError


_HINTS: dict[str, str] = {
    "40001": "a serialization failure: the epoch is retried",
    "40P01": "a deadlock with another transaction: the epoch is retried",
    "55P03": "a lock wait timed out (lock_timeout): the epoch is retried",
    "57014": "the statement was cancelled (statement_timeout or pg_cancel_backend)",
    "57P01": "the server is shutting down or the session was terminated: reconnecting",
    "25006": "the server is read-only (a standby?): point the DSN at the primary",
}

_DENIED = re.compile(r"permission denied for (?P<kind>table|schema|relation) (?P<name>\S+)")


def _privilege_hint(err: BaseException) -> str:
    """What to grant for a 42501: the privileges docs/operations.md ("Least privilege") lists
    for the object PostgreSQL names (it names the object, not the privilege)."""
    found = _DENIED.search(str(err))
    name = found["name"].strip('"') if found else ""
    where = '(docs/operations.md, "Least privilege")'
    if found and found["kind"] == "schema" and name == SCHEMA:
        return (
            f"GRANT USAGE ON SCHEMA {SCHEMA} TO the role; the schema's owner creates and "
            f"migrates it (CREATE on the database, or run laminar once as the owner) {where}"
        )
    needed = WRITER_PRIVILEGES.get(name.removeprefix(f"{SCHEMA}."))
    if needed is not None:
        table = f"{SCHEMA}.{name.removeprefix(f'{SCHEMA}.')}"
        return (
            f"a writer's role needs {', '.join(needed)} on {table} (GRANT {', '.join(needed)} "
            f"ON {table} TO the role), laminar status and the exporter SELECT {where}"
        )
    return f"grant the role the privilege on the object named above {where}"


def map_pg_error(
    err: BaseException,
    what: str,
    *,
    sink_id: str | None = None,
    epoch: int | None = None,
    secrets: tuple[str, ...] = (),
) -> LaminarError:
    """The Laminar error for psycopg error ``err`` raised while doing ``what``.

    The caller raises it ``from err`` so the root cause stays in ``__cause__``. ``secrets`` are
    values to mask besides DSN passwords (e.g. the password of the sink's DSN).
    """
    cls = classify(err).error
    state = sqlstate_of(err)
    detail = " ".join(str(err).split()) or type(err).__name__
    message = f"{what}: {detail}"
    if state is not None:
        message += f" [SQLSTATE {state}]"
        hint = _privilege_hint(err) if state == "42501" else _HINTS.get(state)
        if hint:
            message += f"; {hint}"
    elif cls is AbortableError:
        message += "; the connection is gone: the sink reconnects on the next epoch"
    return cls(redact_text(message, secrets), sink_id=sink_id, epoch=epoch)
