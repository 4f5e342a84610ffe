"""PostgresSink against a real PostgreSQL: commits, rollbacks, replays, restarts, racing writers,
hostile identifiers, validation before any row is sent."""

from __future__ import annotations

import json
import logging
import pickle
import threading
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

import laminar
from laminar import (
    ConfigError,
    DataError,
    IllegalStateError,
    PostgresSink,
    TransactionState,
)
from tests.integration.pg_helpers import (
    backend_pids,
    batch,
    count_by_epoch,
    create_table,
    duplicates,
    query,
    run_child,
    sink_epoch,
    wait_for,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def table(pg_dsn: str, table_name: str) -> str:
    return create_table(pg_dsn, table_name)


# -- commit, rollback, replay ----------------------------------------------------------------------


def test_a_committed_epoch_is_visible_and_recorded(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table)
    writer = laminar.exactly_once(sink)
    result = writer.write_epoch(0, batch(0, rows=7))
    assert result.committed
    assert count_by_epoch(pg_dsn, table) == {0: 7}
    epoch, rows, nbytes = query(
        pg_dsn,
        "SELECT epoch, rows, bytes FROM laminar.sink_epochs WHERE sink_id = %s",
        (sink.sink_id,),
    )[0]
    assert (epoch, rows) == (0, 7)
    assert nbytes > 0
    kind, config = query(
        pg_dsn, "SELECT kind, config FROM laminar.sinks WHERE sink_id = %s", (sink.sink_id,)
    )[0]
    assert kind == "postgres"
    assert config["table"] == ["public", table.strip('"')]
    assert sink.transaction_state == TransactionState.Idle()
    assert sink.last_committed_epoch() == 0
    metrics = sink.metrics
    assert (metrics.commits, metrics.events_committed) == (1, 7)
    writer.close()


def test_the_default_sink_id_is_the_schema_qualified_table(pg_dsn: str, table_name: str) -> None:
    create_table(pg_dsn, table_name)
    assert PostgresSink(pg_dsn, table_name).sink_id == f"public.{table_name}"
    assert PostgresSink(pg_dsn, f"public.{table_name}").sink_id == f"public.{table_name}"
    assert PostgresSink(pg_dsn, table_name, sink_id="mine").sink_id == "mine"


def test_rows_stay_invisible_until_commit_and_vanish_on_abort(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table)
    sink.init_transactions()
    assert sink.begin_transaction(0)
    sink.write(batch(0))
    assert count_by_epoch(pg_dsn, table) == {}  # another session sees nothing yet
    assert sink_epoch(pg_dsn, sink.sink_id) is None
    sink.abort_transaction(0)
    assert count_by_epoch(pg_dsn, table) == {}
    assert sink.metrics.aborts == 1
    # the aborted epoch can be written again
    assert sink.begin_transaction(0)
    sink.write(batch(0))
    sink.commit_transaction(0)
    assert count_by_epoch(pg_dsn, table) == {0: 5}
    sink.close()


def test_replayed_epochs_are_skipped(
    pg_dsn: str, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = PostgresSink(pg_dsn, table)
    writer = laminar.exactly_once(sink)
    for epoch in range(3):
        assert writer.write_epoch(epoch, batch(epoch)).committed
    assert writer.write_epoch(2, batch(2)).skipped
    with caplog.at_level(logging.WARNING, logger="laminar.postgres.sink"):
        assert writer.write_epoch(1, batch(1)).skipped
    assert "epoch 1 is older than the last committed epoch 2" in caplog.text
    assert count_by_epoch(pg_dsn, table) == {0: 5, 1: 5, 2: 5}
    assert sink.metrics.replays_skipped == 2
    writer.close()
    # a fresh sink object learns the last epoch from the database, not from memory
    again = PostgresSink(pg_dsn, table)
    assert not again.begin_transaction(2)
    assert again.begin_transaction(3)
    again.abort_transaction(3)
    again.close()


def test_several_writes_and_an_empty_batch_in_one_epoch(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table)
    assert sink.begin_transaction(4)
    sink.write(batch(4, rows=3))
    sink.write(batch(4, rows=2, start=3))
    sink.write(batch(4, rows=0))
    sink.commit_transaction(4)
    assert count_by_epoch(pg_dsn, table) == {4: 5}
    rows = query(pg_dsn, "SELECT rows FROM laminar.sink_epochs WHERE sink_id = %s", (sink.sink_id,))
    assert rows == [(5,)]
    # an epoch with no rows at all still commits (and is then skipped on replay)
    assert laminar.exactly_once(sink).write_epoch(5, batch(5, rows=0)).committed
    assert sink_epoch(pg_dsn, sink.sink_id) == 5
    sink.close()


def test_inputs_other_than_tables(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table)
    data = batch(0, rows=4)
    writer = laminar.exactly_once(sink)
    writer.write_epoch(0, data.to_batches()[0])  # RecordBatch
    writer.write_epoch(1, pa.RecordBatchReader.from_batches(data.schema, data.to_batches()))
    assert sum(count_by_epoch(pg_dsn, table).values()) == 8
    sink.begin_transaction(2)
    with pytest.raises(ConfigError, match="pyarrow Table"):
        sink.write([{"id": 1}])
    assert sink.transaction_state == TransactionState.Idle()
    writer.close()


def test_lifecycle_misuse_is_an_illegal_state_error(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table)
    with pytest.raises(IllegalStateError):
        sink.write(batch(0))
    with pytest.raises(IllegalStateError):
        sink.commit_transaction(0)
    assert sink.begin_transaction(0)
    with pytest.raises(IllegalStateError):
        sink.begin_transaction(1)
    with pytest.raises(IllegalStateError):
        sink.commit_transaction(1)  # not the open epoch
    assert sink.transaction_state == TransactionState.Active(0)
    sink.close()  # rolls back
    assert count_by_epoch(pg_dsn, table) == {}
    assert sink_epoch(pg_dsn, sink.sink_id) is None


# -- processes -------------------------------------------------------------------------------------


def test_restart_from_a_new_process(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table)
    first = run_child(sink, [0, 1, 2])
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["0", "committed", "1", "committed", "2", "committed"]
    # Spark replays the last batch after a restart, then goes on.
    second = run_child(sink, [2, 3])
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["2", "skipped", "3", "committed"]
    assert count_by_epoch(pg_dsn, table) == {0: 5, 1: 5, 2: 5, 3: 5}
    assert duplicates(pg_dsn, table) == 0


def test_the_sink_pickles_as_configuration(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table, columns={"id": "id"}, connect_timeout_s=3)
    sink.init_transactions()
    assert sink.begin_transaction(0)
    clone = pickle.loads(pickle.dumps(sink))  # a live connection does not travel
    assert clone.sink_id == sink.sink_id
    assert clone.columns == {"id": "id"}
    assert clone.transaction_state == TransactionState.Idle()
    sink.abort_transaction(0)
    assert clone.begin_transaction(0)
    clone.write(batch(0))
    clone.commit_transaction(0)
    assert count_by_epoch(pg_dsn, table) == {0: 5}
    sink.close()
    clone.close()


# -- racing writers --------------------------------------------------------------------------------


def _wait_until_blocked(dsn: str, application_name: str) -> None:
    def blocked() -> bool:
        rows = query(
            dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND wait_event_type = 'Lock'",
            (application_name,),
        )
        return bool(rows[0][0])

    wait_for(blocked, what=f"{application_name} to wait on a lock")


@pytest.mark.parametrize("winner_commits", [True, False])
def test_a_racing_writer_blocks_then_skips_or_takes_over(
    pg_dsn: str, table: str, winner_commits: bool
) -> None:
    winner = PostgresSink(pg_dsn, table, sink_id=f"race-{winner_commits}")
    loser_dsn = psycopg.conninfo.make_conninfo(pg_dsn, application_name="laminar-loser")
    loser = PostgresSink(loser_dsn, table, sink_id=f"race-{winner_commits}")
    winner.init_transactions()
    loser.init_transactions()
    assert winner.begin_transaction(5)
    winner.write(batch(5, tag="winner"))
    outcome: dict[str, Any] = {}

    def second_writer() -> None:
        try:
            outcome["result"] = laminar.exactly_once(loser).write_epoch(5, batch(5, tag="loser"))
        except BaseException as e:  # reported by the assertion below
            outcome["error"] = e

    thread = threading.Thread(target=second_writer)
    thread.start()
    _wait_until_blocked(pg_dsn, "laminar-loser")  # it waits on the epoch row's lock
    if winner_commits:
        winner.commit_transaction(5)
    else:
        winner.abort_transaction(5)
    thread.join(30)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome.get("error")
    tags = query(pg_dsn, f"SELECT DISTINCT split_part(payload, '-', 1) FROM {table}")
    if winner_commits:
        assert outcome["result"].skipped
        assert tags == [("winner",)]
    else:
        assert outcome["result"].committed
        assert tags == [("loser",)]
    assert count_by_epoch(pg_dsn, table) == {5: 5}
    winner.close()
    loser.close()


def test_racing_processes_never_commit_an_epoch_twice(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table, sink_id="race-processes")
    sink.init_transactions()  # create the metadata once, outside the race
    sink.close()
    epochs = list(range(12))
    results: list[Any] = []
    threads = [
        threading.Thread(
            target=lambda tag=tag: results.append(run_child(sink, epochs, rows=20, tag=tag))
        )
        for tag in ("a", "b", "c")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert len(results) == 3
    for result in results:
        assert result.returncode == 0, result.stderr
    committed = sum(r.stdout.split().count("committed") for r in results)
    assert committed == len(epochs)  # each epoch committed by exactly one process
    assert count_by_epoch(pg_dsn, table) == {e: 20 for e in epochs}
    per_epoch_tags = query(
        pg_dsn,
        f"SELECT epoch, count(DISTINCT split_part(payload, '-', 1)) FROM {table} GROUP BY epoch",
    )
    assert all(n == 1 for _, n in per_epoch_tags)


def test_under_repeatable_read_the_racer_retries_then_skips(pg_dsn: str, table: str) -> None:
    rr_dsn = psycopg.conninfo.make_conninfo(
        pg_dsn,
        application_name="laminar-rr",
        options="-c default_transaction_isolation=repeatable\\ read",
    )
    first = PostgresSink(pg_dsn, table, sink_id="race-rr")
    second = PostgresSink(rr_dsn, table, sink_id="race-rr")
    laminar.exactly_once(first).write_epoch(0, batch(0))  # the row exists
    second.init_transactions()
    assert first.begin_transaction(1)
    first.write(batch(1, tag="first"))
    outcome: dict[str, Any] = {}

    def racer() -> None:
        try:
            writer = laminar.exactly_once(second, retry_backoff_s=0.01)
            outcome["result"] = writer.write_epoch(1, batch(1, tag="second"))
        except BaseException as e:
            outcome["error"] = e

    thread = threading.Thread(target=racer)
    thread.start()
    _wait_until_blocked(pg_dsn, "laminar-rr")
    first.commit_transaction(1)
    thread.join(30)
    # 40001 (could not serialize) is abortable: the retry then sees the epoch committed
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"].skipped
    assert outcome["result"].attempts == 2
    assert count_by_epoch(pg_dsn, table) == {0: 5, 1: 5}
    first.close()
    second.close()


# -- names -----------------------------------------------------------------------------------------

HOSTILE_SCHEMA = 'we.ird "schema" ü'
HOSTILE_TABLE = 'Tab.le; DROP TABLE x; -- "q" 表'
HOSTILE_COLUMNS = ["select", "a b", 'quo"te', "ünï", "dot.ted", "Mixed"]


def test_hostile_identifiers(pg_dsn: str, unique_name: Any) -> None:
    table_name = HOSTILE_TABLE + unique_name("")[-10:]
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t))
        for c, t in zip(
            HOSTILE_COLUMNS, ["int8", "text", "text", "int4", "bool", "float8"], strict=True
        )
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(HOSTILE_SCHEMA))
        )
        conn.execute(
            sql.SQL("CREATE TABLE {} ({})").format(
                sql.Identifier(HOSTILE_SCHEMA, table_name), columns
            )
        )
    quoted = ".".join('"' + p.replace('"', '""') + '"' for p in (HOSTILE_SCHEMA, table_name))
    data = pa.table(
        {
            "select": [1, 2],
            "a b": ["x", None],
            'quo"te': ['"', "''"],
            "ünï": pa.array([7, 8], pa.int32()),
            "dot.ted": [True, False],
            "Mixed": [1.5, 2.5],
        }
    )
    sink = PostgresSink(pg_dsn, quoted)
    assert laminar.exactly_once(sink).write_epoch(0, data).committed
    rows = query(
        pg_dsn,
        sql.SQL("SELECT {} FROM {} ORDER BY 1").format(
            sql.SQL(", ").join(sql.Identifier(c) for c in HOSTILE_COLUMNS),
            sql.Identifier(HOSTILE_SCHEMA, table_name),
        ),
    )
    assert rows == [(1, "x", '"', 7, True, 1.5), (2, None, "''", 8, False, 2.5)]
    assert sink.sink_id == quoted
    # the gid of such a sink still prepares (escaped, within 200 bytes)
    sink.close()
    sink2 = PostgresSink(pg_dsn, quoted, sink_id=quoted + ":part:" + "é" * 80)
    sink2.begin_transaction(1)
    sink2.write(data)
    state = sink2.prepare_transaction()
    assert state.transactional_id == sink2.sink_id
    [prepared] = sink2.prepared_transactions()
    assert prepared.epoch == 1
    sink2.commit_transaction(1)
    assert (
        len(
            query(
                pg_dsn,
                sql.SQL("SELECT 1 FROM {}").format(sql.Identifier(HOSTILE_SCHEMA, table_name)),
            )
        )
        == 4
    )
    sink2.close()


