"""The one SQLSTATE → Laminar error mapping of the Postgres sink (psycopg error classes, no
server)."""

from __future__ import annotations

import psycopg
import pytest

from laminar.errors import (
    AbortableError,
    AuthorizationError,
    ConfigError,
    DataError,
    FatalError,
    LaminarError,
)
from laminar.postgres._errors import classify, map_pg_error


def server_error(sqlstate: str, message: str = "boom") -> psycopg.Error:
    """A psycopg exception of the class the server's SQLSTATE selects."""
    return psycopg.errors.lookup(sqlstate)(message)


@pytest.mark.parametrize(
    ("sqlstate", "expected"),
    [
        ("08006", AbortableError),  # connection failure
        ("08003", AbortableError),
        ("28P01", AuthorizationError),  # invalid password
        ("28000", AuthorizationError),
        ("42501", AuthorizationError),  # insufficient privilege
        ("40001", AbortableError),  # serialization failure
        ("40P01", AbortableError),  # deadlock
        ("53100", AbortableError),  # disk full
        ("53300", AbortableError),  # too many connections
        ("55P03", AbortableError),  # lock not available (lock_timeout)
        ("55006", AbortableError),  # object in use
        ("57014", AbortableError),  # query canceled (statement_timeout)
        ("57P01", AbortableError),  # admin shutdown
        ("57P02", AbortableError),  # crash shutdown
        ("57P03", AbortableError),  # cannot connect now (starting up)
        ("57P04", ConfigError),  # database dropped
        ("58030", AbortableError),  # I/O error
        ("25P02", AbortableError),  # in failed transaction
        ("25006", AbortableError),  # read-only transaction (a standby)
        ("22003", DataError),  # numeric value out of range
        ("22P02", DataError),  # invalid text representation
        ("23505", DataError),  # unique violation
        ("23514", DataError),  # check violation
        ("54000", DataError),  # program limit exceeded
        ("42P01", ConfigError),  # undefined table
        ("42703", ConfigError),  # undefined column
        ("42710", ConfigError),  # duplicate object (gid in use)
        ("3D000", ConfigError),  # invalid catalog name
        ("3F000", ConfigError),  # invalid schema name
        ("0A000", ConfigError),  # feature not supported
        ("55000", ConfigError),  # object not in prerequisite state (prepared xacts disabled)
        ("XX000", FatalError),  # internal error
        ("XX001", FatalError),  # data corrupted
    ],
)
def test_sqlstate_classes(sqlstate: str, expected: type[LaminarError]) -> None:
    assert classify(server_error(sqlstate)).error is expected
    mapped = map_pg_error(server_error(sqlstate), "writing", sink_id="s", epoch=3)
    assert type(mapped) is expected
    assert f"SQLSTATE {sqlstate}" in str(mapped)
    assert (mapped.sink_id, mapped.epoch) == ("s", 3)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            'connection failed: FATAL:  password authentication failed for user "u"',
            AuthorizationError,
        ),
        ("connection failed: FATAL:  no pg_hba.conf entry for host", AuthorizationError),
        ('connection failed: FATAL:  role "nobody" does not exist', AuthorizationError),
        ('connection failed: FATAL:  database "nope" does not exist', ConfigError),
        ("connection failed: Connection refused", AbortableError),
        ("server closed the connection unexpectedly", AbortableError),
    ],
)
def test_connection_errors_without_sqlstate(message: str, expected: type[LaminarError]) -> None:
    assert classify(psycopg.OperationalError(message)).error is expected


def test_an_interface_error_means_the_connection_is_gone() -> None:
    assert classify(psycopg.InterfaceError("the connection is closed")).error is AbortableError
    assert classify(psycopg.InterfaceError("closed")).connection_lost


def test_connection_failures_for_in_doubt_commits() -> None:
    assert classify(psycopg.OperationalError("server closed the connection")).connection_lost
    assert classify(server_error("08006")).connection_lost
    assert classify(server_error("57P01")).connection_lost
    assert not classify(server_error("40001")).connection_lost
    assert not classify(server_error("23505")).connection_lost


def test_messages_are_redacted_and_hinted() -> None:
    err = psycopg.OperationalError(
        "connection to postgresql://app:hunter22@db/x failed; password=hunter22 extra"
    )
    mapped = map_pg_error(err, "connecting", secrets=("hunter22",))
    assert "hunter22" not in str(mapped)
    assert "reconnects on the next epoch" in str(mapped)
    deadlock = map_pg_error(server_error("40P01", "deadlock detected"), "writing")
    assert "deadlock" in str(deadlock)
    assert "retried" in str(deadlock)
    assert deadlock.retriable
    assert deadlock.requires_abort


def test_a_non_psycopg_error_is_fatal() -> None:
    assert classify(RuntimeError("?")).error is FatalError


def test_a_prepare_refused_because_the_server_disables_it() -> None:
    disabled = server_error("55000", "prepared transactions are disabled")
    assert classify(disabled).prepared_disabled
    assert classify(disabled).error is ConfigError
    assert not classify(server_error("55000", "object in use")).prepared_disabled
    assert not classify(server_error("08006")).prepared_disabled
