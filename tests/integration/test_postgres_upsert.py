"""PostgresSink's upsert mode (``mode="upsert", key=...``) against a real PostgreSQL: rows are
replaced by key across epochs and within a batch (last row wins), a replay is skipped, a crash at
each step leaves exactly the committed epochs' values, the key is checked against the table's
unique indexes at start-up and in every epoch, and the mode works alone, in the atomic pair, as
a two-phase (scale-out) participant and for every input kind."""

from __future__ import annotations

import json
import signal
from collections import Counter
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

import laminar
from laminar import AuthorizationError, ConfigError, DataError, PostgresSink
from laminar.postgres._steps import claim_epoch
from tests.integration.integrity_helpers import (
    INPUT_KINDS,
    create_rows_table,
    epoch_rows,
    pg_rows,
)
from tests.integration.kafka_fill import settled_committed as read_committed
from tests.integration.pg_helpers import create_table, query, run_child, sink_epoch

pytestmark = pytest.mark.integration

#: For `pg_helpers.run_child`'s child process, which imports `batch` from here.
THIS_MODULE = "tests.integration.test_postgres_upsert"
DDL = "(id int8 PRIMARY KEY, epoch int8 NOT NULL, payload text, amount numeric(12, 2))"


def keyed(epoch: int, ids: list[int] | range | None = None) -> pa.Table:
    """Epoch ``e`` writes ids ``e..e+4`` (overlapping the previous epoch's) with values that
    name the epoch, so the table shows which epoch last wrote each id."""
    ids = list(range(epoch, epoch + 5) if ids is None else ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "epoch": pa.array([epoch] * len(ids), pa.int64()),
            "payload": pa.array([f"e{epoch}-{i}" for i in ids], pa.string()),
            "amount": pa.array([epoch * 100 + i for i in ids], pa.int64()),
        }
    )


def expected_after(epochs: range) -> list[tuple[Any, ...]]:
    """The table after upserting `keyed(e)` for each epoch, in order: each id's last writer."""
    last: dict[int, int] = {}
    for epoch in epochs:
        for i in range(epoch, epoch + 5):
            last[i] = epoch
    return [(i, e, f"e{e}-{i}", e * 100 + i) for i, e in sorted(last.items())]


def rows_of(dsn: str, table: str) -> list[tuple[Any, ...]]:
    return [
        (i, e, p, int(a))
        for i, e, p, a in query(dsn, f"SELECT id, epoch, payload, amount FROM {table} ORDER BY id")
    ]


def ddl(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


def committed_kafka_rows(bootstrap: str, topic: str, sink_id: str) -> Counter[tuple[Any, ...]]:
    """The sink's committed records (control batches replayed by laminar.kafka.log) as
    ``(id, name, amount)``, counted."""
    out: Counter[tuple[Any, ...]] = Counter()
    for record in read_committed(bootstrap, topic):
        if record.header("laminar.sink") == sink_id.encode():
            value = json.loads(record.value or b"null")
            out[(value["id"], value["name"], value["amount"])] += 1
    return out


@pytest.fixture
def table(pg_dsn: str, table_name: str) -> str:
    return create_table(pg_dsn, table_name, DDL)


def upsert_sink(dsn: str, table: str, **kwargs: Any) -> PostgresSink:
    return PostgresSink(dsn, table, mode="upsert", key="id", **kwargs)


def staging_tables_empty(dsn: str) -> bool:
    """Whether every staging table is empty (no staging row is ever committed)."""
    names = query(
        dsn,
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'laminar' AND c.relname LIKE 'upsert_stage_%'",
    )
    assert names, "no staging table was created"
    return all(
        query(dsn, sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("laminar", n)))
        == [(0,)]
        for (n,) in names
    )


# -- values across epochs, replays, duplicates -----------------------------------------------------


def test_upsert_replaces_values_across_epochs(pg_dsn: str, table: str) -> None:
    sink = upsert_sink(pg_dsn, table)
    writer = laminar.exactly_once(sink)
    try:
        for epoch in range(4):
            assert writer.write_epoch(epoch, keyed(epoch)).committed
            assert rows_of(pg_dsn, table) == expected_after(range(epoch + 1))
    finally:
        writer.close()
    assert sink_epoch(pg_dsn, sink.sink_id) == 3
    assert staging_tables_empty(pg_dsn)


