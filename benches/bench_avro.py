"""Avro values in the Confluent wire format: the core's Arrow → Avro path against the per-record
serializers users would call, side by side in one run (`benches.gates.interleaved`: every
contender once per round, the order rotated, best round of N each).

- laminar: ``encode_kafka_avro`` on the Arrow table (the sink's encoding step: every row's framed
  payload as ``bytes``, the GIL released while it encodes);
- confluent-kafka's ``AvroSerializer`` called per record, on the rows as dicts (``to_pylist``
  done beforehand, untimed: the peer's serialization alone), with the same registered schema;
- fastavro's ``schemaless_writer`` per record into a reused buffer, plus the 5-byte prefix: the
  fastest pure per-record path there is in Python (AvroSerializer's own engine, without its
  per-call work).

The rows are `make_peer_batch`'s (int64, text, decimal(18,2), timestamp[us, UTC], float64), the
writer schema the one Laminar derives, registered once in the session's registry (untimed).
Gates: laminar over each peer >= 10x (the issue's goal; measured 149x and 58x on the 2-core
machine while it compiled, docs/benchmarks.md). The three give the same bytes (checked first).
``LAMINAR_BENCH_QUICK=1`` (``./dev test``) shrinks the batch and the rounds.

    .venv/bin/python -m pytest benches/bench_avro.py -p no:cacheprovider -s
"""

from __future__ import annotations

import io
import json
import os
import struct
from typing import Any

import pyarrow as pa
import pytest
from benches.gates import Contender, Gate, best, interleaved, spread
from benches.serialize_data import make_peer_batch

from laminar._core import avro_value_schema, encode_kafka_avro

QUICK = os.environ.get("LAMINAR_BENCH_QUICK") == "1"
ROWS = 20_000 if QUICK else 100_000
ROUNDS = 3 if QUICK else 5
#: Laminar's rows/s over each peer's, at least (enforced).
GATES = {"AvroSerializer per record": 10.0, "fastavro schemaless_writer per record": 10.0}


@pytest.fixture(scope="module")
def rows_and_schema(schema_registry: Any) -> tuple[pa.Table, str, int]:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    table = make_peer_batch(ROWS)
    schema = avro_value_schema(table.schema, name="Order", namespace="bench")
    client = SchemaRegistryClient({"url": schema_registry.url})
    schema_id = client.register_schema("bench-avro-value", Schema(schema, "AVRO"))
    return table, schema, int(schema_id)


def bench_avro_encoding_against_per_record_serializers(
    gate: Gate, schema_registry: Any, rows_and_schema: tuple[pa.Table, str, int]
) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from fastavro import parse_schema, schemaless_writer

    table, schema, schema_id = rows_and_schema
    dicts = table.to_pylist()
    client = SchemaRegistryClient({"url": schema_registry.url})
    serializer = AvroSerializer(
        client,
        schema,
        conf={"auto.register.schemas": False, "use.latest.version": True},
    )
    context = SerializationContext("bench-avro", MessageField.VALUE)
    parsed = parse_schema(json.loads(schema))
    prefix = b"\x00" + struct.pack(">I", schema_id)

    def laminar() -> list[bytes | None]:
        return encode_kafka_avro(table, value_schema=schema, value_schema_id=schema_id).values

    def confluent() -> list[bytes | None]:
        return [serializer(row, context) for row in dicts]

    def fastavro() -> list[bytes]:
        out = []
        buffer = io.BytesIO()
        for row in dicts:
            buffer.seek(0)
            buffer.truncate()
            buffer.write(prefix)
            schemaless_writer(buffer, parsed, row)
            out.append(buffer.getvalue())
        return out

    # The same bytes from all three (then the timing means something).
    ours = laminar()
    assert ours[:50] == confluent()[:50] == fastavro()[:50]
    assert len(ours) == ROWS

    seconds = interleaved(
        {
            "laminar": Contender(laminar),
            "AvroSerializer per record": Contender(confluent),
            "fastavro schemaless_writer per record": Contender(fastavro),
        },
        ROUNDS,
    )
    lines = [f"Avro encoding, {ROWS:,} rows (best of {ROUNDS}):"]
    for name, times in seconds.items():
        lines.append(f"  {name:<40} {ROWS / best(times):>12,.0f} rows/s  ({spread(times)})")
    print("\n".join(lines))
    failures = []
    for peer, at_least in GATES.items():
        ratio = best(seconds[peer]) / best(seconds["laminar"])
        try:
            gate(
                f"avro encode: laminar / {peer}",
                ratio,
                at_least=at_least,
                unit="x",
                detail=(
                    f"{ROWS:,} rows, best of {ROUNDS}: laminar {spread(seconds['laminar'])}; "
                    f"peer {spread(seconds[peer])}"
                ),
            )
        except AssertionError as e:
            failures.append(str(e))
    if failures:
        raise AssertionError("\n".join(failures))
