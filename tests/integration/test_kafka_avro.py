"""KafkaSink(value_format="avro") against the real broker and a real Schema Registry (Apicurio's
Confluent-compatible API): every Arrow type of docs/kafka.md's mapping read back exactly by
confluent-kafka's ``AvroDeserializer``; subjects by each strategy; a given schema id and the
latest version; a compatible change registered before the epoch writes, a refused one a
`ConfigError` naming the field with nothing written; the registry unreachable → `AbortableError`
with nothing written, and an unchanged schema making no registry call at all.

Committed records are read with `laminar.kafka.log` (control batches replayed), never a broker's
read_committed.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

import laminar
from laminar import AbortableError, AvroOptions, ConfigError, DataError
from laminar.embedded.registry import SchemaRegistry
from tests.integration.avro_helpers import AvroReader, schema_id
from tests.integration.kafka_fill import settled_committed as read_committed

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc


@pytest.fixture
def topic(kafka_broker: Any, topic_name: str) -> str:
    kafka_broker.create_topic(topic_name, partitions=2)
    return topic_name


def avro_sink(bootstrap: str, topic: str, registry_url: str, **kw: Any) -> laminar.KafkaSink:
    kw.setdefault("key", "id")
    kw.setdefault("key_format", "avro")
    config = {"url": registry_url, "max.retries": 0, **kw.pop("registry_config", {})}
    return laminar.KafkaSink(
        bootstrap,
        topic,
        f"tid-{topic}",
        value_format="avro",
        schema_registry=config,
        commit_timeout_s=10.0,
        init_timeout_s=15.0,
        **kw,
    )


def write(sink: laminar.KafkaSink, epoch: int, table: pa.Table) -> None:
    assert sink.begin_transaction(epoch)
    sink.write(table)
    sink.commit_transaction(epoch)


def every_type_table(base: int) -> pa.Table:
    """Two rows of every type of the mapping (the second mostly nulls)."""
    point = pa.struct([("x", pa.int32()), ("label", pa.string())])
    return pa.table(
        {
            "id": pa.array([base, base + 1], pa.int64()),
            "small": pa.array([-7, None], pa.int16()),
            "flag": pa.array([True, None], pa.bool_()),
            "ratio": pa.array([0.1, None], pa.float64()),
            "amount": pa.array([Decimal("12345.67"), None], pa.decimal128(10, 2)),
            "at": pa.array(
                [dt.datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=UTC), None],
                pa.timestamp("us", tz="UTC"),
            ),
            "at_ms": pa.array(
                [dt.datetime(1969, 12, 31, 23, 0, 0, 1000, tzinfo=UTC), None],
                pa.timestamp("ms", tz="UTC"),
            ),
            "local": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 6), None], pa.timestamp("us")),
            "day": pa.array([dt.date(2024, 2, 29), None], pa.date32()),
            "t_ms": pa.array([dt.time(1, 2, 3, 4000), None], pa.time32("ms")),
            "t_us": pa.array([dt.time(23, 59, 59, 999999), None], pa.time64("us")),
            "uid": pa.array([uuid.UUID(int=base).bytes, None], pa.uuid()),
            "raw": pa.array([b"\x00\xff\x10", None], pa.binary()),
            "text": pa.array(["é 😀 \x01", None], pa.string()),
            "point": pa.array([{"x": 5, "label": "p"}, None], point),
            "tags": pa.array([[1, None, 3], None], pa.list_(pa.int64())),
            "attrs": pa.array(
                [[("k", 1.5), ("z", None)], None], pa.map_(pa.string(), pa.float64())
            ),
        }
    )


def expected_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The rows as fastavro reads them: maps as dicts, uuids as UUID."""
    rows = table.to_pylist()
    for row in rows:
        row["attrs"] = dict(row["attrs"]) if row["attrs"] is not None else None
        if isinstance(row["uid"], bytes):  # pyarrow before its uuid values were UUIDs
            row["uid"] = uuid.UUID(bytes=row["uid"])
    return rows


def normalised(value: dict[str, Any]) -> dict[str, Any]:
    out = dict(value)
    if isinstance(out.get("uid"), str):
        out["uid"] = uuid.UUID(out["uid"])
    return out


def test_every_type_reads_back_exactly_with_the_confluent_deserializer(
    kafka_bootstrap: str, topic: str, schema_registry: SchemaRegistry
) -> None:
    sink = avro_sink(kafka_bootstrap, topic, schema_registry.url)
    sink.init_transactions()
    tables = [every_type_table(0), every_type_table(100)]
    for epoch, table in enumerate(tables):
        write(sink, epoch, table)
    sink.close()
    records = read_committed(kafka_bootstrap, topic)
    reader = AvroReader(schema_registry.url, topic)
    got = {}
    for record in records:
        value = normalised(reader.value(record.value))
        assert reader.key(record.key) == value["id"]
        got[value["id"]] = value
    expected = {row["id"]: row for t in tables for row in expected_rows(t)}
    assert got == expected
    assert len(records) == 4
    # the ids are the registry's for the TopicNameStrategy subjects
    subjects = schema_registry.subjects()
    assert f"{topic}-value" in subjects
    assert f"{topic}-key" in subjects
    latest = reader.client.get_latest_version(f"{topic}-value")
    assert {schema_id(r.value or b"") for r in records} == {latest.schema_id}
    key_latest = reader.client.get_latest_version(f"{topic}-key")
    assert {schema_id(r.key or b"") for r in records} == {key_latest.schema_id}
    assert key_latest.schema.schema_str.strip('"') == "long"