def test_a_replayed_epoch_is_skipped(pg_dsn: str, table: str) -> None:
    sink = upsert_sink(pg_dsn, table)
    writer = laminar.exactly_once(sink)
    try:
        assert writer.write_epoch(0, keyed(0)).committed
        assert writer.write_epoch(1, keyed(1)).committed
        replay = keyed(1, ids=[1, 2, 3]).set_column(2, "payload", pa.array(["replay"] * 3))
        assert not writer.write_epoch(1, replay).committed
        assert not writer.write_epoch(0, keyed(0)).committed
    finally:
        writer.close()
    # a new process (Spark's restart) skips it too
    fresh = laminar.exactly_once(upsert_sink(pg_dsn, table))
    try:
        assert not fresh.write_epoch(1, keyed(1, ids=[9])).committed
    finally:
        fresh.close()
    assert rows_of(pg_dsn, table) == expected_after(range(2))


def test_duplicate_keys_in_a_batch_last_row_wins(pg_dsn: str, table: str) -> None:
    sink = upsert_sink(pg_dsn, table)
    dup = pa.table(
        {
            "id": pa.array([1, 2, 1, 3, 2], pa.int64()),
            "epoch": pa.array([0] * 5, pa.int64()),
            "payload": pa.array(["a", "b", "c", "d", "e"]),
            "amount": pa.array([1, 2, 3, 4, 5], pa.int64()),
        }
    )
    assert sink.begin_transaction(0)
    sink.write(dup)
    sink.write(dup.slice(0, 1))  # a second write in the epoch: its row wins over the first's
    sink.commit_transaction(0)
    assert rows_of(pg_dsn, table) == [(1, 0, "a", 1), (2, 0, "e", 5), (3, 0, "d", 4)]
    sink.close()


def test_last_row_wins_across_copy_slices(pg_dsn: str, table: str) -> None:
    """A batch streamed in several COPY slices: positions count over the whole batch."""
    n = 3000
    data = pa.table(
        {
            "id": pa.array([i % 1000 for i in range(n)], pa.int64()),
            "epoch": pa.array([0] * n, pa.int64()),
            "payload": pa.array([f"p{i}" for i in range(n)]),
            "amount": pa.array(range(n), pa.int64()),
        }
    )
    sink = upsert_sink(pg_dsn, table, slice_bytes=1)  # 1024 rows per slice
    writer = laminar.exactly_once(sink)
    try:
        assert writer.write_epoch(0, data).committed
    finally:
        writer.close()
    assert rows_of(pg_dsn, table) == [(k, 0, f"p{2000 + k}", 2000 + k) for k in range(1000)]


def test_composite_keys_in_any_order(pg_dsn: str, table_name: str) -> None:
    table = create_table(
        pg_dsn,
        table_name,
        "(region text, user_id int8, total int8 NOT NULL, seen int8 DEFAULT 7,"
        " PRIMARY KEY (region, user_id))",
    )
    sink = PostgresSink(pg_dsn, table, mode="upsert", key=["user_id", "region"])
    writer = laminar.exactly_once(sink)

    def rows(region: list[str], user: list[int], total: list[int]) -> pa.Table:
        return pa.table({"region": region, "user_id": pa.array(user, pa.int64()), "total": total})

    try:
        writer.write_epoch(0, rows(["eu", "eu", "us"], [1, 2, 1], [10, 20, 30]))
        writer.write_epoch(1, rows(["us", "eu", "us"], [1, 3, 2], [31, 40, 50]))
    finally:
        writer.close()
    assert query(pg_dsn, f"SELECT * FROM {table} ORDER BY 1, 2") == [
        ("eu", 1, 10, 7),
        ("eu", 2, 20, 7),
        ("eu", 3, 40, 7),
        ("us", 1, 31, 7),
        ("us", 2, 50, 7),
    ]


def test_a_batch_of_key_columns_only_inserts_missing_keys(pg_dsn: str, table_name: str) -> None:
    table = create_table(pg_dsn, table_name, "(id int8 PRIMARY KEY, note text DEFAULT 'new')")
    query(pg_dsn, f"INSERT INTO {table} VALUES (1, 'kept') RETURNING id")
    writer = laminar.exactly_once(PostgresSink(pg_dsn, table, mode="upsert", key=["id"]))
    try:
        writer.write_epoch(0, pa.table({"id": pa.array([1, 2, 2], pa.int64())}))
    finally:
        writer.close()
    assert query(pg_dsn, f"SELECT * FROM {table} ORDER BY 1") == [(1, "kept"), (2, "new")]