def test_column_mappings(pg_dsn: str, table_name: str) -> None:
    table = create_table(pg_dsn, table_name, '(id int8 NOT NULL, note text, "Total" int4)')
    data = pa.table({"a": [1, 2], "b": ["x", "y"], "c": pa.array([3, 4], pa.int32())})
    as_list = PostgresSink(pg_dsn, table, columns=["id", "note", "Total"], sink_id="list")
    laminar.exactly_once(as_list).write_epoch(0, data)
    as_map = PostgresSink(
        pg_dsn, table, columns={"a": "id", "b": "note", "c": "total"}, sink_id="map"
    )
    laminar.exactly_once(as_map).write_epoch(0, data)  # "total" matches "Total" ignoring case
    renamed = pa.table({"ID": [5], "note": ["z"]})  # by name, case-insensitive
    laminar.exactly_once(PostgresSink(pg_dsn, table, sink_id="names")).write_epoch(0, renamed)
    rows = query(pg_dsn, f'SELECT id, note, "Total" FROM {table} ORDER BY id, note')
    assert rows == [(1, "x", 3), (1, "x", 3), (2, "y", 4), (2, "y", 4), (5, "z", None)]


# -- validation before any row is sent -------------------------------------------------------------


def _assert_usable_after(
    sink: PostgresSink, epoch: int, dsn: str, table: str, good: pa.Table
) -> None:
    assert sink.transaction_state == TransactionState.Idle()
    assert count_by_epoch(dsn, table) == {}
    assert sink_epoch(dsn, sink.sink_id) is None  # nothing committed: the epoch is retryable
    assert laminar.exactly_once(sink).write_epoch(epoch, good).committed
    assert count_by_epoch(dsn, table) == {epoch: good.num_rows}