@pytest.mark.parametrize(
    ("strategy", "subject"),
    [("record", "{namespace}.Order"), ("topic_record", "{topic}-{namespace}.Order")],
)
def test_record_name_strategies_pick_the_subject(
    kafka_bootstrap: str,
    topic: str,
    schema_registry: SchemaRegistry,
    strategy: str,
    subject: str,
) -> None:
    # RecordNameStrategy shares one subject across topics: a namespace of its own per test
    namespace = f"shop.{topic.replace('-', '_')}"
    options = AvroOptions(
        record_name="Order",
        namespace=namespace,
        subject_strategy=strategy,  # type: ignore[arg-type]
    )
    subject = subject.format(topic=topic, namespace=namespace)
    sink = avro_sink(kafka_bootstrap, topic, schema_registry.url, avro=options, key_format=None)
    sink.init_transactions()
    table = pa.table({"id": [1, 2], "name": ["a", "b"]})
    write(sink, 0, table)
    sink.close()
    assert subject in schema_registry.subjects()
    reader = AvroReader(schema_registry.url, topic)
    records = read_committed(kafka_bootstrap, topic)
    assert sorted(reader.value(r.value)["name"] for r in records) == ["a", "b"]
    assert {r.key for r in records} == {b"1", b"2"}  # a plain key beside Avro values
    schema = reader.client.get_latest_version(subject).schema.schema_str
    assert '"name":"Order"' in schema.replace(" ", "")


def test_a_given_schema_id_and_the_latest_version_are_written_with(
    kafka_bootstrap: str, topic: str, schema_registry: SchemaRegistry
) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": schema_registry.url})
    # a schema registered elsewhere: a non-null long and a string with a default
    given = (
        '{"type":"record","name":"Given","fields":[{"name":"id","type":"long"},'
        '{"name":"name","type":["null","string"],"default":null}]}'
    )
    given_id = client.register_schema(f"{topic}-value", Schema(given, "AVRO"))
    table = pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", None]})
    by_id = avro_sink(
        kafka_bootstrap, topic, schema_registry.url, key_format=None, key=None,
        avro=AvroOptions(schema_id=given_id),
    )  # fmt: skip
    by_id.init_transactions()
    write(by_id, 0, table)
    by_id.close()
    latest = avro_sink(
        kafka_bootstrap, topic, schema_registry.url, key_format=None, key=None,
        avro=AvroOptions(schema_id="latest"),
    )  # fmt: skip
    latest.init_transactions()
    write(latest, 1, pa.table({"id": pa.array([3], pa.int64()), "name": ["c"]}))
    # a null where the given schema has no null branch: DataError, nothing written
    assert latest.begin_transaction(2)
    with pytest.raises(DataError, match="'id' row 1 is null"):
        latest.write(pa.table({"id": pa.array([4, None], pa.int64()), "name": ["d", "e"]}))
    latest.close()
    records = read_committed(kafka_bootstrap, topic)
    assert {schema_id(r.value or b"") for r in records} == {given_id}
    reader = AvroReader(schema_registry.url, topic)
    assert sorted((v["id"], v["name"]) for v in map(reader.value, (r.value for r in records))) == [
        (1, "a"), (2, None), (3, "c"),
    ]  # fmt: skip
    assert schema_registry.versions(f"{topic}-value") == [1]  # nothing new registered


def test_a_compatible_change_registers_a_new_version_before_the_epoch_writes(
    kafka_bootstrap: str, topic: str, schema_registry: SchemaRegistry
) -> None:
    schema_registry.set_compatibility(f"{topic}-value", "BACKWARD")
    sink = avro_sink(kafka_bootstrap, topic, schema_registry.url)
    sink.init_transactions()
    write(sink, 0, pa.table({"id": pa.array([1], pa.int64()), "a": ["x"]}))
    # a new nullable column: BACKWARD-compatible (its default is null)
    write(sink, 1, pa.table({"id": pa.array([2], pa.int64()), "a": ["y"], "b": [2.5]}))
    sink.close()
    assert schema_registry.versions(f"{topic}-value") == [1, 2]
    reader = AvroReader(schema_registry.url, topic)
    records = sorted(read_committed(kafka_bootstrap, topic), key=lambda r: r.key or b"")
    values = [reader.value(r.value) for r in records]
    assert values == [{"id": 1, "a": "x"}, {"id": 2, "a": "y", "b": 2.5}]
    ids = [schema_id(r.value or b"") for r in records]
    assert ids[0] != ids[1]
    assert ids[1] == reader.client.get_latest_version(f"{topic}-value").schema_id