# -- crashes -------------------------------------------------------------------------------------


def batch(epoch: int, rows: int = 5, tag: str = "x") -> pa.Table:
    """`keyed` under the name `pg_helpers.run_child` imports (``batches=`` this module)."""
    del rows, tag
    return keyed(epoch)


@pytest.mark.parametrize(
    ("point", "committed_before_crash"),
    [
        ("postgres.after_claim", False),
        ("postgres.mid_copy", False),
        ("postgres.before_commit", False),
        ("postgres.after_commit", True),
    ],
)
def test_a_crash_at_each_step_then_recovery_is_exactly_once(
    pg_dsn: str, table: str, point: str, committed_before_crash: bool
) -> None:
    sink = upsert_sink(pg_dsn, table)
    crashed = run_child(sink, [0, 1, 2], crash_at=f"{point}@2", batches=THIS_MODULE)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert crashed.stdout.split() == ["0", "committed"]
    # nothing partial: exactly epoch 0's values, or epochs 0 and 1's once committed
    assert rows_of(pg_dsn, table) == expected_after(range(2 if committed_before_crash else 1))
    resumed = run_child(sink, [1, 2], batches=THIS_MODULE)
    assert resumed.returncode == 0, resumed.stderr
    replay = "skipped" if committed_before_crash else "committed"
    assert resumed.stdout.split() == ["1", replay, "2", "committed"]
    assert rows_of(pg_dsn, table) == expected_after(range(3))
    assert sink_epoch(pg_dsn, sink.sink_id) == 2
    assert staging_tables_empty(pg_dsn)


# -- the key: options, start-up and per-epoch checks --------------------------------------------


def test_a_key_that_is_not_a_column_is_a_config_error(pg_dsn: str, table: str) -> None:
    sink = PostgresSink(pg_dsn, table, mode="upsert", key=["id", "region"])
    with pytest.raises(ConfigError, match=r"key column 'region' is not a column of the table"):
        sink.init_transactions()


def test_a_key_without_a_unique_index_names_table_key_and_indexes(
    pg_dsn: str, table_name: str
) -> None:
    table = create_table(
        pg_dsn, table_name, "(id int8 PRIMARY KEY, a int8, b int8, c text, d bool)"
    )
    ddl(pg_dsn, f"CREATE UNIQUE INDEX {table_name}_partial ON {table} (a) WHERE d")
    ddl(pg_dsn, f"CREATE UNIQUE INDEX {table_name}_expr ON {table} (lower(c))")
    ddl(pg_dsn, f"ALTER TABLE {table} ADD CONSTRAINT {table_name}_def UNIQUE (b) DEFERRABLE")
    ddl(pg_dsn, f"CREATE UNIQUE INDEX {table_name}_ab ON {table} (a, b)")
    for key, shown in ((["a"], "(a)"), (["c"], "(c)"), (["b"], "(b)"), (["a", "b", "id"], "")):
        sink = PostgresSink(pg_dsn, table, mode="upsert", key=key)
        with pytest.raises(ConfigError) as caught:
            sink.init_transactions()
        message = str(caught.value)
        assert f"public.{table_name}" in message
        assert shown in message
        assert f"{table_name}_pkey (id)" in message
        assert f"{table_name}_partial (a) [partial]" in message
        assert f"{table_name}_expr (<expression>) [expression]" in message
        assert f"{table_name}_def (b) [deferrable]" in message
        assert "ADD UNIQUE" in message
        sink.close()
    # the columns of a usable unique index, in any order, are a key
    for key in (["id"], ["b", "a"]):
        sink = PostgresSink(pg_dsn, table, mode="upsert", key=key)
        sink.init_transactions()
        sink.close()


def test_a_key_column_missing_from_the_batch_is_a_config_error(
    pg_dsn: str, table_name: str
) -> None:
    # a nullable unique key: the NOT NULL check of append mode does not catch its absence
    table = create_table(pg_dsn, table_name, DDL.replace("PRIMARY KEY", "UNIQUE"))
    sink = upsert_sink(pg_dsn, table)
    writer = laminar.exactly_once(sink)
    try:
        with pytest.raises(ConfigError, match=r"upsert key column\(s\) \['id'\] are not in the"):
            writer.write_epoch(0, keyed(0).drop_columns(["id"]))
        # mapped through columns=, it is there
        mapped = PostgresSink(pg_dsn, table, {"ident": "id"}, mode="upsert", key="id")
        renamed = keyed(0).rename_columns(["ident", "epoch", "payload", "amount"])
        assert laminar.exactly_once(mapped).write_epoch(0, renamed).committed
    finally:
        writer.close()
    assert rows_of(pg_dsn, table) == expected_after(range(1))