def test_a_type_mismatch_is_a_config_error_before_any_row(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table)
    wrong = batch(0).set_column(2, "payload", pa.array([b"\x00"] * 5, pa.binary()))
    writer = laminar.exactly_once(sink)
    with pytest.raises(ConfigError) as info:
        writer.write_epoch(0, wrong)
    message = str(info.value)
    assert table.strip('"') in message
    assert "payload" in message
    assert "binary" in message
    assert "text" in message
    assert info.value.epoch == 0
    assert info.value.sink_id == sink.sink_id
    _assert_usable_after(sink, 0, pg_dsn, table, batch(0))
    writer.close()


def test_a_column_missing_from_the_table_is_a_config_error(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table)
    extra = batch(0).append_column("surprise", pa.array([1] * 5))
    with pytest.raises(ConfigError, match=r"has no column 'surprise'.*int64.*its columns are: id"):
        laminar.exactly_once(sink).write_epoch(0, extra)
    _assert_usable_after(sink, 0, pg_dsn, table, batch(0))


def test_a_required_column_missing_from_the_batch_is_a_config_error(
    pg_dsn: str, table: str
) -> None:
    sink = PostgresSink(pg_dsn, table)
    with pytest.raises(ConfigError, match=r"'epoch' \(bigint\) are NOT NULL without a default"):
        laminar.exactly_once(sink).write_epoch(0, batch(0).drop_columns(["epoch"]))
    _assert_usable_after(sink, 0, pg_dsn, table, batch(0))


