"""The writer that Spark's commit runner creates (pyspark's ``python_streaming_sink_runner``: a
Python process per ``commit``/``abort`` that creates the writer only to call one of them) checks
no server and lifts no stop fence; anywhere else the writer's creation does both before any task
(docs/spark.md, "Throughput")."""

from __future__ import annotations

import sys
import types

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
