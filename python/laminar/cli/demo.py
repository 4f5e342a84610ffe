"""``laminar demo``: exactly-once into Kafka and PostgreSQL atomically, a crash, and the proof.

What it does, on embedded servers it starts and stops itself (`laminar.embedded`):

1. a PostgreSQL cluster, a Kafka broker (Apache Kafka by default, ``--broker tansu`` for the
   JVM-less Tansu), a Spark Connect server, and ``laminar exporter`` over the database;
2. a streaming query of "orders" (Spark's ``rate-micro-batch`` source: batch ``b`` holds the
   orders ``b * rows_per_batch`` up to the next batch's first, the same on every replay) written
   into the topic ``orders`` and the table ``public.orders`` as one atomic group
   (docs/protocol.md §3-4) — by default the way in, ``writeStream.format("laminar")``, Spark's
   tasks as two-phase participants and the driver-side commit deciding (`_demo_format`), or with
   ``--way foreachBatch`` by `laminar.spark`'s foreachBatch writer (`_demo_foreach`);
3. a crash in the middle of an epoch: a process holds at a protocol step and is SIGKILLed from
   here — format: a task's Python worker mid-write (its rows written, nothing prepared) and,
   with ``--crash-at``, the driver-side commit between the decision and the completion;
   foreachBatch: the worker running it (by default after the PostgreSQL decision);
4. the query restarted from its checkpoint: recovery completes or rolls back what the crash
   left, and Spark's replay of the interrupted batch is skipped or written;
5. the query drained to a clean end (``availableNow``) and a report that proves exactly-once:
   every order the source produced (per Spark's offset log, not per laminar) is in PostgreSQL
   (by key) and among Kafka's *committed* records (read with `laminar.kafka.log`) exactly once,
   nothing left in doubt; with commit and per-batch latency and a few of the exporter's metrics.

The writer side runs in the Spark server's Python processes; what it saw reaches this process
through a JSON-lines journal in the demo's directory, which works because the embedded server
runs on this machine.
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
    BROKERS,
    CRASH_POINTS,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    TABLE,
    TOPIC,
    TRANSACTIONAL_ID,
    WAYS,
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
    """A ``--crash-at`` value one of the ways knows (which one is checked with ``--way``)."""
    for way in WAYS:
        with contextlib.suppress(ConfigError):
            crash_point_of(value, way)
            return value
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
        "--way",
        choices=WAYS,
        default="format",
        help="format: writeStream.format('laminar'), Spark's tasks as the participants "
        "(default); foreachBatch: laminar.spark's foreachBatch writer",
    )
    parser.add_argument(
        "--broker",
        choices=BROKERS,
        default="kafka",
        help="kafka: Apache Kafka (default; a JVM, jars from bootstrap); tansu: Tansu (no JVM; "
        "it neither fences nor hides aborted records, laminar stays exactly-once on it)",
    )
    parser.add_argument(
        "--crash-at",
        type=_crash_choice,
        default=None,
        metavar="POINT",
        help="format: also kill the driver-side commit, at after-decision (decided, not "
        "completed) or scaleout.mid_completion (a task's worker is always killed mid-write); "
        "foreachBatch: where the writer is killed: after-decision (PostgreSQL committed, Kafka "
        "prepared; default), after-flush (Kafka prepared, nothing decided), or any point of an "
        "atomic epoch by name (atomic.after_lock ... atomic.after_kafka_commit)",
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
        help="leave the servers and the exporter up after the report (prints DSN, bootstrap, "
        "Spark URL, the exporter's URL) until Ctrl-C",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--spark-remote",
        metavar="URL",
        help="use this Spark Connect server (sc://host:port) instead of starting one; its "
        "Python must import laminar and it must run on this machine (--way foreachBatch only: "
        "the data source reads its DSN from its own server's environment)",
    )
    parser.add_argument(
        "--work-dir", metavar="DIR", help="keep the checkpoint, journal and logs here"
    )


def run_from_args(args: argparse.Namespace) -> int:
    """``laminar demo`` with parsed arguments."""
    if args.duration <= 0 or args.rate <= 0:
        print("laminar demo: --duration and --rate must be > 0", file=sys.stderr)
        return EXIT_ERROR
    try:
        if args.crash_at is not None:
            crash_point_of(args.crash_at, args.way)
    except ConfigError as e:
        print(f"laminar demo: {e}", file=sys.stderr)
        return EXIT_ERROR
    if args.way == "format" and args.spark_remote is not None:
        print(
            "laminar demo: --spark-remote needs --way foreachBatch: format('laminar') reads the "
            "PostgreSQL DSN from the Spark server's environment, so the demo starts its own",
            file=sys.stderr,
        )
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
            way=args.way,
            broker=args.broker,
        )
    )