def test_generated_and_identity_columns(pg_dsn: str, table_name: str) -> None:
    table = create_table(
        pg_dsn,
        table_name,
        "(rid int8 GENERATED ALWAYS AS IDENTITY, v int4 NOT NULL,"
        " doubled int4 GENERATED ALWAYS AS (v * 2) STORED)",
    )
    sink = PostgresSink(pg_dsn, table)
    laminar.exactly_once(sink).write_epoch(0, pa.table({"v": pa.array([1, 2], pa.int32())}))
    assert query(pg_dsn, f"SELECT rid, v, doubled FROM {table} ORDER BY rid") == [
        (1, 1, 2),
        (2, 2, 4),
    ]
    with pytest.raises(ConfigError, match="'doubled' is a generated column"):
        laminar.exactly_once(sink).write_epoch(1, pa.table({"v": [3], "doubled": [6]}))


def test_an_out_of_range_value_is_a_data_error_naming_column_and_row(
    pg_dsn: str, table_name: str
) -> None:
    table = create_table(pg_dsn, table_name, "(id int4 NOT NULL, label varchar(3))")
    sink = PostgresSink(pg_dsn, table)
    writer = laminar.exactly_once(sink)
    with pytest.raises(DataError, match=r"column 'id' row 2"):
        writer.write_epoch(0, pa.table({"id": [1, 2, 2**40], "label": ["a", "b", "c"]}))
    with pytest.raises(DataError, match=r"column 'label' row 1"):
        writer.write_epoch(0, pa.table({"id": [1, 2], "label": ["a", "toolong"]}))
    with pytest.raises(DataError, match=r"column 'id' is NOT NULL .* null at row 1"):
        writer.write_epoch(
            0, pa.table({"id": pa.array([1, None], pa.int64()), "label": ["a", "b"]})
        )
    assert sink.metrics.commits == 0
    good = pa.table({"id": pa.array([1, 2], pa.int32()), "label": ["a", "b"]})
    assert writer.write_epoch(0, good).committed
    assert query(pg_dsn, f"SELECT count(*) FROM {table}") == [(2,)]


