"""What the API accepts, checked in one place (issue 11): epochs, batches (a one-shot stream is
read once), the Kafka sink's names, RecordTooLargeError's place in the tree, redaction that
masks only the password, and the `laminar status` failures that must not be tracebacks."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pyarrow as pa
import pytest

import laminar
from laminar import (
    AbortableError,
    ConfigError,
    DataError,
    FatalError,
    KafkaSink,
    LaminarError,
    PostgresSink,
    RecordTooLargeError,
)
from laminar._input import MAX_EPOCH, check_epoch, materialize, read_once
from laminar._redact import redact_dsn, redact_text
from laminar.cli import EXIT_USAGE, main

BAD_TYPES = [5.0, "7", None, True, False, b"1", [1]]
OUT_OF_RANGE = [-1, 2**63, -(2**63), 10**30]


# -- epochs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("epoch", BAD_TYPES, ids=repr)
def test_an_epoch_that_is_not_an_integer_is_a_config_error(epoch: object) -> None:
    with pytest.raises(ConfigError, match="must be an integer"):
        check_epoch(epoch)


@pytest.mark.parametrize("epoch", OUT_OF_RANGE)
def test_an_epoch_out_of_range_is_a_data_error(epoch: int) -> None:
    with pytest.raises(DataError, match="out of range"):
        check_epoch(epoch)


def test_epochs_in_range() -> None:
    assert check_epoch(0) == 0
    assert check_epoch(MAX_EPOCH) == 2**63 - 1
    assert type(check_epoch(True is False or 3)) is int


def sinks() -> list[Any]:
    return [
        KafkaSink("127.0.0.1:1", "t", "tid-epochs"),
        PostgresSink("host=127.0.0.1 port=1 dbname=x", "t"),
    ]


@pytest.mark.parametrize("epoch", [*BAD_TYPES, *OUT_OF_RANGE], ids=repr)
def test_every_sink_and_the_writer_refuse_bad_epochs_before_any_io(epoch: object) -> None:
    """No server is reachable here: the refusal comes before any connection is attempted, and
    it is a LaminarError (never TypeError/OverflowError, never True taken as epoch 1)."""
    for sink in sinks():
        for call in (sink.begin_transaction, sink.commit_transaction, sink.abort_transaction):
            with pytest.raises((ConfigError, DataError)) as raised:
                call(epoch)
            assert raised.value.sink_id == sink.sink_id
        for writer in (laminar.exactly_once(sink), laminar.exactly_once(*sinks())):
            with pytest.raises((ConfigError, DataError)):
                writer.write_epoch(epoch, pa.table({"a": [1]}))  # type: ignore[arg-type]


def test_the_epoch_base_cannot_push_an_epoch_out_of_range() -> None:
    writer = laminar.exactly_once(sinks()[1])
    writer._epoch_base = 10
    with pytest.raises(DataError, match="epoch base"):
        writer._based(MAX_EPOCH - 5)


# -- batches --------------------------------------------------------------------------------------


def table() -> pa.Table:
    return pa.table({"id": [1, 2, 3], "s": ["a", None, "c"]})


class Stream:
    def __init__(self, data: pa.Table) -> None:
        self.reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(1))

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.reader.__arrow_c_stream__(requested_schema)


def test_tables_and_batches_are_used_as_they_are() -> None:
    data = table()
    assert materialize(data) is data
    batch = data.to_batches()[0]
    assert materialize(batch) is batch
    assert read_once("not arrow") == "not arrow"  # a sink of the caller's decides


@pytest.mark.parametrize("kind", ["reader", "stream"])
def test_a_stream_is_read_once_into_a_table(kind: str) -> None:
    data = table()
    source: Any = (
        pa.RecordBatchReader.from_batches(data.schema, data.to_batches(1))
        if kind == "reader"
        else Stream(data)
    )
    read = read_once(source)
    assert isinstance(read, pa.Table)
    assert read.equals(data)
    assert read.equals(read)  # read any number of times


def test_a_reader_read_before_is_refused() -> None:
    data = table()
    reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(1))
    materialize(reader)
    with pytest.raises(ConfigError, match="already read to the end"):
        materialize(reader)


def test_a_one_shot_stream_object_handed_in_again_is_refused_not_read_as_empty() -> None:
    # a cursor-like object over one reader: a failed write_epoch consumed it, the retry must not
    # commit an empty epoch
    stream = Stream(table())
    assert materialize(stream).num_rows == 3
    with pytest.raises(ConfigError, match=r"gave 3 row.*none now"):
        materialize(stream)


def test_an_object_exporting_a_fresh_stream_each_time_is_read_again() -> None:
    class Fresh:  # a polars DataFrame: a new stream per export
        def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
            return table().__arrow_c_stream__(requested_schema)

    fresh = Fresh()
    assert materialize(fresh).equals(table())
    assert materialize(fresh).equals(table())


def test_an_empty_stream_stays_legal() -> None:
    empty = table().slice(0, 0)
    for _ in range(2):
        assert materialize(Stream(empty)).num_rows == 0


def test_a_pandas_frame_is_written_without_its_row_labels() -> None:
    import pandas as pd  # a dev dependency (pyspark[connect] needs it)

    frame = pd.DataFrame({"id": [1, 2, 3, 4], "s": ["a", "b", "c", "d"]})
    odd = frame[frame.id % 2 == 1]  # index 0, 2: row labels, not data
    read = materialize(odd)
    assert read.column_names == ["id", "s"]
    assert read.to_pylist() == [{"id": 1, "s": "a"}, {"id": 3, "s": "c"}]
    assert read_once(odd).column_names == ["id", "s"]


def test_a_pandas_frame_with_a_named_index_is_refused() -> None:
    import pandas as pd  # a dev dependency (pyspark[connect] needs it)

    sums = pd.DataFrame({"user": ["a", "a", "b"], "n": [1, 2, 3]}).groupby("user").sum()
    with pytest.raises(ConfigError, match="reset_index"):
        materialize(sums)
    assert materialize(sums.reset_index()).column_names == ["user", "n"]


def test_a_stream_that_fails_while_read_is_a_data_error() -> None:
    data = table()

    def batches() -> Any:
        yield data.to_batches()[0]
        raise RuntimeError("the source went away")

    reader = pa.RecordBatchReader.from_batches(data.schema, batches())
    with pytest.raises(DataError, match="the source went away"):
        materialize(reader)


@pytest.mark.parametrize(
    "bad",
    ["text", 42, {"a": [1]}, pa.chunked_array([[1, 2]])],
    ids=["str", "int", "dict", "ChunkedArray"],
)
def test_what_is_not_a_table_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError):
        materialize(bad)


def test_an_array_export_becomes_a_record_batch() -> None:
    class Exported:
        def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
            return table().to_batches()[0].__arrow_c_array__(requested_schema)

    assert materialize(Exported()).equals(table().to_batches()[0])


# -- Kafka names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("topic", [".", "..", "a b", "", "x" * 250, "t\n"])
def test_invalid_topic_names_are_refused(topic: str) -> None:
    with pytest.raises(ConfigError, match="not a valid Kafka topic name"):
        KafkaSink("k:9092", topic, "tid")


def test_dots_inside_topic_names_are_fine() -> None:
    assert KafkaSink("k:9092", "a.b..c", "tid").topic == "a.b..c"


@pytest.mark.parametrize("tid", ["ordérs", "a\x00b", "tab\tid", "new\nline", "emoji-😀"])
def test_a_transactional_id_outside_printable_ascii_is_refused_up_front(tid: str) -> None:
    with pytest.raises(ConfigError, match="printable ASCII"):
        KafkaSink("k:9092", "t", tid)


def test_printable_ascii_transactional_ids_are_fine() -> None:
    assert KafkaSink("k:9092", "t", "orders sink/v2:eu~1").transactional_id == "orders sink/v2:eu~1"


# -- RecordTooLargeError --------------------------------------------------------------------------


def test_record_too_large_is_a_data_error_and_abortable_with_coherent_flags() -> None:
    err = RecordTooLargeError("row 7 is too large", sink_id="k", epoch=3)
    for cls in (DataError, ValueError, AbortableError, FatalError, LaminarError):
        assert isinstance(err, cls)
    # aborted by the sink, not worth retrying, and the sink stays usable (not fatal)
    assert (err.retriable, err.requires_abort, err.fatal) == (False, True, False)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is RecordTooLargeError
    assert (copy.sink_id, copy.epoch) == ("k", 3)


# -- redaction ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("host=h password=pw", "host=h password=***"),
        (
            "PostgresSink(dsn='host=h password=pw', table='t')",
            "PostgresSink(dsn='host=h password=***', table='t')",
        ),
        ('dsn "host=h password=pw" failed', 'dsn "host=h password=***" failed'),
        ("'password=x\\'y' next", "'password=***' next"),
        ("password=a\\ b port=1", "password=*** port=1"),
        ("password='a b' port=1", "password=*** port=1"),
    ],
)
def test_the_password_is_masked_and_nothing_after_it(text: str, expected: str) -> None:
    assert redact_dsn(text) == expected


def test_redacting_twice_changes_nothing() -> None:
    dsn = "host=h password=pw"
    message = f"cannot connect to {redact_dsn(dsn)}: timeout"
    assert redact_text(message, ("pw",)) == "cannot connect to host=h password=***: timeout"


# -- laminar status -------------------------------------------------------------------------------


@pytest.mark.parametrize("dsn", ["garbage", "host=h port", "a=b", "host='unterminated"])
def test_a_malformed_dsn_is_a_usage_error_not_a_traceback(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--dsn", dsn]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "is not a libpq connection string" in err
    assert "Traceback" not in err


def test_json_errors_are_json_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--dsn", "garbage password=s3cret", "--json"]) == EXIT_USAGE
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["exit_code"] == EXIT_USAGE
    assert "libpq" in doc["error"]
    assert "s3cret" not in out.out + out.err
