"""``laminar demo``: exactly-once into Kafka and PostgreSQL atomically, a crash, and the proof.

What it does, on embedded servers it starts and stops itself (`laminar.embedded`):

1. a PostgreSQL cluster, a Kafka-protocol broker (Tansu) and a Spark Connect server;
2. a streaming query of "orders" (Spark's ``rate-micro-batch`` source: batch ``b`` holds the
   orders ``b * rows_per_batch`` up to the next batch's first, the same on every replay) written
   by `laminar.spark` into the topic ``orders`` and the table ``public.orders`` as one atomic
   group (docs/protocol.md §3);
3. a crash in the middle of an epoch: the process running ``foreachBatch`` holds at a protocol
   step (by default after the PostgreSQL decision, with the Kafka transaction prepared but not
   committed) and is SIGKILLed from here;
4. the query restarted from its checkpoint: the new writer recovers (the decided epoch is
   completed in Kafka) and Spark's replay of the interrupted batch is skipped or written;
5. the query drained to a clean end (``availableNow``) and a report that proves exactly-once:
   every order the source produced (per Spark's offset log, not per laminar) is in PostgreSQL
   (by key) and among Kafka's *committed* records (read with `laminar.kafka.log`) exactly once.

The writer side runs in the Spark server's Python worker; what it saw (epochs, commit latency,
recovery messages) reaches this process through a JSON-lines file in the demo's directory, which
works because the embedded server runs on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

from laminar.cli._demo_run import Demo
from laminar.cli._demo_spec import (
    CRASH_POINTS,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    TABLE,
    TOPIC,
    TRANSACTIONAL_ID,
    DemoError,
    DemoOptions,
    DemoReport,
    Progress,
    StoreCheck,
    crash_point_of,
)
from laminar.cli._demo_writer import DemoForeachBatch
from laminar.errors import ConfigError, LaminarError

# The demo's pieces live in _demo_spec (settings, report), _demo_writer (the Spark side) and
# _demo_run (the run); this module is the command's entry point and re-exports them.
__all__ = [
    "CRASH_POINTS",
    "TABLE",
    "TOPIC",
    "TRANSACTIONAL_ID",
    "Demo",
    "DemoError",
    "DemoForeachBatch",
    "DemoOptions",
    "DemoReport",
    "Progress",
    "StoreCheck",
    "add_arguments",
    "crash_point_of",
    "run",
    "run_from_args",
]


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the demo like Ctrl-C (cleanup included), in the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(options: DemoOptions, out: TextIO = sys.stdout) -> int:
    """Run the demo; returns the exit code (0 proof holds, 1 proof failed, 2 error, 130
    interrupted)."""
    # In-function: the embedded servers load only when the demo runs, not for `laminar --help`.
    from laminar.embedded import EmbeddedServerError

    try:
        import pyspark.sql.connect  # noqa: F401
    except ImportError as e:
        print(
            f"laminar demo needs Spark Connect's client ({e}): pip install 'laminar[demo]'",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        with _sigterm_as_interrupt():
            return Demo(options, out).run()
    except KeyboardInterrupt:
        print("\nlaminar demo: interrupted; everything it started is stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (DemoError, EmbeddedServerError, LaminarError) as e:
        print(f"laminar demo: {e}", file=sys.stderr)
        return EXIT_ERROR


def _crash_choice(value: str) -> str:
    try:
        crash_point_of(value)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``laminar demo`` options."""
    parser.add_argument(
        "--duration", type=float, default=30.0, metavar="S", help="seconds of streaming (30)"
    )
    parser.add_argument(
        "--rate", type=int, default=100, metavar="N", help="orders per second (100)"
    )
    parser.add_argument(
        "--crash-at",
        type=_crash_choice,
        default="after-decision",
        metavar="POINT",
        help="where the writer is killed: after-decision (PostgreSQL committed, Kafka prepared; "
        "default), after-flush (Kafka prepared, nothing decided), or any point of an atomic "
        "epoch by name (atomic.after_lock ... atomic.after_kafka_commit; atomic.step1-8 too)",
    )
    parser.add_argument(
        "--redo",
        choices=("replay", "log"),
        default="replay",
        help="how a decided epoch is completed in Kafka when EndTxn cannot: Spark's replay "
        "(default) or a redo log in PostgreSQL",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the servers up after the report (prints DSN, bootstrap, Spark URL) until "
        "Ctrl-C",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--spark-remote",
        metavar="URL",
        help="use this Spark Connect server (sc://host:port) instead of starting one; its "
        "Python must import laminar and it must run on this machine",
    )
    parser.add_argument(
        "--work-dir", metavar="DIR", help="keep the checkpoint, journal and logs here"
    )


def run_from_args(args: argparse.Namespace) -> int:
    """``laminar demo`` with parsed arguments."""
    if args.duration <= 0 or args.rate <= 0:
        print("laminar demo: --duration and --rate must be > 0", file=sys.stderr)
        return EXIT_ERROR
    return run(
        DemoOptions(
            duration_s=args.duration,
            rate=args.rate,
            crash_at=args.crash_at,
            redo=args.redo,
            keep=args.keep,
            json=args.json,
            spark_remote=args.spark_remote,
            work_dir=args.work_dir,
        )
    )