def test_big_batches_stream_in_slices_and_count_rows_over_the_batch(
    pg_dsn: str, table_name: str
) -> None:
    table = create_table(pg_dsn, table_name, "(id int8 NOT NULL, small int2)")
    sink = PostgresSink(pg_dsn, table, slice_bytes=4096)  # many slices of >= 1024 rows
    rows = 10_000
    data = pa.table(
        {"id": pa.array(range(rows), pa.int64()), "small": pa.array([1] * rows, pa.int64())}
    )
    assert laminar.exactly_once(sink).write_epoch(0, data).committed
    assert query(pg_dsn, f"SELECT count(*), count(DISTINCT id) FROM {table}") == [(rows, rows)]
    bad = data.set_column(1, "small", pa.array([1] * 9_000 + [70_000] + [1] * 999, pa.int64()))
    with pytest.raises(DataError, match=r"column 'small' row 9000"):
        laminar.exactly_once(sink).write_epoch(1, bad)
    assert query(pg_dsn, f"SELECT count(*) FROM {table}") == [(rows,)]  # nothing of epoch 1


def test_a_bad_value_chunks_into_the_copy_is_a_data_error_and_nothing_lands(
    pg_dsn: str, table_name: str
) -> None:
    """The chunk after the one being sent is encoded meanwhile (docs/serialization.md): a value
    that does not fit, megabytes into one COPY, ends it before it completes; the epoch's
    transaction is rolled back and the sink writes the fixed batch next."""
    table = create_table(pg_dsn, table_name, "(id int8 NOT NULL, small int2)")
    sink = PostgresSink(pg_dsn, table)
    writer = laminar.exactly_once(sink)
    rows = 300_000  # about 5 MB of COPY: several chunks, one slice
    small = pa.array([1] * (rows - 1) + [70_000], pa.int64())
    data = pa.table({"id": pa.array(range(rows), pa.int64()), "small": small})
    with pytest.raises(DataError, match=rf"column 'small' row {rows - 1}") as info:
        writer.write_epoch(0, data)
    assert "earlier rows were sent" not in str(info.value)  # one slice: not a partial commit
    assert query(pg_dsn, f"SELECT count(*) FROM {table}") == [(0,)]
    assert sink_epoch(pg_dsn, sink.sink_id) is None
    fixed = data.set_column(1, "small", pa.array([1] * rows, pa.int64()))
    assert writer.write_epoch(0, fixed).committed
    assert query(pg_dsn, f"SELECT count(*), count(DISTINCT id) FROM {table}") == [(rows, rows)]
    writer.close()


