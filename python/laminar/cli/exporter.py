"""``laminar exporter``: serve Prometheus metrics read from the laminar schema (`laminar.exporter`;
the metrics and the alerts on them: docs/operations.md, "Metrics and alerts").

The decision database is given by the *name* of an environment variable (``--dsn-env``, default
``LAMINAR_PG_DSN``), Kafka secrets the same way (``--kafka-config-env sasl.password=VAR``): no
credential is ever on the command line, where ``ps`` shows it, nor in a label or a log line.
Needs the ``exporter`` extra (``pip install 'laminar[exporter]'``: ``prometheus_client``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["DEFAULT_PORT", "Exporter", "add_arguments", "run_from_args"]

#: The port ``laminar exporter`` listens on unless told otherwise.
DEFAULT_PORT = 9464

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``laminar exporter`` options."""
    parser.add_argument(
        "--dsn-env",
        default="LAMINAR_PG_DSN",
        metavar="VAR",
        help="the environment variable holding the decision database's DSN (default "
        "LAMINAR_PG_DSN); the DSN itself is never an argument",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to serve /metrics on ({DEFAULT_PORT})"
    )
    parser.add_argument(
        "--host",
        default="0.0.0.0",  # noqa: S104 - Prometheus scrapes it from another host
        help="address to listen on (default 0.0.0.0: every one)",
    )
    parser.add_argument(
        "--kafka-config-env",
        action="append",
        default=[],
        metavar="KEY=VAR",
        help="a Kafka client setting for reading markers, taken from environment variable VAR "
        "(e.g. sasl.password=KAFKA_PASSWORD); repeat",
    )
    parser.add_argument(
        "--no-kafka",
        action="store_true",
        help="do not read Kafka markers (decided Kafka epochs behind their marker are then not "
        "seen; everything read from PostgreSQL is)",
    )
    parser.add_argument(
        "--once", action="store_true", help="print the metrics once (text format) and exit"
    )


def _kafka_extra(items: list[str]) -> dict[str, str]:
    """``KEY=VAR`` items → ``{KEY: $VAR}``; a ``ValueError`` names what is wrong (never a
    value)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, var = item.partition("=")
        if not sep or not key.strip() or not var.strip().isidentifier():
            raise ValueError(
                "--kafka-config-env takes KEY=VAR, VAR an environment variable's name (the item "
                "is not shown: it may hold a secret)"
            )
        value = os.environ.get(var.strip())
        if value is None:
            raise ValueError(f"--kafka-config-env {key.strip()}: ${var.strip()} is not set")
        out[key.strip()] = value
    return out


class Exporter:
    """The exporter's HTTP server over a `laminar.exporter.LaminarCollector` (``laminar
    exporter``, and ``laminar demo``, which runs one beside its servers)."""

    def __init__(
        self,
        dsn: str,
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        kafka_extra: dict[str, str] | None = None,
    ) -> None:
        # in-function: prometheus_client is the optional exporter extra (run_from_args checks)
        from prometheus_client import CollectorRegistry

        from laminar.exporter import LaminarCollector  # imports prometheus_client too

        self.collector = LaminarCollector(dsn, kafka_extra=kafka_extra)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.host = host
        self.port = port
        self._server: Any = None

    @property
    def url(self) -> str:
        """Where Prometheus scrapes it."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host  # noqa: S104
        return f"http://{host}:{self.port}/metrics"

    def text(self) -> str:
        """One scrape, in Prometheus' text format."""
        from prometheus_client import generate_latest  # the optional extra (see __init__)

        return generate_latest(self.registry).decode()

    def start(self) -> Exporter:
        """Serve ``/metrics`` from a daemon thread; return ``self``."""
        from prometheus_client import start_http_server  # the optional extra

        server, _ = start_http_server(self.port, self.host, registry=self.registry)
        self._server = server
        self.port = int(server.server_address[1])
        return self

    def stop(self) -> None:
        """Stop serving and close what the collector opened."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        self.collector.close()


@contextmanager
def _until_signalled() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT (in the main thread)."""
    done = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield done
        return
    previous = {
        sig: signal.signal(sig, lambda *_: done.set()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield done
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_from_args(args: argparse.Namespace) -> int:
    """``laminar exporter`` with parsed arguments; the exit code."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError as e:
        print(
            f"laminar exporter needs prometheus_client ({e}): pip install 'laminar[exporter]'",
            file=sys.stderr,
        )
        return EXIT_ERROR
    if not args.dsn_env.isidentifier():  # a DSN given where its variable's name goes
        print(
            "laminar exporter: --dsn-env takes the name of an environment variable (e.g. "
            "LAMINAR_PG_DSN), not a DSN (not shown: it may hold a password)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    dsn = os.environ.get(args.dsn_env)
    if not dsn:
        print(
            f"laminar exporter: ${args.dsn_env} is not set: put the decision database's DSN in "
            "it (or name another variable with --dsn-env)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        # in-function: `laminar --help` loads no more than the parser needs
        from laminar._redact import parse_dsn
        from laminar.errors import ConfigError  # (as above)

        try:
            parse_dsn(dsn, f"${args.dsn_env}")
        except ConfigError as e:
            raise ValueError(e.message) from None
        extra = None if args.no_kafka else _kafka_extra(args.kafka_config_env)
    except ValueError as e:
        print(f"laminar exporter: {e}", file=sys.stderr)
        return EXIT_USAGE
    exporter = Exporter(dsn, host=args.host, port=args.port, kafka_extra=extra)
    if args.once:
        try:
            print(exporter.text(), end="")
        finally:
            exporter.stop()
        return EXIT_OK if exporter.collector.errors["postgres"] == 0 else EXIT_ERROR
    try:
        exporter.start()
    except OSError as e:
        print(f"laminar exporter: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return EXIT_ERROR
    print(f"laminar exporter: serving {exporter.url} (Ctrl-C stops)", file=sys.stderr, flush=True)
    with _until_signalled() as done:
        while not done.wait(3600):
            pass
    exporter.stop()
    return EXIT_OK
