"""`KafkaSink`'s Avro values and keys: the writer schemas of a batch and their registry ids, settled
before the batch's first record is produced, then the rows encoded by the core in the Confluent
wire format (docs/kafka.md, "Avro with a Schema Registry").

The order is the guarantee: every registry call of a write (register a changed schema, read a
given id or the latest version) happens before anything of it is produced, so a refused change
(`ConfigError`) or an unreachable registry (`AbortableError`) leaves nothing of the epoch written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from laminar._core import KafkaRecords, avro_key_schema, avro_value_schema, encode_kafka_avro
from laminar._settings import is_deferred, resolve_mapping
from laminar.errors import ConfigError
from laminar.kafka.registry import (
    LATEST,
    AvroOptions,
    RegistryClient,
    registry_client,
    subject_name,
)

__all__ = ["AvroPlan", "check_avro_settings", "encode_avro", "plan_avro", "resolve_registry"]


@dataclass(frozen=True)
class AvroPlan:
    """The writer schemas of one batch and their ids (the key's when the key is Avro)."""

    value_schema: str
    value_id: int
    key_schema: str | None = None
    key_id: int | None = None


def check_avro_settings(
    value_format: str | None,
    key_format: str | None,
    key: str | None,
    schema_registry: Mapping[str, Any] | None,
    avro: AvroOptions | None,
    key_avro: AvroOptions | None,
) -> None:
    """The constructor's checks of the Avro settings (`ConfigError` naming the setting)."""
    if key_format not in (None, "avro"):
        raise ConfigError(f"key_format must be 'avro' or None, not {key_format!r}")
    if key_format == "avro" and key is None:
        raise ConfigError("key_format='avro' needs key=: the column written as the Avro key")
    if key_format == "avro" and value_format != "avro":
        raise ConfigError("key_format='avro' is written with value_format='avro'")
    for name, options in (("avro", avro), ("key_avro", key_avro)):
        if options is not None and not isinstance(options, AvroOptions):
            raise ConfigError(f"{name} must be a laminar.AvroOptions, not {type(options).__name__}")
    if value_format != "avro":
        if schema_registry is not None or avro is not None or key_avro is not None:
            raise ConfigError(
                "schema_registry, avro and key_avro are used with value_format='avro' only"
            )
        return
    if schema_registry is None or not isinstance(schema_registry, Mapping):
        raise ConfigError(
            "value_format='avro' needs schema_registry, the registry client's settings, e.g. "
            "{'url': 'http://registry:8081', 'basic.auth.user.info': laminar.env('SR_AUTH')}"
        )
    url = schema_registry.get("url")
    if url is None or (not is_deferred(url) and not str(url).strip()):
        raise ConfigError("schema_registry needs a 'url', e.g. 'http://registry:8081'")
    if key_avro is not None and key_format != "avro":
        raise ConfigError("key_avro is used with key_format='avro' only")


def resolve_registry(settings: Mapping[str, Any], sink_id: str) -> RegistryClient:
    """The process's registry client for ``settings`` (``laminar.env`` values read here, in the
    writing process)."""
    return registry_client(resolve_mapping(settings, f"KafkaSink {sink_id!r}: schema_registry"))


def _writer(
    registry: RegistryClient,
    options: AvroOptions,
    subject: str,
    derived: str,
) -> tuple[str, int]:
    """The writer schema and its id: the given id's schema, the subject's latest version, or the
    schema derived from the batch registered (or found) under ``subject``."""
    if options.schema_id == LATEST:
        return registry.latest(subject)
    if isinstance(options.schema_id, int):
        return registry.schema(options.schema_id), options.schema_id
    return derived, registry.register(subject, derived)


def plan_avro(
    schema: Any,
    *,
    topic: str,
    key: str | None,
    key_format: Literal["avro"] | None,
    registry: RegistryClient,
    avro: AvroOptions | None,
    key_avro: AvroOptions | None,
) -> AvroPlan:
    """The writer schemas of a batch of ``schema`` (Arrow) and their ids, from the cache or the
    registry: a schema the subject has not seen is registered here, before any record."""
    value_options = avro or AvroOptions()
    derived = avro_value_schema(
        schema, name=value_options.record_name, namespace=value_options.namespace
    )
    value_schema, value_id = _writer(
        registry, value_options, subject_name(value_options, topic, "value"), derived
    )
    if key_format != "avro" or key is None:
        return AvroPlan(value_schema, value_id)
    key_options = key_avro or AvroOptions()
    derived_key = avro_key_schema(
        schema, key, name=key_options.record_name, namespace=key_options.namespace
    )
    key_schema, key_id = _writer(
        registry, key_options, subject_name(key_options, topic, "key"), derived_key
    )
    return AvroPlan(value_schema, value_id, key_schema, key_id)


def encode_avro(data: Any, plan: AvroPlan, key: str | None) -> KafkaRecords:
    """The records of ``data`` with ``plan``'s writer schemas (values in Avro; the key in Avro
    when the plan has a key schema, else by the plain key rules)."""
    return encode_kafka_avro(
        data,
        value_schema=plan.value_schema,
        value_schema_id=plan.value_id,
        key=key,
        key_schema=plan.key_schema,
        key_schema_id=plan.key_id,
    )