def test_a_missing_table_names_table_and_database(postgres_factory: Any, table_name: str) -> None:
    server = postgres_factory(password="s3cret-Pa55")
    dsn = server.dsn
    sink = PostgresSink(dsn, f"public.{table_name}")
    with pytest.raises(ConfigError) as info:
        sink.init_transactions()
    message = str(info.value)
    assert f"public.{table_name}" in message
    assert "database 'laminar'" in message
    assert "s3cret-Pa55" not in message
    assert "s3cret-Pa55" not in repr(sink)
    assert "s3cret-Pa55" not in repr(info.value.__cause__ or "")


def test_a_similar_table_is_suggested(pg_dsn: str, table_name: str) -> None:
    create_table(pg_dsn, "Cap_" + table_name)
    with pytest.raises(ConfigError, match=r'similar tables: public\."Cap_'):
        PostgresSink(pg_dsn, "Cap_" + table_name).init_transactions()  # unquoted: folded


def test_a_sink_id_cannot_silently_move_to_another_table(pg_dsn: str, table_name: str) -> None:
    first = create_table(pg_dsn, table_name + "_a")
    second = create_table(pg_dsn, table_name + "_b")
    laminar.exactly_once(PostgresSink(pg_dsn, first, sink_id=table_name)).write_epoch(0, batch(0))
    with pytest.raises(ConfigError, match="is registered for table"):
        PostgresSink(pg_dsn, second, sink_id=table_name).init_transactions()


def test_sink_config_in_the_registry_has_no_secrets(postgres_factory: Any, table_name: str) -> None:
    server = postgres_factory(password="Registry-Secret-1")
    table = create_table(server.dsn, table_name)
    sink = PostgresSink(server.dsn, table)
    laminar.exactly_once(sink).write_epoch(0, batch(0))
    [(config,)] = query(server.dsn, "SELECT config FROM laminar.sinks")
    assert "Registry-Secret-1" not in json.dumps(config)
    assert config["user"] == "postgres"
    assert config["database"] == "laminar"
    sink.close()


def test_a_wrong_password_is_an_authorization_error(
    postgres_factory: Any, table_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = postgres_factory(password="right-password")
    bad_dsn = server.dsn.replace("right-password", "Wrong-Pass-42")
    sink = PostgresSink(bad_dsn, "public.t")
    with caplog.at_level("DEBUG"), pytest.raises(laminar.AuthorizationError) as info:
        laminar.exactly_once(sink).write_epoch(0, batch(0))
    assert "Wrong-Pass-42" not in str(info.value)
    assert "Wrong-Pass-42" not in repr(sink)
    assert "Wrong-Pass-42" not in caplog.text
    assert "password authentication failed" in str(info.value)


def test_a_table_reached_through_search_path(pg_dsn: str, table_name: str) -> None:
    create_table(pg_dsn, table_name, schema="other_" + table_name[-10:])
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, options=f"-c search_path=other_{table_name[-10:]}")
    with pytest.raises(ConfigError, match="default sink id assumes schema 'public'"):
        PostgresSink(dsn, table_name).init_transactions()
    sink = PostgresSink(dsn, table_name, sink_id="via-search-path")
    assert laminar.exactly_once(sink).write_epoch(0, batch(0)).committed


def test_backend_is_named_after_the_sink(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table, sink_id="named-sink")
    sink.init_transactions()
    assert backend_pids(pg_dsn, "laminar named-sink")
    sink.close()


def test_several_sinks_in_one_coordinator_transaction(pg_dsn: str, table_name: str) -> None:
    """The atomic coordinator's shared-database case: two sinks and one COMMIT."""
    orders = create_table(pg_dsn, table_name + "_orders")
    audit = create_table(pg_dsn, table_name + "_audit")
    sinks = [PostgresSink(pg_dsn, orders), PostgresSink(pg_dsn, audit)]
    for sink in sinks:
        sink.init_transactions()
    with psycopg.connect(pg_dsn) as conn:
        assert [s.write_in_transaction(conn, 0, batch(0)) for s in sinks] == [5, 5]
        conn.rollback()  # the decision: roll back — neither table has anything
        assert count_by_epoch(pg_dsn, orders) == count_by_epoch(pg_dsn, audit) == {}
        assert [s.write_in_transaction(conn, 0, batch(0, rows=3)) for s in sinks] == [3, 3]
        conn.commit()
        assert count_by_epoch(pg_dsn, orders) == count_by_epoch(pg_dsn, audit) == {0: 3}
        assert [s.write_in_transaction(conn, 0, batch(0)) for s in sinks] == [None, None]
        conn.rollback()
    assert [s.last_committed_epoch() for s in sinks] == [0, 0]
    for sink in sinks:
        sink.close()
