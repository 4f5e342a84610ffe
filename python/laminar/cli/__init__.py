"""The ``laminar`` command line: ``demo``, ``status``, ``resolve``, ``recover``, ``reset``,
``exporter``.

Every command but ``demo`` works on a decision database: ``--dsn`` or ``$LAMINAR_PG_DSN`` (its
password never appears in the output). Kafka markers are read with each Kafka sink's settings as
registered in ``laminar.sinks.config`` (secrets are not stored there: give them with
``--kafka-config sasl.password=...``). Output is a human-readable table; ``--json`` prints one
JSON document instead. ``exporter`` serves Prometheus metrics read from the same database, given
by the name of the environment variable holding its DSN (`laminar.cli.exporter`).

Exit codes:

    0  done (status: nothing in doubt; recover/resolve: resolved)
    1  error (cannot connect, a server refused; status: a Kafka sink's marker could not be read,
       so whether it has anything in doubt is unknown — the reason is printed)
    2  usage error
    3  not implemented
    4  refused: the recorded decision says otherwise (add --force to override)
    5  something is still unresolved (status: in-doubt or lingering transactions; recover: some
       remain; resolve: the epoch awaits Spark's replay)
    6  not found (no such sink, decision or prepared transaction)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from laminar import __version__
from laminar._redact import parse_dsn
from laminar.cli import commands as _commands
from laminar.cli import exporter as _exporter
from laminar.cli.demo import add_arguments, run_from_args
from laminar.errors import ConfigError

__all__ = ["main"]

#: Exit code of a subcommand that exists in the interface but is not implemented yet.
EXIT_NOT_IMPLEMENTED = 3
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_REFUSED, EXIT_UNRESOLVED, EXIT_NOT_FOUND = 0, 1, 2, 4, 5, 6


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="laminar",
        description=(
            "Exactly-once transactional sinks from Spark Structured Streaming to Kafka and "
            "PostgreSQL."
        ),
    )
    parser.add_argument("--version", action="version", version=f"laminar {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="run the demo pipeline on embedded servers (broker, PostgreSQL, Spark Connect)",
        description=(
            "Start a local broker, PostgreSQL and Spark Connect, run a streaming pipeline with "
            "an injected crash, then prove that every record landed exactly once. Exit code 0 "
            "if the proof holds, 1 if it fails, 2 on an error, 130 if interrupted."
        ),
    )

    add_arguments(demo)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--dsn",
            default=os.environ.get("LAMINAR_PG_DSN"),
            help="the decision database (default: $LAMINAR_PG_DSN)",
        )
        p.add_argument(
            "--kafka-config",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a Kafka client setting for reading markers (e.g. sasl.password=...); repeat",
        )
        p.add_argument("--json", action="store_true", help="print JSON instead of tables")

    status = commands.add_parser(
        "status",
        help="show sinks: last committed epoch, in-doubt and lingering transactions, latency",
    )
    common(status)
    status.add_argument(
        "--lingering-after", type=float, default=300.0, metavar="S", help="default 300 s"
    )
    resolve = commands.add_parser(
        "resolve", help="resolve one in-doubt transaction by hand: commit it or roll it back"
    )
    common(resolve)
    resolve.add_argument(
        "transaction_id",
        help="as `status` lists it: a prepared gid (laminar:...), kafka:<transactional_id>, or "
        "a distributed transaction id",
    )
    decision = resolve.add_mutually_exclusive_group(required=True)
    decision.add_argument("--commit", action="store_true", help="commit it")
    decision.add_argument("--rollback", action="store_true", help="roll it back")
    resolve.add_argument(
        "--force",
        action="store_true",
        help="override a recorded decision that says the opposite (breaks atomicity: know why)",
    )
    recover = commands.add_parser(
        "recover", help="resolve every in-doubt transaction by its recorded decision"
    )
    common(recover)
    recover.add_argument(
        "--older-than",
        type=float,
        default=60.0,
        metavar="S",
        help="only transactions unresolved for at least S seconds (default 60: a live writer "
        "may still be finishing younger ones)",
    )
    reset = commands.add_parser(
        "reset",
        help="start a sink (or atomic group) over for a new query: next epochs start past every "
        "committed one",
    )
    common(reset)
    reset.add_argument("sink_id", help="a sink id or atomic group id (as `status` lists it)")
    exporter = commands.add_parser(
        "exporter",
        allow_abbrev=False,  # `--dsn postgresql://...` must not pass for `--dsn-env`
        help="serve Prometheus metrics read from the laminar schema (pip install "
        "'laminar[exporter]')",
        description="Serve /metrics for Prometheus: per group and sink the last committed epoch "
        "and its age, epochs in doubt, prepared and open transactions, stop fences, commits, "
        "aborts and commit latency (docs/operations.md). The DSN comes from an environment "
        "variable (--dsn-env), never from the command line.",
    )
    _exporter.add_arguments(exporter)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "demo":
        return run_from_args(args)
    if args.command == "exporter":
        return _exporter.run_from_args(args)
    if not args.dsn:
        print(
            f"laminar {args.command}: give the decision database with --dsn or $LAMINAR_PG_DSN",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        extra = _key_values(args.kafka_config)
        _check_dsn(args.dsn)
    except ValueError as e:
        return _fail(args, str(e), EXIT_USAGE)

    try:
        return int(_commands.run(args, extra))
    except _commands.CommandError as e:
        return _fail(args, str(e), e.code)


def _fail(args: argparse.Namespace, message: str, code: int) -> int:
    """Report a command's failure on stderr — and, under ``--json``, as a JSON document on
    stdout too, so that a script reading stdout always gets JSON."""
    print(f"laminar {args.command}: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps({"error": message, "exit_code": code}, indent=2))
    return code


def _check_dsn(dsn: str) -> None:
    """A ``ValueError`` (a usage error) when ``--dsn`` is not a libpq connection string or URI;
    the message shows it with its password masked (libpq's own message may quote it)."""

    try:
        parse_dsn(dsn, "--dsn")
    except ConfigError as e:
        raise ValueError(e.message) from None


def _key_values(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for number, item in enumerate(items, 1):
        key, sep, value = item.partition("=")
        if not sep or not key:
            # never echoed: a mistyped separator ('sasl.password:...') would print the secret
            raise ValueError(
                f"--kafka-config takes KEY=VALUE (e.g. sasl.password=...), but item "
                f"{number} of {len(items)} has no '=' or no key (not shown: it may hold "
                "a secret)"
            )
        out[key.strip()] = value
    return out


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
