"""Every input kind the API accepts reaches every store exactly (issue 11, defect 1).

For each sink combination (Kafka, PostgreSQL, both atomically) and with or without a retry
injected in the middle of the write (a real terminated backend for PostgreSQL), every kind of
input — Table, RecordBatch, RecordBatchReader, chunked, sliced, dictionary-encoded, a one-shot
PyCapsule stream, a PyCapsule array — is written as one epoch, and the stores are read back:
PostgreSQL by SELECT, Kafka through ``laminar.kafka.log.read_committed`` (control batches
replayed). Each must hold exactly the input rows: a one-shot stream is read once per epoch and
every sink and every retry see the same rows.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import laminar
from laminar import ConfigError
from tests.integration.integrity_helpers import (
    INPUT_KINDS,
    Faults,
    as_rows,
    create_rows_table,
    epoch_rows,
    kafka_rows,
    pg_rows,
    raise_abortable,
    terminate_backend,
)
from tests.integration.kafka_shape_helpers import assert_exact, other_topic, shape_table
from tests.integration.pg_helpers import count_by_epoch, create_table

pytestmark = pytest.mark.integration


@pytest.fixture
def stores(
    kafka_broker: Any, kafka_bootstrap: str, pg_dsn: str, unique_name: Any
) -> dict[str, str]:
    topic, table = unique_name("kinds"), unique_name("kinds")
    kafka_broker.create_topic(topic, partitions=2)
    create_rows_table(pg_dsn, table)
    return {"bootstrap": kafka_bootstrap, "topic": topic, "dsn": pg_dsn, "table": table}


@pytest.mark.parametrize("retry", [False, True], ids=["once", "retried"])
@pytest.mark.parametrize("sinks", ["kafka", "postgres", "atomic"])
def test_every_input_kind_lands_exactly(
    stores: dict[str, str], monkeypatch: pytest.MonkeyPatch, sinks: str, retry: bool
) -> None:
    faults = Faults(monkeypatch)
    tid = f"kinds-{stores['topic']}"
    chosen: list[Any] = []
    if sinks in ("kafka", "atomic"):
        chosen.append(
            laminar.KafkaSink(
                stores["bootstrap"],
                stores["topic"],
                tid,
                key="id",
                commit_timeout_s=5.0,
                init_timeout_s=15.0,
            )
        )
    if sinks in ("postgres", "atomic"):
        chosen.append(laminar.PostgresSink(stores["dsn"], stores["table"], sink_id=f"pg-{tid}"))
    writer = laminar.exactly_once(*chosen, retry_backoff_s=0.01)
    written: list[pa.Table] = []
    try:
        for epoch, (kind, make) in enumerate(INPUT_KINDS.items()):
            rows = epoch_rows(epoch)
            if retry:
                if sinks == "kafka":
                    faults.at("kafka.mid_produce", raise_abortable("kafka.mid_produce"))
                elif sinks == "postgres":
                    faults.at(
                        "postgres.mid_copy", terminate_backend(stores["dsn"], f"laminar pg-{tid}")
                    )
                else:
                    group = writer.group_id or ""
                    faults.at(
                        "postgres.mid_copy",
                        terminate_backend(stores["dsn"], f"laminar group {group}"),
                    )
            result = writer.write_epoch(epoch, make(rows))
            assert result.committed, kind
            assert result.attempts == (2 if retry else 1), kind
            written.append(rows)
            expected = as_rows(written)
            if sinks in ("postgres", "atomic"):
                assert pg_rows(stores["dsn"], stores["table"]) == expected, kind
            if sinks in ("kafka", "atomic"):
                assert kafka_rows(stores["bootstrap"], stores["topic"], tid) == expected, kind
    finally:
        writer.close()


def test_a_reader_of_400_000_rows_survives_a_backend_terminated_mid_copy(
    pg_dsn: str, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reported case: the automatic retry used to read the spent reader and commit the
    epoch with 0 of 400,000 rows."""
    faults = Faults(monkeypatch)
    table = create_table(pg_dsn, table_name)
    sink = laminar.PostgresSink(pg_dsn, table, sink_id=f"big-{table_name}")
    writer = laminar.exactly_once(sink, retry_backoff_s=0.01)
    n = 400_000
    data = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "epoch": pa.array([0] * n, pa.int64()),
            "payload": pa.array([f"p{i}" for i in range(n)]),
            "amount": pa.array([i % 1000 for i in range(n)], pa.int64()),
        }
    )
    faults.at("postgres.mid_copy", terminate_backend(pg_dsn, f"laminar {sink.sink_id}"))
    try:
        result = writer.write_epoch(
            0, pa.RecordBatchReader.from_batches(data.schema, data.to_batches(50_000))
        )
    finally:
        writer.close()
    assert (result.committed, result.attempts) == (True, 2)
    assert count_by_epoch(pg_dsn, table) == {0: n}


