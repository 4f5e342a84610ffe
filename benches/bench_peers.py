"""Laminar's write paths against the tools users would pick instead, as gates: each comparison
runs side by side in one run, interleaved (`benches.gates.interleaved`: every contender once per
round, the order rotated), and each contender's figure is its best round of N. The same rows
for all (`make_peer_batch`: int8, text, numeric(18,2), timestamptz, float8), the same servers.

Kafka (write + flush inside a transaction; begin, Laminar's epoch marker and the commit are not
timed: the marker is the commit protocol's, gated by bench_budgets.py's commit overhead):

- raw confluent-kafka producing the records Laminar encoded, encoded beforehand, with the same
  key and headers and the same call form: Laminar >= 1.0x (and >= 2x producing alone, the goal);
- the naive loop ``to_pylist()`` + ``json.dumps`` + ``produce``: Laminar >= 5x.

PostgreSQL (one transaction each, committed; the table is truncated before each turn, untimed):

- COPY of the binary stream encoded beforehand (the server's limit for one connection): >= 0.9x;
- ADBC's ``adbc_ingest`` (adbc-driver-postgresql): >= 1.3x;
- pgpq's encoder + psycopg COPY: >= 1x;
- psycopg ``copy.write_row`` over ``to_pylist()`` rows: >= 5x.

Laminar is ``exactly_once(sink).write_epoch`` for PostgreSQL (the epoch claim and totals
included) and the sink's ``write`` + the flush of its producer for Kafka.
``LAMINAR_BENCH_QUICK=1`` (``./dev test``) shrinks the batches and the rounds.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from benches.gates import Contender, Gate, best, interleaved, spread
from benches.serialize_data import PEER_COLUMNS, PEER_DDL, make_peer_batch
from confluent_kafka import Producer
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

import laminar

QUICK = os.environ.get("LAMINAR_BENCH_QUICK") == "1"
#: Rows per round: enough that a round lasts about 0.1 s or more even in quick mode, so that a
#: scheduling hiccup of a few ms is a few per cent of it, not half.
KAFKA_ROWS = 50_000 if QUICK else 200_000
PG_ROWS = 100_000 if QUICK else 400_000
#: Rounds at least, and at most while a gate is not met yet (see `interleaved`).
ROUNDS = (5, 25) if QUICK else (7, 31)
#: Run-queue length per core (1-minute load average) above which the ratios are not enforced.
BUSY_LOAD = 2.0
#: Rounds of the peers many times slower than Laminar (the naive loops, >= 5x gates).
SLOW_PEER_ROUNDS = 3
#: Laminar's rows/s over each peer's: (the issue's goal, the enforced floor). Where the two
#: differ, the goal is shown as the gate's target and the floor fails the run. Full CI runs (the
#: whole suite, then the benchmarks, on the 2-core machine) measured raw produce 0.656-0.762
#: before the core produced the records and 0.639-0.914 since (1.05 in a run of this file alone),
#: COPY pre-encoded 0.846-0.985, pgpq 0.984-1.10 and the naive loop 4.72-8.53 (3 capped rounds):
#: below the goal in some runs with no change to the code (docs/benchmarks.md). Each floor sits
#: below the lowest of those. Kafka's write + flush is mostly the broker's pace, the same for
#: both, and spreads the most: a write made 2x slower measured 0.475-0.575 there, so its floor
#: (0.5) catches only the worst of that; the producing-only gate below is the one that halves.
KAFKA_GATES = {"raw produce": (1.0, 0.5), "naive loop": (5.0, 3.5)}
PG_GATES = {
    "COPY pre-encoded": (0.9, 0.6),
    "adbc_ingest": (1.3, 1.3),
    "pgpq + COPY": (1.0, 0.7),
    "write_row": (5.0, 5.0),
}
#: Laminar's write (encode + produce, the flush untimed) over raw produce of the records encoded
#: beforehand: at least (the floor), and the goal shown beside it. Laminar encodes too (about
#: 14 ms per 50 K records), on a second thread while the core hands the previous chunk to
#: librdkafka without the GIL: 1.14-1.85x in full CI runs, 1.6-1.9x at load ~4, 1.02x at load
#: 5.6 (busy: not enforced; docs/benchmarks.md). A hand-off made 2x slower measured 0.523.
PRODUCING_FLOOR = 0.8
PRODUCING_GOAL = 2.0
#: The librdkafka settings of Laminar's producer that bear on throughput
#: (laminar.kafka._config.build_producer_config), given to the raw peers too: the same
#: acknowledgements, idempotence and delivery reports (failures only).
PEER_PRODUCER_CONFIG = {
    "enable.idempotence": True,
    "acks": "all",
    "delivery.report.only.error": True,
}


def ratio(seconds: dict[str, list[float]], peer: str) -> float:
    """Laminar's rows/s over the peer's: the best round of each."""
    return best(seconds[peer]) / best(seconds["laminar"])


def measure(
    contenders: dict[str, Contender], gates: dict[str, tuple[float, float]]
) -> dict[str, list[float]]:
    def settled(seconds: dict[str, list[float]]) -> bool:
        return all(ratio(seconds, peer) >= goal for peer, (goal, _) in gates.items())

    return interleaved(contenders, ROUNDS[0], max_rounds=ROUNDS[1], settled=settled)


def ratio_gates(
    gate: Gate,
    store: str,
    seconds: dict[str, list[float]],
    gates: dict[str, tuple[float, float]],
    rows: int,
) -> None:
    """One gate per peer; every one is recorded before the first enforced failure raises.

    On a machine loaded past `BUSY_LOAD` run queues per core while it measured, the ratios are
    recorded and shown but not enforced: no round then runs undisturbed and best-of-N still
    spreads by 2x (docs/benchmarks.md), so a failure there says nothing about the code. The
    table names the load; a quiet run (CI's machine) enforces every gate."""
    load = os.getloadavg()[0]
    busy = load > BUSY_LOAD * (os.cpu_count() or 1)
    failures = []
    for peer, (goal, floor) in gates.items():
        try:
            ratio_gate(
                gate,
                f"{store} write: laminar / {peer}",
                seconds,
                peer,
                rows,
                floor,
                not busy,
                goal=goal,
                note=f"; load average {load:.1f}{' (busy: not enforced)' if busy else ''}",
            )
        except AssertionError as e:
            failures.append(str(e))
    if failures:
        raise AssertionError("\n".join(failures))


def ratio_gate(
    gate: Gate,
    name: str,
    seconds: dict[str, list[float]],
    peer: str,
    rows: int,
    at_least: float,
    enforced: bool,
    note: str = "",
    goal: float | None = None,
) -> None:
    ours, theirs = best(seconds["laminar"]), best(seconds[peer])
    figure = ratio(seconds, peer)
    target = ""
    if goal is not None and goal != at_least:
        target = f"goal >= {goal:g} ({'met' if figure >= goal else 'not met'})"
    gate(
        name,
        figure,
        at_least=at_least,
        enforced=enforced,
        unit="x",
        target=target,
        detail=(
            f"best of {len(seconds[peer])} interleaved rounds of {rows:,} rows: laminar "
            f"{rows / ours:,.0f} rows/s ({spread(seconds['laminar'])}), {peer} "
            f"{rows / theirs:,.0f} rows/s ({spread(seconds[peer])}){note}"
        ),
    )


# -- Kafka ---------------------------------------------------------------------------------------


class TransactionalProducer:
    """A raw confluent-kafka transactional producer on a topic of its own."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.tid = f"peer-{uuid.uuid4().hex[:8]}"
        self.producer = Producer(
            {**PEER_PRODUCER_CONFIG, "bootstrap.servers": bootstrap, "transactional.id": self.tid}
        )
        self.producer.init_transactions(30)
        self.headers = [("laminar.sink", self.tid.encode()), ("laminar.epoch", b"1")]

    def produce_all(self, pairs: list[tuple[bytes, bytes]]) -> None:
        """The loop KafkaSink runs: positional ``produce(topic, value, key, partition, callback,
        on_delivery, timestamp, headers)``, the form confluent-kafka serves fastest."""
        produce, topic, headers = self.producer.produce, self.topic, self.headers
        for value, key in pairs:
            try:
                produce(topic, value, key, -1, None, None, 0, headers)
            except BufferError:  # the local queue is full: serve callbacks until there is room
                while True:
                    self.producer.poll(0.005)
                    try:
                        produce(topic, value, key, -1, None, None, 0, headers)
                        break
                    except BufferError:
                        continue

    def flush(self) -> None:
        assert self.producer.flush(60) == 0

    def begin(self) -> None:
        self.producer.begin_transaction()

    def commit(self) -> None:
        self.producer.commit_transaction(30)


@pytest.fixture(scope="module")
def kafka_rows() -> pa.Table:
    return make_peer_batch(KAFKA_ROWS)


def bench_kafka_write_vs_peers(
    kafka_broker: Any, kafka_bootstrap: str, kafka_rows: pa.Table, gate: Gate
) -> None:
    def topic() -> str:
        name = f"bench_peers_{uuid.uuid4().hex[:8]}"
        kafka_broker.create_topic(name, partitions=1)
        return name

    sink = laminar.KafkaSink(
        kafka_bootstrap, topic(), f"peer-laminar-{uuid.uuid4().hex[:8]}", key="id"
    )
    sink.init_transactions()
    raw = TransactionalProducer(kafka_bootstrap, topic())
    naive = TransactionalProducer(kafka_bootstrap, topic())
    encoded = laminar.encode_kafka(kafka_rows, key="id")
    assert encoded.keys is not None
    pairs = list(zip(encoded.values, encoded.keys, strict=True))
    epochs = itertools.count(1)
    epoch = 0
    #: The same rounds timed without the flush: the calling thread's work alone.
    producing: dict[str, list[float]] = {"laminar": [], "raw produce": []}

    def laminar_begin() -> None:
        nonlocal epoch
        epoch = next(epochs)
        assert sink.begin_transaction(epoch)

    def laminar_write() -> None:
        # The write path: encode, produce, and wait until the broker acknowledged every record
        # (the sink's own producer, flushed as `prepare_transaction` flushes it) — the peer's
        # work plus encoding. The epoch marker's round trip (`prepare_transaction`) belongs to
        # the commit, gated by bench_budgets.py's commit overhead: it runs untimed, after.
        started = time.perf_counter()
        sink.write(kafka_rows)
        producing["laminar"].append(time.perf_counter() - started)
        assert sink._live().producer.flush(60) == 0

    def laminar_commit() -> None:
        sink.prepare_transaction()
        sink.commit_transaction(epoch)

    def raw_write() -> None:
        started = time.perf_counter()
        raw.produce_all(pairs)
        producing["raw produce"].append(time.perf_counter() - started)
        raw.flush()

    def naive_write() -> None:
        naive.produce_all(
            [
                (json.dumps(row, default=str).encode(), str(row["id"]).encode())
                for row in kafka_rows.to_pylist()
            ]
        )
        naive.flush()

    try:
        # Every round, not only until the goals are met: the producing-only figure (below) is
        # read from the same rounds, and five were not enough for it to find a quiet one.
        seconds = interleaved(
            {
                "laminar": Contender(laminar_write, laminar_begin, laminar_commit),
                "raw produce": Contender(raw_write, raw.begin, raw.commit),
                "naive loop": Contender(
                    naive_write, naive.begin, naive.commit, max_rounds=SLOW_PEER_ROUNDS
                ),
            },
            ROUNDS[1],
        )
    finally:
        sink.close()
    load = os.getloadavg()[0]
    busy = load > BUSY_LOAD * (os.cpu_count() or 1)
    try:
        # The write path without the broker's part: encode + produce against produce. The flush
        # (the broker acknowledging) is the same for both and dilutes the ratio above, so a 2x
        # slower `KafkaSink.write` moved it from about 1.0 to 0.575 only; here it halves.
        ratio_gate(
            gate,
            "kafka write, producing only: laminar / raw produce",
            producing,
            "raw produce",
            KAFKA_ROWS,
            PRODUCING_FLOOR,
            not busy,
            note=f"; load average {load:.1f}{' (busy: not enforced)' if busy else ''}",
            goal=PRODUCING_GOAL,
        )
    finally:
        ratio_gates(gate, "kafka", seconds, KAFKA_GATES, KAFKA_ROWS)


# -- PostgreSQL ----------------------------------------------------------------------------------


def as_uri(dsn: str) -> str:
    """ADBC takes a URI; the fixtures may give a key=value DSN."""
    if dsn.startswith(("postgresql://", "postgres://")):
        return dsn
    params = conninfo_to_dict(dsn)
    auth = str(params.get("user", "postgres"))
    if params.get("password"):
        auth += f":{params['password']}"
    host, port = params.get("host", "127.0.0.1"), params.get("port", 5432)
    return f"postgresql://{auth}@{host}:{port}/{params.get('dbname', 'postgres')}"


@pytest.fixture(scope="module")
def pg_rows() -> pa.Table:
    return make_peer_batch(PG_ROWS)


@pytest.fixture
def pg_tables(pg_dsn: str) -> Iterator[Callable[[str], str]]:
    made: list[str] = []

    def table(label: str) -> str:
        name = f"bench_peer_{label}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE TABLE {} " + PEER_DDL).format(sql.Identifier(name)))
        made.append(name)
        return name

    yield table
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for name in made:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


def bench_postgres_write_vs_peers(
    pg_dsn: str, pg_rows: pa.Table, pg_tables: Callable[[str], str], gate: Gate
) -> None:
    import adbc_driver_postgresql.dbapi as adbc
    import pgpq

    conn = psycopg.connect(pg_dsn)
    adbc_conn = adbc.connect(as_uri(pg_dsn))
    tables = {label: pg_tables(label) for label in ("laminar", "copy", "adbc", "pgpq", "row")}
    ident = {label: sql.Identifier(name) for label, name in tables.items()}
    writer = laminar.exactly_once(laminar.PostgresSink(pg_dsn, tables["laminar"]))
    epochs = itertools.count()
    preencoded = laminar.encode_pg_copy(pg_rows, PEER_COLUMNS).chunks
    binary_copy = "COPY {} FROM STDIN (FORMAT BINARY)"

    def truncate(label: str) -> Callable[[], None]:
        def run() -> None:
            conn.execute(sql.SQL("TRUNCATE {}").format(ident[label]))
            conn.commit()

        return run

    def laminar_write() -> None:
        assert writer.write_epoch(next(epochs), pg_rows).committed

    def copy_preencoded() -> None:
        with conn.cursor() as cur, cur.copy(sql.SQL(binary_copy).format(ident["copy"])) as copy:
            for chunk in preencoded:
                copy.write(chunk)
        conn.commit()

    def adbc_ingest() -> None:
        with adbc_conn.cursor() as cur:
            cur.adbc_ingest(tables["adbc"], pg_rows, mode="append")
        adbc_conn.commit()

    def pgpq_copy() -> None:
        encoder = pgpq.ArrowToPostgresBinaryEncoder(pg_rows.schema)
        with conn.cursor() as cur, cur.copy(sql.SQL(binary_copy).format(ident["pgpq"])) as copy:
            copy.write(encoder.write_header())
            for batch in pg_rows.to_batches():
                copy.write(encoder.write_batch(batch))
            copy.write(encoder.finish())
        conn.commit()

    def write_row() -> None:
        text_copy = sql.SQL("COPY {} FROM STDIN").format(ident["row"])
        with conn.cursor() as cur, cur.copy(text_copy) as copy:
            for row in pg_rows.to_pylist():
                copy.write_row(tuple(row.values()))
        conn.commit()

    try:
        seconds = measure(
            {
                "laminar": Contender(laminar_write, truncate("laminar")),
                "COPY pre-encoded": Contender(copy_preencoded, truncate("copy")),
                "adbc_ingest": Contender(adbc_ingest, truncate("adbc")),
                "pgpq + COPY": Contender(pgpq_copy, truncate("pgpq")),
                "write_row": Contender(write_row, truncate("row"), max_rounds=SLOW_PEER_ROUNDS),
            },
            PG_GATES,
        )
        # Same rows everywhere: the count and the sum of the numeric column agree.
        check = sql.SQL("SELECT count(*), sum(amount) FROM {}")
        landed = {label: conn.execute(check.format(i)).fetchone() for label, i in ident.items()}
        conn.rollback()
        assert len(set(landed.values())) == 1, landed
        assert next(iter(landed.values()))[0] == PG_ROWS
    finally:
        writer.close()
        adbc_conn.close()
        conn.close()
    ratio_gates(gate, "postgres", seconds, PG_GATES, PG_ROWS)
