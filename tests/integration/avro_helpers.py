"""Shared helpers of the Avro integration tests (not a test module): the independent reader,
confluent-kafka's ``AvroDeserializer`` over the registry's Confluent API."""

from __future__ import annotations

import struct
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext


def schema_id(payload: bytes) -> int:
    """The schema id of a Confluent-framed payload (magic byte 0, then 4 bytes big-endian)."""
    assert payload[0] == 0, f"not the Confluent wire format: magic byte {payload[0]}"
    return int(struct.unpack(">I", payload[1:5])[0])


class AvroReader:
    """Decodes Confluent-framed Avro values and keys with confluent-kafka's deserializer, the
    writer schema fetched from the registry by the id in each payload."""

    def __init__(self, url: str, topic: str) -> None:
        self.client = SchemaRegistryClient({"url": url})
        self.topic = topic
        self._deserializer = AvroDeserializer(self.client)

    def value(self, payload: bytes | None) -> Any:
        assert payload is not None
        return self._deserializer(payload, SerializationContext(self.topic, MessageField.VALUE))

    def key(self, payload: bytes | None) -> Any:
        if payload is None:
            return None
        return self._deserializer(payload, SerializationContext(self.topic, MessageField.KEY))
