"""`KafkaSink`'s produce path (`Producing`): records into the open transaction (positional
``produce`` where confluent-kafka allows it, waiting for room when the local queue is full), the
epoch markers and the flush that prepares it, and the errors that name the failing row."""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import repeat
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from laminar._faults import crash_point, fail_point
from laminar.errors import (
    AbortableError,
    LaminarError,
    RecordTooLargeError,
)
from laminar.kafka import _shape as shape
from laminar.kafka._base import _SinkBase
from laminar.kafka._clients import Clients
from laminar.kafka._config import (
    DEFAULT_MESSAGE_MAX_BYTES,
)
from laminar.kafka._errors import (
    as_kafka_error,
)
from laminar.kafka._runtime import _Runtime

#: Rows per slice encoded at once. Not overlapped with the produce loop (as the COPY path is):
#: the loop holds the GIL, and a worker building the next slice's `bytes` made the write path
#: 1.4x slower, not faster (docs/serialization.md, "Performance").
_CHUNK_ROWS = 65_536


class Producing:
    """Producing an epoch's records through ``clients`` and finishing its writes, under the
    sink's settings (``cfg``)."""

    def __init__(self, cfg: _SinkBase, clients: Clients) -> None:
        self.cfg = cfg
        self.clients = clients

    @property
    def rt(self) -> _Runtime:
        """The live state of the writing process (the open epoch's headers, topics, failures)."""
        return self.clients.rt

    def produce(
        self,
        values: list[bytes | None],
        keys: list[bytes | None] | None,
        epoch: int,
        first_row: int,
        first_chunk: bool,
        routed: Any = None,
    ) -> None:
        """Produces the rows (``routed``: Spark's shape, each row to its own topic, partition
        and headers); the crash point ``kafka.mid_produce`` halfway through the first chunk."""
        ranges = (
            [(0, len(values) // 2), (len(values) // 2, len(values))]
            if first_chunk
            else [(0, len(values))]
        )
        for i, (start, stop) in enumerate(ranges):
            if i:
                crash_point("kafka.mid_produce")
            if routed is None:
                self.produce_range(values, keys, epoch, first_row, start, stop)
                continue
            try:
                shape.produce_routed(
                    self.rt.producer.produce,
                    routed,
                    self.rt.headers,
                    start,
                    stop,
                    lambda: self.wait_for_room(epoch),
                )
            except shape.RoutedProduceError as f:
                row = first_row + start + f.offset
                raise self.produce_error(
                    f.error,
                    epoch,
                    row,
                    f.key,
                    f.value,
                    header_bytes=f.header_bytes,
                    topic=f.topic,
                ) from f.error

    def produce_range(
        self,
        values: list[bytes | None],
        keys: list[bytes | None] | None,
        epoch: int,
        first_row: int,
        start: int,
        stop: int,
    ) -> None:
        if start != 0 or stop != len(values):
            values = values[start:stop]
            keys = keys[start:stop] if keys is not None else None
        pairs = zip(keys, values, strict=True) if keys is not None else zip(repeat(None), values)
        producer = self.rt.producer
        produce = producer.produce
        topic = self.cfg._topic
        headers = self.rt.headers
        key: bytes | None = None
        value: bytes | None = None
        try:
            if self.rt.positional_produce:
                # produce(topic, value, key, partition, callback, on_delivery, timestamp,
                # headers) positionally: about a third faster than keywords in confluent-kafka.
                try:
                    for key, value in pairs:
                        try:
                            produce(topic, value, key, -1, None, None, 0, headers)
                        except BufferError:
                            self.wait_for_room(epoch)
                            produce(topic, value, key, -1, None, None, 0, headers)
                    return
                except TypeError:
                    if len(producer) or value is not values[0]:
                        raise
                    self.rt.positional_produce = False  # another confluent-kafka argument order
                    pairs = (
                        zip(keys, values, strict=True)
                        if keys is not None
                        else zip(repeat(None), values)
                    )
            for key, value in pairs:
                try:
                    produce(topic, value, key, headers=headers)
                except BufferError:
                    self.wait_for_room(epoch)
                    produce(topic, value, key, headers=headers)
        except KafkaException as e:
            row = first_row + start + next((i for i, v in enumerate(values) if v is value), 0)
            raise self.produce_error(e, epoch, row, key, value) from e

    def wait_for_room(self, epoch: int) -> None:
        """The local queue is full: serve callbacks until the broker acknowledged some."""
        deadline = time.monotonic() + self.cfg._flush_timeout_s
        queued = len(self.rt.producer)
        while time.monotonic() < deadline:
            self.rt.producer.poll(0.005)
            if len(self.rt.producer) < queued:
                return
        raise AbortableError(
            f"the producer's queue stayed full for {self.cfg._flush_timeout_s:g} s: the brokers at "
            f"{self.cfg._bootstrap_servers} do not acknowledge records (see flush_timeout_s)",
            sink_id=self.cfg.sink_id,
            epoch=epoch,
        )

    def produce_error(
        self,
        e: KafkaException,
        epoch: int,
        row: int,
        key: bytes | None,
        value: bytes | None,
        *,
        header_bytes: int | None = None,
        topic: str | None = None,
    ) -> LaminarError:
        """``e`` for row ``row`` as a `LaminarError`; ``topic``: a routed row's own topic."""
        kafka_error = as_kafka_error(e)
        if kafka_error is not None and kafka_error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            if header_bytes is None:  # Laminar's own headers only
                header_bytes = shape.headers_size(self.rt.headers)
            size = len(value or b"") + len(key or b"") + header_bytes
            limit = self.cfg._producer_config.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES)
            return RecordTooLargeError(
                f"row {row} (key {_show_key(key)}) is a record of {size:,} bytes (key, value "
                f"and {header_bytes:,} bytes of headers), larger than message.max.bytes={limit}; "
                "raise message.max.bytes in producer_config (and the topic's max.message.bytes "
                "on the broker) or write smaller rows",
                sink_id=self.cfg.sink_id,
                epoch=epoch,
            )
        hint = f"row {row} (key {_show_key(key)})"
        return self.cfg._error(e, "produce", epoch, self.rt, hint=hint, topic=topic)

    def finish_writes(self, epoch: int) -> None:
        """Epoch marker, then flush: after this every record is acknowledged by the brokers."""
        offsets = [
            TopicPartition(t, 0, epoch) for t in [self.cfg._topic, *sorted(self.rt.epoch_topics)]
        ]
        self.clients.retrying(
            "send_offsets_to_transaction", epoch, self.cfg._commit_timeout_s, offsets
        )
        crash_point("kafka.after_markers")
        remaining = self.rt.producer.flush(self.cfg._flush_timeout_s)
        if fail_point("kafka.produce"):  # a record's delivery failed (the failover tests)
            timed_out = KafkaError(KafkaError._MSG_TIMED_OUT, "injected (LAMINAR_FAIL_AT)")
            self.rt.delivery_failures += 1
            self.rt.delivery_errors.append((timed_out, None, 0, None))
        if self.rt.delivery_errors:
            error, key, size, topic = self.rt.delivery_errors[0]
            hint = (
                f"{self.rt.delivery_failures} record(s) failed; the first has key {_show_key(key)} "
                f"and a {size:,}-byte value"
            )
            raise self.cfg._error(
                KafkaException(error), "delivery", epoch, self.rt, hint=hint, topic=topic
            )
        if remaining:
            raise AbortableError(
                f"{remaining} record(s) were not acknowledged within flush_timeout_s="
                f"{self.cfg._flush_timeout_s:g} s by the brokers at {self.cfg._bootstrap_servers}",
                sink_id=self.cfg.sink_id,
                epoch=epoch,
            )
        crash_point("kafka.after_flush")


# -- helpers ----------------------------------------------------------------------------------


def _show_key(key: bytes | None) -> str:
    if key is None:
        return "null"
    shown = key[:64].decode("utf-8", "backslashreplace")
    return repr(shown + ("…" if len(key) > 64 else ""))


def _arrow_chunks(data: pa.Table | pa.RecordBatch) -> Iterator[Any]:
    """``data`` in slices of at most ``_CHUNK_ROWS`` rows (zero-copy), so that encoding holds
    one slice's payloads at a time whatever the batch size."""
    if data.num_rows <= _CHUNK_ROWS:
        yield data
        return
    for offset in range(0, data.num_rows, _CHUNK_ROWS):
        yield data.slice(offset, _CHUNK_ROWS)
