"""The writer that Spark's commit runner creates (pyspark's ``python_streaming_sink_runner``: a
Python process per ``commit``/``abort`` that creates the writer only to call one of them) checks
no server and lifts no stop fence; anywhere else the writer's creation does both before any task
(docs/spark.md, "Throughput"). Neither those processes nor the commit's import pyarrow."""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from pathlib import Path

import pytest

from laminar.errors import ConfigError
from laminar.spark import source
from laminar.spark.options import parse_options

OPTIONS = {
    "kafka.bootstrap.servers": "127.0.0.1:9",
    "kafka.topic": "orders",
    "laminar.state.dsn.env": "LAMINAR_TEST_UNSET_DSN",
}


def test_the_commit_runners_writer_reaches_no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAMINAR_TEST_UNSET_DSN", raising=False)
    monkeypatch.setitem(sys.modules, source._COMMIT_RUNNER, types.ModuleType(source._COMMIT_RUNNER))
    assert source._in_commit_runner()
    writer = source.LaminarStreamWriter(parse_options(OPTIONS))  # no DSN, no broker: no error
    assert writer.options.topic == "orders"


def test_the_runner_as_main_counts_too(monkeypatch: pytest.MonkeyPatch) -> None:
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name=source._COMMIT_RUNNER)  # type: ignore[assignment]
    monkeypatch.delitem(sys.modules, source._COMMIT_RUNNER, raising=False)
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert source._in_commit_runner()


def test_any_other_writer_checks_before_its_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAMINAR_TEST_UNSET_DSN", raising=False)
    monkeypatch.delitem(sys.modules, source._COMMIT_RUNNER, raising=False)
    assert not source._in_commit_runner()
    # the servers' check off: the stop fence's lift still needs the decision database
    options = parse_options({**OPTIONS, "laminar.check.servers": "false"})
    with pytest.raises(ConfigError, match="LAMINAR_TEST_UNSET_DSN"):
        source.LaminarStreamWriter(options)


#: `laminar.spark.source`'s functions that run in a task, on the executors, where Spark's Arrow
#: feed has imported pyarrow already; the others run in driver-side processes.
_TASK_SIDE = {"write_task"}


def _driver_side_imports() -> list[str]:
    """Every import statement in `laminar.spark.source`'s driver-side functions, and those of
    `laminar.spark.options` (which builds the sinks), as source lines."""
    lines = []
    for module in (source, sys.modules["laminar.spark.options"]):
        assert module.__file__ is not None
        tree = ast.parse(Path(module.__file__).read_text())
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef) and function.name not in _TASK_SIDE:
                lines += [
                    ast.unparse(node)
                    for node in ast.walk(function)
                    if isinstance(node, ast.Import | ast.ImportFrom)
                ]
    return lines


def test_the_commit_runner_never_imports_pyarrow() -> None:
    # Spark starts its commit runner anew for every query (docs/benchmarks.md); it takes no
    # batch, pyspark's runner imports no pyarrow, and pyarrow with numpy is 50-70 ms of it. (The
    # writer's creation imports no pyarrow either, though pyspark's planner does after it.)
    imports = _driver_side_imports()
    assert any("laminar.protocol.atomic" in line for line in imports)  # the commit's machine
    assert any("laminar.kafka.sink" in line for line in imports)
    assert any("laminar.postgres.sink" in line for line in imports)
    code = "\n".join(
        [
            "import sys",
            f"import {source._COMMIT_RUNNER}",
            "import laminar.spark.source",
            *imports,
            "print(sorted(m for m in ('pyarrow', 'numpy') if m in sys.modules))",
        ]
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", imports