def test_a_null_key_is_a_data_error_and_nothing_is_written(pg_dsn: str, table_name: str) -> None:
    table = create_table(pg_dsn, table_name, "(id int8, v int8, UNIQUE (id))")
    writer = laminar.exactly_once(PostgresSink(pg_dsn, table, mode="upsert", key="id"))
    try:
        with pytest.raises(DataError, match=r"key column 'id' .* is null at row 1"):
            writer.write_epoch(0, pa.table({"id": pa.array([1, None]), "v": [1, 2]}))
    finally:
        writer.close()
    assert query(pg_dsn, f"SELECT count(*) FROM {table}") == [(0,)]


def test_the_table_altered_between_epochs(pg_dsn: str, table: str, table_name: str) -> None:
    sink = upsert_sink(pg_dsn, table)
    writer = laminar.exactly_once(sink)
    try:
        assert writer.write_epoch(0, keyed(0)).committed
        # a new column: read again, the upsert goes on
        ddl(pg_dsn, f"ALTER TABLE {table} ADD COLUMN extra text DEFAULT 'd'")
        assert writer.write_epoch(1, keyed(1)).committed
        assert query(pg_dsn, f"SELECT count(*) FROM {table} WHERE extra = 'd'") == [(6,)]
        # the key's index dropped: a clear error, nothing of the epoch committed
        ddl(pg_dsn, f"ALTER TABLE {table} DROP CONSTRAINT {table_name}_pkey")
        with pytest.raises(ConfigError, match=r"upsert key \(id\) is not the column set of a"):
            writer.write_epoch(2, keyed(2))
        assert sink_epoch(pg_dsn, sink.sink_id) == 1
        assert rows_of(pg_dsn, table) == expected_after(range(2))
        # put back: the replayed epoch is written
        ddl(pg_dsn, f"ALTER TABLE {table} ADD PRIMARY KEY (id)")
        assert writer.write_epoch(2, keyed(2)).committed
    finally:
        writer.close()
    assert rows_of(pg_dsn, table) == expected_after(range(3))
    assert staging_tables_empty(pg_dsn)


# -- two-phase (scale-out), the atomic pair, every input kind ------------------------------------


def test_a_two_phase_participant_upserts_on_commit_prepared(
    clean_prepared_xacts: str, table: str
) -> None:
    dsn = clean_prepared_xacts
    parts = [upsert_sink(dsn, table, sink_id="upsert-2pc", two_phase_part=p) for p in range(2)]
    for p, sink in enumerate(parts):
        assert sink.begin_transaction(0)
        sink.write(keyed(0, ids=[p * 10 + 1, p * 10 + 2]))
        sink.prepare_transaction()  # the staging table is not temporary: PREPARE is allowed
    assert query(dsn, f"SELECT count(*) FROM {table}") == [(0,)]
    with psycopg.connect(dsn) as coordinator:
        assert claim_epoch(coordinator, "upsert-2pc", 0)
        coordinator.commit()
    for sink in parts:
        sink.commit_transaction(0)
        sink.close()
    assert [r[0] for r in rows_of(dsn, table)] == [1, 2, 11, 12]
    assert staging_tables_empty(dsn)


@pytest.fixture
def rows_table(pg_dsn: str, unique_name: Any) -> str:
    name = unique_name("upkinds")
    create_rows_table(pg_dsn, name)  # (id bigint PRIMARY KEY, name text, amount float8)
    return name