def test_a_refused_change_is_a_config_error_naming_the_field_and_nothing_is_written(
    kafka_bootstrap: str, topic: str, schema_registry: SchemaRegistry
) -> None:
    schema_registry.set_compatibility(f"{topic}-value", "BACKWARD")
    sink = avro_sink(kafka_bootstrap, topic, schema_registry.url)
    sink.init_transactions()
    write(sink, 0, pa.table({"id": pa.array([1], pa.int64()), "amount": pa.array([5], pa.int64())}))
    assert sink.begin_transaction(1)
    with pytest.raises(ConfigError) as refused:
        sink.write(pa.table({"id": pa.array([2], pa.int64()), "amount": ["five"]}))
    message = str(refused.value)
    assert "'amount' changed from" in message
    assert f"{topic}-value" in message
    assert "Nothing of the epoch was written" in message
    # the sink aborted the epoch and stays usable: the old schema writes epoch 1
    write(sink, 1, pa.table({"id": pa.array([3], pa.int64()), "amount": pa.array([7], pa.int64())}))
    sink.close()
    reader = AvroReader(schema_registry.url, topic)
    values = sorted(
        (reader.value(r.value) for r in read_committed(kafka_bootstrap, topic)),
        key=lambda v: v["id"],
    )
    assert values == [{"id": 1, "amount": 5}, {"id": 3, "amount": 7}]
    assert schema_registry.versions(f"{topic}-value") == [1]


def test_an_unreachable_registry_is_retriable_and_an_unchanged_schema_needs_none(
    kafka_bootstrap: str,
    topic: str,
    registry_factory: Callable[..., SchemaRegistry],
) -> None:
    registry = registry_factory()
    url = registry.url
    registry.stop()
    sink = avro_sink(kafka_bootstrap, topic, url)
    sink.init_transactions()
    # at start-up: the first epoch cannot learn its schema id
    assert sink.begin_transaction(0)
    with pytest.raises(AbortableError, match="unreachable") as down:
        sink.write(pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]}))
    assert down.value.retriable
    sink.abort_transaction(0)
    registry.start()  # back (empty)
    write(sink, 0, pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]}))
    # mid-stream: gone again; the same schema is answered from the process's cache
    registry.stop()
    write(sink, 1, pa.table({"id": pa.array([2], pa.int64()), "v": ["b"]}))
    # a changed schema needs the registry: AbortableError, nothing of the epoch written
    assert sink.begin_transaction(2)
    with pytest.raises(AbortableError, match="unreachable"):
        sink.write(pa.table({"id": pa.array([3], pa.int64()), "v": ["c"], "w": [1]}))
    sink.abort_transaction(2)
    sink.close()
    records = read_committed(kafka_bootstrap, topic)
    assert sorted(r.key for r in records) == sorted([records[0].key, records[1].key])
    assert len(records) == 2
    assert len({schema_id(r.value or b"") for r in records}) == 1


def test_settings_are_checked_when_the_sink_is_built() -> None:
    with pytest.raises(ConfigError, match="needs schema_registry"):
        laminar.KafkaSink("b:9092", "t", "tid", value_format="avro")
    with pytest.raises(ConfigError, match="key_format='avro' needs key="):
        laminar.KafkaSink(
            "b:9092", "t", "tid", value_format="avro", key_format="avro",
            schema_registry={"url": "http://r"},
        )  # fmt: skip
    with pytest.raises(ConfigError, match="subject_strategy"):
        AvroOptions(subject_strategy="nope")  # type: ignore[arg-type]
    sink = laminar.KafkaSink(
        "b:9092", "t", "tid", value_format="avro",
        schema_registry={"url": "http://r", "basic.auth.user.info": "user:s3cret"},
    )  # fmt: skip
    assert "s3cret" not in repr(sink.schema_registry)


def register_at_once(url: str, subject: str, schema: str, writers: int) -> list[Any]:
    """``writers`` registry clients (each a process's own cache) register ``schema`` under
    ``subject`` at the same moment; what each got: its id or the error it raised."""
    import threading

    from laminar.kafka.registry import RegistryClient

    got: list[Any] = []
    start = threading.Barrier(writers)

    def register() -> None:
        client = RegistryClient({"url": url})
        start.wait()
        try:
            got.append(client.register(subject, schema))
        except Exception as e:
            got.append(e)

    threads = [threading.Thread(target=register) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def test_writers_registering_one_new_schema_at_once_all_get_its_id(schema_registry: Any) -> None:
    """The tasks of a batch register the same new schema together (a format('laminar') query's
    first batch): a registry may refuse all but the first with a conflict although the schema
    is there (Apicurio: "artifact … already exists", HTTP 409, seen as a ConfigError that failed
    the query). Each writer gets the schema's one id; only a schema the subject does not hold is
    a refused change."""
    for round_ in range(8):
        schema = json.dumps(
            {"type": "record", "name": f"R{round_}", "fields": [{"name": "a", "type": "long"}]}
        )
        got = register_at_once(
            schema_registry.url, f"race-{uuid.uuid4().hex[:8]}-value", schema, writers=4
        )
        assert all(isinstance(i, int) for i in got), got
        assert len(set(got)) == 1, got