def test_a_sink_written_directly_refuses_a_spent_reader(
    stores: dict[str, str], unique_name: Any
) -> None:
    """Without the writer, ``sink.write(reader)`` reads the reader once; handing the same reader
    again (a retry by hand) is a ConfigError, never an epoch committed without its rows."""
    tid = unique_name("direct")
    sinks = [
        laminar.KafkaSink(stores["bootstrap"], stores["topic"], tid, key="id", init_timeout_s=15.0),
        laminar.PostgresSink(stores["dsn"], stores["table"], sink_id=tid),
    ]
    for epoch, sink in enumerate(sinks):
        rows = epoch_rows(epoch)
        reader = pa.RecordBatchReader.from_batches(rows.schema, rows.to_batches(2))
        try:
            sink.init_transactions()
            assert sink.begin_transaction(epoch)
            sink.write(reader)
            sink.abort_transaction(epoch)  # as after a failure: the user tries again
            assert sink.begin_transaction(epoch)
            with pytest.raises(ConfigError, match="already read to the end"):
                sink.write(reader)
            assert sink.transaction_state.name == "Idle"  # the epoch was aborted
        finally:
            sink.close()
    assert pg_rows(stores["dsn"], stores["table"]) == []
    assert kafka_rows(stores["bootstrap"], stores["topic"], tid) == []


def _shape_kind(kind: str, table: pa.Table) -> Any:
    """An input kind of Spark's Kafka shape: ``dictionary`` encodes its string columns."""
    if kind != "dictionary":
        return INPUT_KINDS[kind](table)
    for name in ("key", "topic"):
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, pa.compute.dictionary_encode(table[name]))
    return table


@pytest.mark.parametrize("retry", [False, True], ids=["once", "retried"])
def test_every_input_kind_of_spark_kafka_shape_lands_exactly(
    kafka_broker: Any,
    kafka_bootstrap: str,
    unique_name: Any,
    monkeypatch: pytest.MonkeyPatch,
    retry: bool,
) -> None:
    """Spark's Kafka-sink shape (two topics, explicit partitions, headers) in every input kind:
    each record once on its own topic and partition with its exact key, value and headers."""
    home = unique_name("shape")
    kafka_broker.create_topic(home, partitions=2)
    kafka_broker.create_topic(other_topic(home), partitions=3)
    tid = f"kinds-{home}"
    faults = Faults(monkeypatch)
    writer = laminar.exactly_once(
        laminar.KafkaSink(kafka_bootstrap, home, tid, commit_timeout_s=5.0, init_timeout_s=15.0),
        retry_backoff_s=0.01,
    )
    try:
        for epoch, kind in enumerate(INPUT_KINDS):
            if retry:
                faults.at("kafka.mid_produce", raise_abortable("kafka.mid_produce"))
            result = writer.write_epoch(epoch, _shape_kind(kind, shape_table(epoch, home)))
            assert result.committed, kind
            assert result.attempts == (2 if retry else 1), kind
    finally:
        writer.close()
    assert_exact(kafka_bootstrap, home, tid, range(len(INPUT_KINDS)))
