"""Pure parts of Avro with a Schema Registry: subject names, the naming of refused fields, the
sink's and format("laminar")'s Avro settings, the core's derived schemas, and the versions the
embedded registry and spark-avro look-ups expect of bootstrap's poms. No server is started."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import laminar
from laminar import AvroOptions, ConfigError
from laminar._core import avro_key_schema, avro_value_schema
from laminar.embedded.registry import APICURIO_VERSION
from laminar.embedded.spark import SPARK_AVRO_VERSION
from laminar.kafka.registry import field_changes, secret_values, subject_name
from laminar.spark.options import parse_options
from tests.unit.test_embedded_kafka import pom_property

ROOT = Path(__file__).resolve().parents[2]
CONFLUENT_STRATEGIES = "io.confluent.kafka.serializers.subject"


def test_versions_match_the_poms_bootstrap_resolves() -> None:
    assert pom_property("scripts/registry/pom.xml", "apicurio.version") == APICURIO_VERSION
    assert pom_property("scripts/avro/spark/pom.xml", "spark.avro.version") == SPARK_AVRO_VERSION


@pytest.mark.parametrize(
    ("strategy", "role", "subject"),
    [
        ("topic", "value", "orders-value"),
        ("topic", "key", "orders-key"),
        ("record", "value", "shop.v1.Order"),
        ("topic_record", "key", "orders-shop.v1.Order"),
    ],
)
def test_subjects_follow_confluents_strategies(strategy: str, role: str, subject: str) -> None:
    options = AvroOptions(record_name="Order", namespace="shop.v1", subject_strategy=strategy)  # type: ignore[arg-type]
    assert subject_name(options, "orders", role) == subject  # type: ignore[arg-type]


def test_a_refused_change_names_the_fields() -> None:
    old = avro_value_schema(
        pa.schema([("id", pa.int64()), ("amount", pa.int64()), ("gone", pa.string())]),
        name="R",
    )
    new = avro_value_schema(
        pa.schema([("id", pa.int64()), ("amount", pa.string()), ("added", pa.float64())]),
        name="R",
    )
    changes = field_changes(old, new)
    assert changes[0].startswith("'amount' changed from")
    assert "'added' is new" in changes[1]
    assert changes[2] == "'gone' is gone"
    assert field_changes(old, old) == []


def test_the_derived_schemas_name_records_and_keys() -> None:
    schema = pa.schema([("id", pa.int64(), False), ("who", pa.struct([("name", pa.string())]))])
    value = json.loads(avro_value_schema(schema, name="Order", namespace="shop"))
    assert value["name"] == "Order"
    assert value["namespace"] == "shop"
    assert value["fields"][1]["type"][1]["namespace"] == "shop.Order"
    assert json.loads(avro_key_schema(schema, "id", name="K")) == "long"
    key = json.loads(avro_key_schema(schema, "who", name="Who", namespace="shop"))
    assert (key["type"], key["name"], key["namespace"]) == ("record", "Who", "shop")
    with pytest.raises(ConfigError, match="'order-id'"):
        avro_value_schema(pa.schema([("order-id", pa.int64())]), name="R")
    with pytest.raises(ConfigError, match="nanoseconds"):
        avro_value_schema(pa.schema([("at", pa.timestamp("ns"))]), name="R")


def test_avro_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="schema_id"):
        AvroOptions(schema_id=-1)
    with pytest.raises(ConfigError, match="schema_id"):
        AvroOptions(schema_id="newest")  # type: ignore[arg-type]
    assert AvroOptions(schema_id="latest").full_name == "topLevelRecord"


def test_the_sink_checks_its_avro_settings() -> None:
    with pytest.raises(ConfigError, match="key_format='avro' is written with value_format"):
        laminar.KafkaSink("b:9092", "t", "tid", key="id", key_format="avro")
    with pytest.raises(ConfigError, match="used with value_format='avro' only"):
        laminar.KafkaSink("b:9092", "t", "tid", schema_registry={"url": "http://r"})
    with pytest.raises(ConfigError, match="needs a 'url'"):
        laminar.KafkaSink("b:9092", "t", "tid", value_format="avro", schema_registry={})
    sink = laminar.KafkaSink(
        "b:9092",
        "t",
        "tid",
        value_format="avro",
        schema_registry={"url": "http://r", "basic.auth.user.info": "me:s3cret"},
    )
    assert "s3cret" not in repr(sink.schema_registry)
    assert set(secret_values({"basic.auth.user.info": "me:s3cret"})) >= {"me:s3cret", "s3cret"}


def test_format_laminar_takes_the_avro_options_in_sparks_style() -> None:
    options = parse_options(
        {
            "kafka.bootstrap.servers": "b:9092",
            "topic": "orders",
            "kafka.key.column": "id",
            "kafka.value.format": "avro",
            "kafka.key.format": "avro",
            "schema.registry.url": "http://registry:8081",
            "schema.registry.basic.auth.user.info.env": "SR_AUTH",
            "avro.value.record.name": "Order",
            "avro.value.subject.name.strategy": f"{CONFLUENT_STRATEGIES}.RecordNameStrategy",
            "avro.key.schema.id": "latest",
            "laminar.state.dsn.env": "STATE_DSN",
        }
    )
    (sink,) = options.kafka_sinks()
    assert sink.value_format == "avro"
    assert sink.key_format == "avro"
    registry = sink.schema_registry or {}
    assert registry["url"] == "http://registry:8081"
    assert registry["basic.auth.user.info"] == laminar.env("SR_AUTH")
    assert options.avro is not None
    assert options.avro.avro == AvroOptions(record_name="Order", subject_strategy="record")
    assert options.avro.key_avro == AvroOptions(schema_id="latest")


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("schema.registry.basic.auth.user.info", "me:pw", r"\.env"),
        ("avro.value.schema.id", "seven", "registry id or latest"),
        ("avro.value.subject.name.strategy", "nope", "topic, record or topic_record"),
        ("avro.value.typo", "x", "unknown option"),
    ],
)
def test_bad_avro_options_are_config_errors_naming_them(
    option: str, value: str, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_options(
            {
                "kafka.bootstrap.servers": "b:9092",
                "topic": "orders",
                "kafka.value.format": "avro",
                "schema.registry.url": "http://r",
                "laminar.state.dsn.env": "STATE_DSN",
                option: value,
            }
        )
