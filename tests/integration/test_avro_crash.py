"""The atomic pair writing Avro values and keys (`exactly_once(KafkaSink(value_format="avro",
key_format="avro"), PostgresSink, redo="log")`) killed with SIGKILL at a sample of the steps and
of recovery (`test_atomic_crash.ENCODING_STEPS`/`ENCODING_RECOVERY`: what an encoding can
change; test_atomic_crash.py walks every point of the same protocol), then restarted: every row
is in PostgreSQL once and among Kafka's committed records once, each record decoded by
confluent-kafka's ``AvroDeserializer`` (the writer schema read from the registry by the id the
record carries) to the row's exact values — the redo log keeps the framed bytes, so a record
redone from it is the record the first attempt produced.

The writer and the points are test_atomic_crash.py's (`atomic_crash_writer.py`, the core's
`CrashPoint.for_protocol`), the Avro settings given through the environment.
"""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest

from laminar.embedded.registry import SchemaRegistry
from tests.integration.atomic_helpers import (
    ROWS_PER_EPOCH,
    epoch_table,
    kill_at_step_and_restart,
    kill_in_recovery_and_finish,
)
from tests.integration.avro_helpers import AvroReader, schema_id
from tests.integration.kafka_fill import settled_committed as read_committed
from tests.integration.test_atomic_crash import (
    DECIDED_PREPARED,
    ENCODING_RECOVERY,
    ENCODING_STEPS,
    EPOCHS,
    args,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def avro_world(
    world: dict[str, str], schema_registry: SchemaRegistry, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    monkeypatch.setenv("LAMINAR_TEST_AVRO_REGISTRY", schema_registry.url)
    return {**world, "registry": schema_registry.url}


def check_avro(w: dict[str, str]) -> None:
    expected = {row["id"]: row for e in range(EPOCHS) for row in epoch_table(e).to_pylist()}
    with psycopg.connect(w["dsn"]) as conn:
        pg = Counter(r[0] for r in conn.execute(f"SELECT id FROM {w['table']}").fetchall())
    assert set(pg) == set(expected), "PostgreSQL: missing or extra rows"
    assert set(pg.values()) == {1}, "PostgreSQL: rows twice"
    reader = AvroReader(w["registry"], w["topic"])
    records = read_committed(w["bootstrap"], w["topic"])
    values = [reader.value(r.value) for r in records]
    counts = Counter(v["id"] for v in values)
    assert set(counts) == set(expected), sorted(set(expected) ^ set(counts))[:10]
    assert set(counts.values()) == {1}, "records committed in Kafka twice"
    for record, value in zip(records, values, strict=True):
        assert value == expected[value["id"]]  # every value exact
        assert reader.key(record.key) == value["id"]  # the key in Avro: the id column
        assert schema_id(record.value or b"") == schema_id(records[0].value or b"")
    assert len(values) == EPOCHS * ROWS_PER_EPOCH


@pytest.mark.parametrize("point", ENCODING_STEPS)
def test_an_avro_writer_killed_at_a_step_recovers_exactly_once(
    avro_world: dict[str, str], point: str
) -> None:
    kill_at_step_and_restart(args(avro_world, "log"), point)
    check_avro(avro_world)


@pytest.mark.parametrize("point", ENCODING_RECOVERY)
def test_an_avro_writer_killed_again_during_recovery_recovers_exactly_once(
    avro_world: dict[str, str], point: str
) -> None:
    kill_in_recovery_and_finish(
        args(avro_world, "log"),
        avro_world["bootstrap"],
        avro_world["tid"],
        point,
        "log",
        DECIDED_PREPARED,
    )
    check_avro(avro_world)
