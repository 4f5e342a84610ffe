"""The lazy imports (PEP 562 ``__getattr__`` in `laminar`, `laminar.spark`;
`laminar._lazy`): every public name and path of the eager ``import laminar`` still works
in a fresh interpreter, in any order, and what Spark's driver-side processes unpickle loads in a
process that imported only ``laminar.spark.source``."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest


def fresh(code: str, stdin: bytes | None = None) -> str:
    """Run ``code`` in a fresh interpreter; its stdout (a failure shows its stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", code], input=stdin, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


@pytest.mark.parametrize(
    "code",
    [
        "import laminar; laminar.KafkaSink, laminar.PostgresSink, laminar.exactly_once",
        "from laminar import *; KafkaSink, PostgresSink, exactly_once, ExactlyOnceWriter",
        "import laminar.spark; laminar.spark.exactly_once, laminar.spark.ExactlyOnceWriter",
        "import laminar; s = laminar.spark; s.start, s.register, s.check_server, "
        "s.foreach_batch, s.ForeachBatchWriter, s.ServerReport, s.EpochResult",
        "import laminar; laminar.kafka.log, laminar.kafka.sink, laminar.spark.source, "
        "laminar.spark.options",
        "import laminar.spark.source; import laminar; laminar.KafkaSink",
        "import laminar; assert getattr(laminar, 'x', None) is None; "
        "assert not hasattr(laminar, 'nope')",
        # submodules an eager import loaded as a side effect
        "import laminar.spark; laminar.spark.writer.ExactlyOnceWriter",
        "import laminar; laminar.protocol.scaleout.ScaleOutTask",
        "import laminar; laminar.postgres.sink.PostgresSink, laminar.kafka.sink.KafkaSink",
    ],
)
def test_public_names_in_a_fresh_interpreter(code: str) -> None:
    fresh(code)


def test_hasattr_of_a_dotted_name_is_false_not_an_import_error() -> None:
    """``hasattr(laminar, "a.b")`` asked ``find_spec("laminar.a.b")``, which imports
    ``laminar.a`` and raised ``ModuleNotFoundError`` out of ``hasattr``."""
    assert fresh("import laminar; print(hasattr(laminar, 'a.b'), hasattr(laminar, ''))") == (
        "False False"
    )


def test_dir_lists_what_the_eager_import_listed() -> None:
    out = fresh(
        "import laminar, laminar.spark\n"
        "print(sorted({'spark', 'protocol', 'postgres', 'kafka', 'metadata', 'readiness',"
        " 'KafkaSink'} - set(dir(laminar))))\n"
        "print(sorted({'exactly_once', 'ExactlyOnceWriter', 'EpochResult', 'writer'}"
        " - set(dir(laminar.spark))))"
    )
    assert out.splitlines() == ["[]", "[]"]


def test_pickles_load_where_only_the_data_source_is_imported() -> None:
    """Spark's driver-side and commit processes import ``laminar.spark.source`` and unpickle
    the writer, the options and the tasks' messages."""
    from pyspark import cloudpickle

    from laminar.protocol.scaleout import ParticipantResult
    from laminar.spark.options import parse_options
    from laminar.spark.source import LaminarCommitMessage, LaminarStreamWriter

    options = parse_options(
        {
            "kafka.bootstrap.servers": "broker:9092",
            "kafka.topic": "orders",
            "postgres.dsn.env": "ORDERS_PG_DSN",
            "postgres.table": "public.orders",
        }
    )
    writer = LaminarStreamWriter.__new__(LaminarStreamWriter)  # no database here
    writer.options = options
    result = ParticipantResult(0, "a", "pg", "postgres", "public.orders", 3, "", None, "prepared")
    message = LaminarCommitMessage(7, 0, "spark:q", [result])
    load = (
        "import sys, pickle, laminar.spark.source\n"
        "o = pickle.loads(sys.stdin.buffer.read())\n"
        "print(type(o).__name__, repr(getattr(o, 'options', o)))"
    )
    for obj in (options, writer, message):
        for dumps in (pickle.dumps, cloudpickle.dumps):
            out = fresh(load, dumps(obj))
            assert out == f"{type(obj).__name__} {getattr(obj, 'options', obj)!r}"