def replaced(epoch: int) -> pa.Table:
    """`epoch_rows(epoch)` overwriting half of the previous epoch's ids with new values."""
    rows = epoch_rows(epoch)
    ids = pa.compute.subtract(rows["id"], pa.scalar(rows.num_rows // 2, rows["id"].type))
    return rows.set_column(0, "id", ids)


@pytest.mark.parametrize("sinks", ["postgres", "atomic"])
def test_every_input_kind_upserts_exactly(
    kafka_broker: Any, kafka_bootstrap: str, pg_dsn: str, rows_table: str, sinks: str
) -> None:
    tid = f"upkinds-{rows_table}"
    chosen: list[Any] = []
    if sinks == "atomic":
        kafka_broker.create_topic(rows_table, partitions=2)
        chosen.append(
            laminar.KafkaSink(kafka_bootstrap, rows_table, tid, key="id", init_timeout_s=15.0)
        )
    chosen.append(PostgresSink(pg_dsn, rows_table, sink_id=f"pg-{tid}", mode="upsert", key="id"))
    writer = laminar.exactly_once(*chosen, retry_backoff_s=0.01)
    expected: dict[int, tuple[Any, ...]] = {}
    written: list[tuple[Any, ...]] = []
    try:
        for epoch, (kind, make) in enumerate(INPUT_KINDS.items()):
            rows = replaced(epoch)
            assert writer.write_epoch(epoch, make(rows)).committed, kind
            for row in rows.to_pylist():
                expected[row["id"]] = tuple(row.values())
                written.append(tuple(row.values()))
            assert pg_rows(pg_dsn, rows_table) == sorted(expected.values()), kind
    finally:
        writer.close()
    if sinks == "atomic":  # Kafka has every record once (it appends): the upsert is PG's view
        assert committed_kafka_rows(kafka_bootstrap, rows_table, tid) == Counter(written)


def test_writers_sharing_a_staging_table_never_see_each_others_rows(
    clean_prepared_xacts: str, table: str
) -> None:
    """Partition 0 of epoch 1 upserts while partition 0 of epoch 0 is prepared with its staging
    rows in the same (sink, partition, layout) staging table: each transaction sees only its own
    rows, and both commit exactly their own."""
    dsn = clean_prepared_xacts
    first, second = (
        upsert_sink(dsn, table, sink_id="upsert-share", two_phase_part=0) for _ in "ab"
    )
    assert first.begin_transaction(0)
    first.write(keyed(0, ids=[1, 2]))
    first.prepare_transaction()
    assert second.begin_transaction(1)
    second.write(keyed(1, ids=[3, 4]))  # other keys: the same key would wait for epoch 0
    second.prepare_transaction()
    with psycopg.connect(dsn) as coordinator:
        assert claim_epoch(coordinator, "upsert-share", 0)
        coordinator.commit()
    first.commit_transaction(0)
    with psycopg.connect(dsn) as coordinator:
        assert claim_epoch(coordinator, "upsert-share", 1)
        coordinator.commit()
    second.commit_transaction(1)
    for sink in (first, second):
        sink.close()
    assert rows_of(dsn, table) == [
        (1, 0, "e0-1", 1),
        (2, 0, "e0-2", 2),
        (3, 1, "e1-3", 103),
        (4, 1, "e1-4", 104),
    ]
    assert staging_tables_empty(dsn)


def test_missing_privileges_are_authorization_errors_naming_the_grant(
    pg_dsn: str, table: str, table_name: str
) -> None:
    """A role that may INSERT but not UPDATE the table, then one that may not create the
    staging table in schema laminar: each refused at start-up with the GRANT to run."""
    owner = upsert_sink(pg_dsn, table)
    owner.init_transactions()  # the laminar schema exists from here on
    owner.close()
    role = f"r_{table_name}"[:63]
    ddl(pg_dsn, f"CREATE ROLE {role} LOGIN")
    ddl(pg_dsn, f"GRANT INSERT, SELECT ON {table} TO {role}")
    ddl(pg_dsn, f"GRANT USAGE ON SCHEMA laminar TO {role}")
    ddl(pg_dsn, f"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA laminar TO {role}")
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, user=role)
    sink = upsert_sink(dsn, table, sink_id=f"grants-{table_name}")
    with pytest.raises(AuthorizationError, match=rf"GRANT UPDATE ON public\.{table_name} TO"):
        sink.init_transactions()
    ddl(pg_dsn, f"GRANT UPDATE ON {table} TO {role}")
    with pytest.raises(AuthorizationError, match=r"GRANT CREATE ON SCHEMA laminar TO <role>"):
        sink.init_transactions()
    ddl(pg_dsn, f"GRANT CREATE ON SCHEMA laminar TO {role}")
    writer = laminar.exactly_once(sink)
    try:
        assert writer.write_epoch(0, keyed(0)).committed
    finally:
        writer.close()
    assert rows_of(pg_dsn, table) == expected_after(range(1))
