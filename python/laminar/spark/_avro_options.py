"""``format("laminar")``'s Avro options (docs/spark.md, "Avro"): ``kafka.value.format=avro``,
``kafka.key.format=avro``, the registry client's ``schema.registry.*`` settings (credentials only
as ``schema.registry.<setting>.env``, the name of an environment variable on the server) and the
records' ``avro.value.*`` / ``avro.key.*`` naming, subject strategy and schema id."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from laminar._redact import is_secret_key
from laminar._settings import env
from laminar.errors import ConfigError
from laminar.kafka.registry import AvroOptions

__all__ = ["AVRO_KNOWN", "AvroSparkOptions", "parse_avro_options"]

#: The Avro options, for the list of known options (the registry's own settings pass through).
AVRO_KNOWN = {
    "kafka.key.format": "avro: the key column in Avro (with kafka.value.format=avro)",
    "schema.registry.url": "the Schema Registry's URL (value or key format avro)",
    "schema.registry.<setting>": "a setting of confluent-kafka's SchemaRegistryClient",
    "schema.registry.<setting>.env": "a secret registry setting, from this environment variable",
    "avro.value.record.name": "the value record's name (default topLevelRecord)",
    "avro.value.record.namespace": "the value record's namespace (default none)",
    "avro.value.subject.name.strategy": "topic (default), record or topic_record",
    "avro.value.schema.id": "write with this registered schema id, or latest",
    "avro.key.record.name": "the key record's name (a struct key column)",
    "avro.key.record.namespace": "the key record's namespace",
    "avro.key.subject.name.strategy": "topic (default), record or topic_record",
    "avro.key.schema.id": "write the key with this registered schema id, or latest",
}

#: Confluent's strategy class names, accepted beside the short names.
_STRATEGIES = {
    "topic": "topic",
    "record": "record",
    "topic_record": "topic_record",
    "topicnamestrategy": "topic",
    "recordnamestrategy": "record",
    "topicrecordnamestrategy": "topic_record",
}
_SIDE_KEYS = ("record.name", "record.namespace", "subject.name.strategy", "schema.id")


@dataclass(frozen=True)
class AvroSparkOptions:
    """The Avro part of the options, as KafkaSink takes it."""

    key_format: str | None
    schema_registry: dict[str, Any] | None
    avro: AvroOptions | None
    key_avro: AvroOptions | None


def _side(opts: Mapping[str, str], side: str) -> AvroOptions | None:
    given = {k: opts[f"avro.{side}.{k}"] for k in _SIDE_KEYS if f"avro.{side}.{k}" in opts}
    if not given:
        return None
    strategy = given.get("subject.name.strategy", "topic")
    short = _STRATEGIES.get(strategy.strip().lower().rsplit(".", 1)[-1])
    if short is None:
        raise ConfigError(
            f"option 'avro.{side}.subject.name.strategy' takes topic, record or topic_record "
            f"(or Confluent's class names), not {strategy!r}"
        )
    schema_id: int | str | None = given.get("schema.id")
    if schema_id is not None and schema_id != "latest":
        try:
            schema_id = int(schema_id)
        except ValueError:
            raise ConfigError(
                f"option 'avro.{side}.schema.id' takes a registry id or latest, not {schema_id!r}"
            ) from None
    return AvroOptions(
        record_name=given.get("record.name", "topLevelRecord"),
        namespace=given.get("record.namespace"),
        subject_strategy=short,  # type: ignore[arg-type]
        schema_id=schema_id,  # type: ignore[arg-type]
    )


def parse_avro_options(opts: Mapping[str, str]) -> AvroSparkOptions:
    """The Avro options of ``opts`` (lower-cased keys); `ConfigError` naming the option."""
    registry: dict[str, Any] = {}
    for key, value in opts.items():
        if not key.startswith("schema.registry."):
            continue
        setting = key[len("schema.registry.") :]
        if setting.endswith(".env"):
            name = value
            if not name.isascii() or not name.replace("_", "").isalnum() or name[0].isdigit():
                raise ConfigError(
                    f"option {key!r} takes the *name* of an environment variable on the Spark "
                    "server (letters, digits, '_'), e.g. SR_AUTH"
                )
            registry[setting[: -len(".env")]] = env(name)
        elif is_secret_key(setting) or setting.startswith(("basic.auth.user", "bearer.auth")):
            raise ConfigError(
                f"option {key!r} carries a credential, and Spark logs and shows options; use "
                f"option('{key}.env', '<VARIABLE>') with the name of an environment variable "
                "set on the Spark server instead"
            )
        else:
            registry[setting] = value
    for key in opts:
        if key.startswith("avro.") and not (
            key.startswith(("avro.value.", "avro.key.")) and key.split(".", 2)[2] in _SIDE_KEYS
        ):
            raise ConfigError(
                f"unknown option {key!r}; the Avro options are "
                + ", ".join(k for k in AVRO_KNOWN if k.startswith("avro."))
            )
    return AvroSparkOptions(
        key_format=opts.get("kafka.key.format"),
        schema_registry=registry or None,
        avro=_side(opts, "value"),
        key_avro=_side(opts, "key"),
    )
