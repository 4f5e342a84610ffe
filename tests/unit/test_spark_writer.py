"""``laminar.spark`` without a server: the foreachBatch function against fake DataFrames and an
in-memory sink, the start() argument handling, the version-checked pickling, and the reports."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest

import laminar
import laminar.spark
from laminar import ConfigError, PreparedTxnState
from laminar._sink import TransactionalSink
from laminar.readiness import SinkCheck, check_sink
from laminar.spark import (
    ForeachBatchWriter,
    ServerReport,
    _explain_start_failure,
    _trigger_arguments,
    _writer_from,
    query_owner,
)
from laminar.spark._handoff import VERSION_MISMATCH, restore


class MemorySink(TransactionalSink):
    """Commits into a dict; records which lifecycle calls were made."""

    kind = "memory"

    def __init__(self, sink_id: str = "mem") -> None:
        super().__init__(sink_id)
        self.committed: dict[int, int] = {}
        self.calls: list[str] = []
        self._rows = 0

    def init_transactions(self) -> None:
        self.calls.append("init")
        self.tracker.last_committed_epoch = max(self.committed, default=None)

    def begin_transaction(self, epoch: int) -> bool:
        self.calls.append(f"begin {epoch}")
        self._rows = 0
        return self.tracker.begin(epoch)

    def write(self, batch: Any) -> None:
        self._rows += batch.num_rows
        self.tracker.record_write(batch.num_rows, 1)

    def prepare_transaction(self) -> PreparedTxnState:
        self.tracker.prepare()
        return PreparedTxnState(self.sink_id, self.tracker.current_epoch or 0)

    def commit_transaction(self, epoch: int) -> None:
        self.tracker.commit_started(epoch=epoch)
        self.committed[epoch] = self._rows
        self.tracker.commit_ok()

    def abort_transaction(self, epoch: int) -> None:
        self.tracker.abort_started(epoch=epoch)
        self.tracker.abort_ok()

    def last_committed_epoch(self) -> int | None:
        return max(self.committed, default=None)

    def recover(self) -> int | None:
        return self.last_committed_epoch()

    def close(self) -> None:
        pass


class FakeReader:
    def __init__(self, session: FakeSession) -> None:
        self.session = session

    def text(self, path: str) -> FakeReader:
        self.session.read_paths.append(path)
        return self

    def collect(self) -> list[tuple[str]]:
        if self.session.metadata is None:
            raise RuntimeError("[PATH_NOT_FOUND] Path does not exist")
        return [(self.session.metadata,)]


class FakeSession:
    def __init__(self, metadata: str | None = '{"id":"5f0c-query"}') -> None:
        self.metadata = metadata
        self.read_paths: list[str] = []

    @property
    def read(self) -> FakeReader:
        return FakeReader(self)


class FakeBatch:
    """What foreachBatch receives: a DataFrame with ``toArrow`` and ``sparkSession``."""

    def __init__(self, rows: int, session: FakeSession) -> None:
        self.table = pa.table({"id": pa.array(range(rows), pa.int64())})
        self.sparkSession = session
        self.to_arrow_calls = 0

    def toArrow(self) -> pa.Table:
        self.to_arrow_calls += 1
        return self.table


def test_an_empty_batch_opens_no_transaction_and_later_epochs_still_commit() -> None:
    sink = MemorySink()
    function = ForeachBatchWriter(laminar.exactly_once(sink), check_servers=False)
    session = FakeSession()
    function(FakeBatch(0, session), 0)
    assert sink.calls == []
    function(FakeBatch(3, session), 1)
    function(FakeBatch(0, session), 2)
    function(FakeBatch(2, session), 3)
    assert sink.committed == {1: 3, 3: 2}
    assert [c for c in sink.calls if c.startswith("begin")] == ["begin 1", "begin 3"]
    assert (function.batches, function.empty_batches) == (4, 2)


def test_a_replayed_epoch_is_skipped_even_after_empty_epochs() -> None:
    sink = MemorySink()
    function = ForeachBatchWriter(laminar.exactly_once(sink), check_servers=False)
    session = FakeSession()
    function(FakeBatch(3, session), 4)
    function(FakeBatch(0, session), 5)
    function(FakeBatch(3, session), 4)  # Spark replays the last batch after a restart
    assert sink.committed == {4: 3}


def test_the_writer_called_directly_by_foreach_batch_behaves_the_same() -> None:
    sink = MemorySink()
    writer = laminar.exactly_once(sink)
    session = FakeSession()
    writer(FakeBatch(0, session), 0)
    writer(FakeBatch(5, session), 1)
    assert sink.committed == {1: 5}
    assert writer.owner is None  # no checkpoint known: no owner
    assert session.read_paths == []


def test_the_first_batch_learns_the_owner_from_the_checkpoint_once() -> None:
    writer = laminar.exactly_once(MemorySink())
    function = ForeachBatchWriter(writer, "s3a://bucket/ckpt/", check_servers=False)
    session = FakeSession()
    function(FakeBatch(0, session), 0)
    function(FakeBatch(2, session), 1)
    assert writer.owner == "spark:5f0c-query"
    assert session.read_paths == ["s3a://bucket/ckpt/metadata"]


def test_an_explicit_owner_is_kept() -> None:
    writer = laminar.exactly_once(MemorySink(), owner="orders-v2")
    function = ForeachBatchWriter(writer, "/ckpt", check_servers=False)
    session = FakeSession()
    function(FakeBatch(1, session), 0)
    assert writer.owner == "orders-v2"
    assert session.read_paths == []


@pytest.mark.parametrize(
    ("metadata", "match"), [(None, "could not read"), ("not json", "does not hold")]
)
def test_an_unreadable_checkpoint_is_a_clear_error(metadata: str | None, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        query_owner(FakeSession(metadata), "/tmp/ckpt")


def test_the_first_batch_checks_the_servers_from_the_writing_process() -> None:
    sink = laminar.PostgresSink("postgresql://app:S3cr3t@127.0.0.1:1/shop", "orders")
    function = ForeachBatchWriter(laminar.exactly_once(sink), check_timeout_s=2)
    with pytest.raises(ConfigError) as info:
        function(FakeBatch(0, FakeSession()), 0)
    text = str(info.value)
    assert "cannot reach 1 of the configured servers" in text
    assert "public.orders" in text
    assert "127.0.0.1" in text
    assert f"pid {os.getpid()}" in text
    assert "S3cr3t" not in text


def test_a_missing_environment_variable_is_reported_as_such(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LAMINAR_UNIT_NO_SUCH_DSN", raising=False)
    sink = laminar.PostgresSink(laminar.env("LAMINAR_UNIT_NO_SUCH_DSN"), "orders")
    check = check_sink(sink)
    assert not check.ok
    assert check.error is not None
    assert "LAMINAR_UNIT_NO_SUCH_DSN" in check.error
    assert "is not set" in check.error


def test_the_foreach_batch_function_pickles_as_configuration() -> None:
    sink = MemorySink()
    function = ForeachBatchWriter(laminar.exactly_once(sink), "/ckpt")
    function(FakeBatch(1, FakeSession()), 0)
    clone = pickle.loads(pickle.dumps(function))
    assert clone.checkpoint_location == "/ckpt"
    assert (clone.batches, clone.empty_batches, clone._ready) == (0, 0, False)
    assert clone.writer.owner == "spark:5f0c-query"  # learnt before pickling: kept


# -- the version check on unpickling --------------------------------------------------------------


def test_a_writer_unpickled_by_another_laminar_version_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = pickle.dumps(laminar.exactly_once(MemorySink()))
    monkeypatch.setattr("laminar.spark._handoff._local_version", lambda: "0.0.0+other")
    with pytest.raises(ConfigError) as info:
        pickle.loads(data)
    text = str(info.value)
    assert text.startswith(VERSION_MISMATCH)
    assert f"laminar {laminar.__version__}" in text
    assert "0.0.0+other" in text
    assert f"pip install laminar=={laminar.__version__}" in text
    assert "PYSPARK_PYTHON" in text
    assert sys.executable in text


def test_the_version_is_checked_before_the_configuration_is_loaded() -> None:
    with pytest.raises(ConfigError, match=VERSION_MISMATCH):
        restore("0.0.0+other", b"not a pickle at all", None)


def test_same_version_round_trip_keeps_the_configuration() -> None:
    pg = laminar.PostgresSink("postgresql://app@db/shop", "orders")
    kafka = laminar.KafkaSink("broker:9092", "orders", "orders-tx")
    writer = laminar.exactly_once(pg, kafka, retries=7, owner="q", redo="log")
    clone = pickle.loads(pickle.dumps(writer))
    assert [s.sink_id for s in clone.sinks] == [pg.sink_id, "orders-tx"]
    assert (clone.retries, clone.owner, clone.redo) == (7, "q", "log")
    assert clone.group_id == writer.group_id


def test_reprs_hide_the_dsn_password() -> None:
    sink = laminar.PostgresSink("postgresql://app:S3cr3t@db/shop", "orders")
    writer = laminar.exactly_once(sink, owner="spark:q1")
    for text in (repr(writer), repr(ForeachBatchWriter(writer, "/ckpt"))):
        assert "S3cr3t" not in text
        assert "***" in text
        assert "spark:q1" in text


# -- start(): arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trigger", "expected"),
    [
        (None, {}),
        ("10 seconds", {"processingTime": "10 seconds"}),
        ("availableNow", {"availableNow": True}),
        ("available_now", {"availableNow": True}),
        ("once", {"once": True}),
        ({"processingTime": "1 minute"}, {"processingTime": "1 minute"}),
    ],
)
def test_triggers_in_spark_terms(trigger: Any, expected: dict[str, Any]) -> None:
    assert _trigger_arguments(trigger) == expected


@pytest.mark.parametrize("trigger", [{"continuous": "1 second"}, 5])
def test_impossible_triggers_are_refused(trigger: Any) -> None:
    with pytest.raises(ConfigError, match="trigger"):
        _trigger_arguments(trigger)


def test_sinks_come_positionally_or_by_kind() -> None:
    a = laminar.PostgresSink("postgresql://app@db/shop", "orders")
    b = laminar.KafkaSink("broker:9092", "orders", "orders-tx")
    c = laminar.PostgresSink("postgresql://app@db/shop", "audit")
    writer = _writer_from((a,), b, [c], {"retries": 1})
    assert [s.sink_id for s in writer.sinks] == [a.sink_id, "orders-tx", c.sink_id]
    assert writer.retries == 1
    built = laminar.exactly_once(MemorySink("m"))
    assert _writer_from((built,), None, None, {}) is built


@pytest.mark.parametrize(
    "args",
    [
        ((), None, None, {}),
        ((laminar.exactly_once(MemorySink()),), None, None, {"retries": 1}),
        ((laminar.exactly_once(MemorySink()), MemorySink("x")), None, None, {}),
    ],
)
def test_ambiguous_or_empty_targets_are_refused(args: Any) -> None:
    with pytest.raises(ConfigError):
        _writer_from(*args)


def test_start_needs_a_checkpoint() -> None:
    with pytest.raises(ConfigError, match="checkpoint_location"):
        laminar.spark.start(object(), MemorySink(), checkpoint_location="")


def test_spark_errors_about_the_server_python_become_advice() -> None:
    missing = RuntimeError(
        "[STREAMING_PYTHON_RUNNER_INITIALIZATION_FAILURE] Streaming Runner initialization "
        "failed\n  File ...\nModuleNotFoundError: No module named 'laminar'\n SQLSTATE: XXKST"
    )
    advice = _explain_start_failure(missing)
    assert advice is not None
    assert f"pip install laminar=={laminar.__version__}" in advice
    mismatch = RuntimeError(
        "Cause: Traceback\nlaminar.errors.ConfigError: laminar version mismatch: this writer "
        "was configured with laminar 1.0 but ...\n\nJVM stacktrace:"
    )
    assert _explain_start_failure(mismatch) == (
        "laminar version mismatch: this writer was configured with laminar 1.0 but ..."
    )
    assert _explain_start_failure(RuntimeError("something else")) is None


def test_server_reports_say_what_is_wrong() -> None:
    base = {"python": "/opt/py/bin/python", "python_version": "3.11.2", "host": "spark-1"}
    missing = ServerReport(laminar_version=None, import_error="ModuleNotFoundError: x", **base)
    assert not missing.ok
    assert "cannot import laminar" in (missing.problem() or "")
    assert "/opt/py/bin/python -m pip install" in (missing.problem() or "")
    other = ServerReport(laminar_version="0.0.1", laminar_path="/opt/x", **base)
    assert VERSION_MISMATCH in (other.problem() or "")
    down = SinkCheck("orders", "postgres", "PostgreSQL postgresql://db/x", False, "refused")
    unreachable = ServerReport(laminar_version=laminar.__version__, sinks=[down], **base)
    assert "cannot reach 1 of the configured servers" in (unreachable.problem() or "")
    up = SinkCheck("orders", "postgres", "PostgreSQL postgresql://db/x", True)
    fine = ServerReport(laminar_version=laminar.__version__, sinks=[up], **base)
    assert fine.ok
    assert fine.problem() is None
    assert SinkCheck.from_dict(down.to_dict()) == down


def test_importing_laminar_spark_does_not_import_pyspark() -> None:
    code = "import sys, laminar.spark; print('pyspark' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
