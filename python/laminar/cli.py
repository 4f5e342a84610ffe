"""The ``laminar`` command line: ``demo``, ``status``, ``resolve``, ``recover``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from laminar import __version__

__all__ = ["main"]

#: Exit code of a subcommand that exists in the interface but is not implemented yet.
EXIT_NOT_IMPLEMENTED = 3


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

    commands.add_parser(
        "demo",
        help="run the demo pipeline on embedded servers (broker, PostgreSQL, Spark Connect)",
        description=(
            "Start a local broker, PostgreSQL and Spark Connect, run a streaming pipeline with "
            "an injected crash, then prove that every record landed exactly once."
        ),
    )
    commands.add_parser(
        "status",
        help="show sinks: last committed epoch, in-doubt and lingering transactions, latency",
    )
    resolve = commands.add_parser(
        "resolve", help="commit or roll back an in-doubt transaction by hand"
    )
    resolve.add_argument("transaction_id", help="the in-doubt transaction (as `status` lists it)")
    decision = resolve.add_mutually_exclusive_group(required=True)
    decision.add_argument("--commit", action="store_true", help="commit it")
    decision.add_argument("--rollback", action="store_true", help="roll it back")
    commands.add_parser(
        "recover", help="complete or roll back every in-doubt transaction from recorded decisions"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "demo":
        print(
            "laminar demo: coming soon. It will start a local broker, PostgreSQL and Spark "
            "Connect, run a streaming pipeline with an injected crash, and prove that every "
            "record landed exactly once."
        )
        return 0
    print(
        f"laminar {args.command}: not implemented yet (this laminar {__version__} has the command "
        "in its interface only)",
        file=sys.stderr,
    )
    return EXIT_NOT_IMPLEMENTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
