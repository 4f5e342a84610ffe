"""Runs ``laminar status|resolve|recover|reset``: connects to the decision database, asks
`laminar.protocol.admin`, prints its answer (`laminar.cli.status`, `laminar.cli.outcomes`) and
turns failures into a message and an exit code (`CommandError`; the codes: `laminar.cli`)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import psycopg

from laminar._redact import redact_dsn, redact_text
from laminar.cli import outcomes as _outcomes
from laminar.cli import status as _status
from laminar.errors import AuthorizationError, LaminarError
from laminar.postgres._errors import map_pg_error
from laminar.protocol import admin as _admin
from laminar.protocol.kafka_sinks import RegisteredKafkaSinks

__all__ = ["CommandError", "run"]


class CommandError(Exception):
    """A command that cannot go on: the message for stderr and the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


#: Exit codes of the core's refusals (docs/engine.md §5).
_REFUSAL_EXIT = {"against_decision": 4, "not_found": 6}


def run(args: argparse.Namespace, kafka_extra: dict[str, str]) -> int:
    """Run one command; returns its exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    password = str(
        psycopg.conninfo.conninfo_to_dict(args.dsn).get("password") or ""
    )  # the cli package checked
    try:
        conn = psycopg.connect(args.dsn, connect_timeout=10)
    except psycopg.Error as e:
        raise CommandError(
            redact_text(f"cannot connect to {redact_dsn(args.dsn)}: {e}", (password,))
        ) from e
    with conn:
        try:
            return _run_on(conn, args, kafka_extra)
        except LaminarError as e:
            raise CommandError(redact_text(f"{_kind(e)}{e}", (password,))) from e
        except psycopg.Error as e:
            # one mapping of PostgreSQL's errors: a missing grant says which to give
            mapped = map_pg_error(e, f"laminar {args.command}", secrets=(password,))
            raise CommandError(f"PostgreSQL: {_kind(mapped)}{mapped}") from e


def _kind(error: LaminarError) -> str:
    """``AuthorizationError: `` before a refusal's message: what to grant, not a bug."""
    return "AuthorizationError: " if isinstance(error, AuthorizationError) else ""


def _run_on(
    conn: psycopg.Connection[Any], args: argparse.Namespace, kafka_extra: dict[str, str]
) -> int:
    if not _admin.has_metadata(conn):
        if args.command == "status":
            _status.print_empty(redact_dsn(args.dsn), as_json=args.json)
            return 0
        raise CommandError(
            f"{redact_dsn(args.dsn)} has no laminar metadata (schema laminar): no sink has "
            "written to this database yet"
        )
    factory = RegisteredKafkaSinks(conn, kafka_extra)
    try:
        if args.command == "status":
            return _run_status(conn, args, factory)
        if args.command == "resolve":
            return _run_resolve(conn, args, factory)
        if args.command == "recover":
            return _run_recover(args, factory)
        if args.command == "reset":
            return _run_reset(conn, args)
    finally:
        factory.close()
    raise CommandError(f"unknown command {args.command}", 2)


def _run_status(
    conn: psycopg.Connection[Any], args: argparse.Namespace, kafka: RegisteredKafkaSinks
) -> int:
    found = _admin.status(conn, kafka, lingering_after_s=args.lingering_after)
    _status.print_status(redact_dsn(args.dsn), found, as_json=args.json)
    # in doubt first (what to act on), then an unreadable marker: "nothing in doubt" unproven
    return 5 if found.in_doubt else 1 if found.unreadable else 0


def _run_resolve(
    conn: psycopg.Connection[Any], args: argparse.Namespace, kafka: RegisteredKafkaSinks
) -> int:
    target: str = args.transaction_id
    commit = bool(args.commit)
    try:
        done = _admin.resolve(conn, target, kafka, commit=commit, force=bool(args.force))
    except LaminarError as e:
        code = _REFUSAL_EXIT.get(getattr(e, "refusal", None) or "")
        if code is None:
            raise
        raise CommandError(str(e), code) from e
    _outcomes.print_resolved(target, done, commit=commit, as_json=args.json)
    return 5 if done.what == "awaits_replay" else 0


def _run_recover(args: argparse.Namespace, kafka: RegisteredKafkaSinks) -> int:
    report = _admin.recover(args.dsn, kafka, older_than_s=args.older_than)
    _outcomes.print_recovered(report, as_json=args.json)
    return 5 if report.unresolved else 0


def _run_reset(conn: psycopg.Connection[Any], args: argparse.Namespace) -> int:
    done = _admin.reset(conn, args.sink_id)
    if done is None:
        raise CommandError(f"{args.sink_id!r} is not in laminar.sinks", 6)
    _outcomes.print_reset(done, as_json=args.json)
    return 0
