"""`KafkaSink`'s produce path (`Producing`): records into the open transaction — an Arrow chunk
encoded and handed to librdkafka by the core's producer without the GIL (`produce_arrow`),
records encoded beforehand (Avro, the redo log, a kept chunk) handed over by the same producer
(`produce_records`), Spark's routed shape a record at a time — the epoch markers and the flush
that prepares it, and the errors that name the failing row (docs/kafka.md, "Producing")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from laminar._core import encode_kafka
from laminar._faults import crash_point, fail_point
from laminar.errors import (
    AbortableError,
    LaminarError,
    RecordTooLargeError,
)
from laminar.kafka import _shape as shape
from laminar.kafka._avro import encode_avro
from laminar.kafka._base import PartSettings
from laminar.kafka._clients import Clients
from laminar.kafka._config import (
    DEFAULT_MESSAGE_MAX_BYTES,
)
from laminar.kafka._errors import (
    as_kafka_error,
)
from laminar.kafka._runtime import _Runtime

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

#: Rows per slice of a write: each slice is encoded (about 1 MiB at a time) and produced by one
#: call of the core's producer, whatever the batch size (docs/serialization.md, "Performance").
_CHUNK_ROWS = 65_536

#: What the core's producer answers for a record librdkafka refused: its error, its row (from the
#: call's first), its key and the size of its value.
Refused = tuple[KafkaError, int, bytes | None, int]


class Producing:
    """Producing an epoch's records through ``clients`` and finishing its writes, under the
    sink's settings (``cfg``)."""

    def __init__(self, cfg: PartSettings, clients: Clients) -> None:
        self.cfg = cfg
        self.clients = clients

    @property
    def rt(self) -> _Runtime:
        """The live state of the writing process (the open epoch's headers, topics, failures)."""
        return self.clients.rt

    def write(
        self,
        data: pa.Table | pa.RecordBatch,
        fmt: str,
        avro: Any,
        epoch: int,
        records_out: list[Any] | None,
        route: Callable[[Any, int, int, bool], None],
    ) -> Iterator[tuple[int, int]]:
        """Produces every row of ``data`` in slices of `_CHUNK_ROWS`, yielding each slice's
        records and payload bytes. One topic in JSON or raw values goes through the core
        (`produce_arrow`); Avro (``avro``: the write's plan), Spark's routed shape (``route``
        checks each routed slice first) and a write whose records are kept (``records_out``:
        the atomic group's redo log) are encoded into Python lists first."""
        row = 0
        for chunk in _arrow_chunks(data):
            first = row == 0
            if avro is None and fmt != "spark" and records_out is None:
                count, size = self.produce_arrow(chunk, fmt, epoch, row, first)
            else:
                records = (
                    encode_avro(chunk, avro, self.cfg.key)
                    if avro is not None
                    else encode_kafka(
                        chunk,
                        value_format=fmt,  # type: ignore[arg-type]
                        key=self.cfg.key,
                        value_column=self.cfg.value_column,
                        topic=self.cfg.topic,
                        headers=self.rt.headers,
                        first_row=row,
                    )
                )
                count, size = records.num_rows, records.total_bytes
                if count == 0:
                    continue
                routed = records if records.topics is not None else None
                if routed is not None:
                    route(routed, epoch, row, records_out is not None)
                self.produce(records.values, records.keys, epoch, row, first, routed)
                if records_out is not None:
                    records_out.append(records)
            if count:
                row += count
                yield count, size

    def produce_arrow(
        self, chunk: pa.RecordBatch | pa.Table, fmt: str, epoch: int, first_row: int, first: bool
    ) -> tuple[int, int]:
        """Encodes ``chunk`` (one topic, JSON or raw values) and produces every row, in the
        core without the GIL; the crash point ``kafka.mid_produce`` halfway through the first
        chunk. Returns the records and their payload bytes."""
        half = chunk.num_rows // 2
        parts = [chunk.slice(0, half), chunk.slice(half)] if first else [chunk]
        rows = size = 0
        for i, part in enumerate(parts):
            if i:
                crash_point("kafka.mid_produce")
            count, nbytes, refused = self.rt.producer.produce_arrow(
                part,
                topic=self.cfg.topic,
                headers=self.rt.headers,
                value_format=fmt,
                key=self.cfg.key,
                value_column=self.cfg.value_column,
                timeout=self.cfg.flush_timeout_s,
            )
            rows, size = rows + count, size + nbytes
            if refused is not None:
                raise self.refused(refused, epoch, first_row + rows - count)
        return rows, size

    def produce(
        self,
        values: list[bytes | None],
        keys: list[bytes | None] | None,
        epoch: int,
        first_row: int,
        first_chunk: bool,
        routed: Any = None,
    ) -> None:
        """Produces records encoded beforehand (``routed``: Spark's shape, each row to its own
        topic, partition and headers); the crash point ``kafka.mid_produce`` halfway through the
        first chunk."""
        ranges = (
            [(0, len(values) // 2), (len(values) // 2, len(values))]
            if first_chunk
            else [(0, len(values))]
        )
        for i, (start, stop) in enumerate(ranges):
            if i:
                crash_point("kafka.mid_produce")
            if routed is None:
                _, _, refused = self.rt.producer.produce_records(
                    values[start:stop],
                    keys[start:stop] if keys is not None else None,
                    topic=self.cfg.topic,
                    headers=self.rt.headers,
                    timeout=self.cfg.flush_timeout_s,
                )
                if refused is not None:
                    raise self.refused(refused, epoch, first_row + start)
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
                    len(f.value or b""),
                    header_bytes=f.header_bytes,
                    topic=f.topic,
                ) from f.error

    def refused(self, refused: Refused, epoch: int, first_row: int) -> LaminarError:
        """The error for a record the core's producer could not hand over: a queue that stayed
        full (the brokers do not acknowledge), or librdkafka's refusal of that row."""
        error, offset, key, size = refused
        if error.code() == KafkaError._QUEUE_FULL:
            return self.queue_full(epoch)
        cause = KafkaException(error)
        err = self.produce_error(cause, epoch, first_row + offset, key, size)
        err.__cause__ = cause
        return err

    def wait_for_room(self, epoch: int) -> None:
        """The local queue is full: serve callbacks until the broker acknowledged some."""
        deadline = time.monotonic() + self.cfg.flush_timeout_s
        queued = len(self.rt.producer)
        while time.monotonic() < deadline:
            self.rt.producer.poll(0.005)
            if len(self.rt.producer) < queued:
                return
        raise self.queue_full(epoch)

    def queue_full(self, epoch: int) -> AbortableError:
        """The error for a local queue that stayed full for ``flush_timeout_s``."""
        return AbortableError(
            f"the producer's queue stayed full for {self.cfg.flush_timeout_s:g} s: the brokers at "
            f"{self.cfg.bootstrap_servers} do not acknowledge records (see flush_timeout_s)",
            sink_id=self.cfg.sink_id,
            epoch=epoch,
        )

    def produce_error(
        self,
        e: KafkaException,
        epoch: int,
        row: int,
        key: bytes | None,
        value_size: int,
        *,
        header_bytes: int | None = None,
        topic: str | None = None,
    ) -> LaminarError:
        """``e`` for row ``row`` (its key, the size of its value) as a `LaminarError`;
        ``topic``: a routed row's own topic."""
        kafka_error = as_kafka_error(e)
        if kafka_error is not None and kafka_error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            if header_bytes is None:  # Laminar's own headers only
                header_bytes = shape.headers_size(self.rt.headers)
            size = value_size + len(key or b"") + header_bytes
            limit = self.cfg.producer_config.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES)
            return RecordTooLargeError(
                f"row {row} (key {_show_key(key)}) is a record of {size:,} bytes (key, value "
                f"and {header_bytes:,} bytes of headers), larger than message.max.bytes={limit}; "
                "raise message.max.bytes in producer_config (and the topic's max.message.bytes "
                "on the broker) or write smaller rows",
                sink_id=self.cfg.sink_id,
                epoch=epoch,
            )
        hint = f"row {row} (key {_show_key(key)})"
        return self.cfg.error(e, "produce", epoch, self.rt, hint=hint, topic=topic)

    def finish_writes(self, epoch: int) -> None:
        """Epoch marker, then flush: after this every record is acknowledged by the brokers."""
        offsets = [(t, 0, epoch) for t in [self.cfg.topic, *sorted(self.rt.epoch_topics)]]
        self.clients.retrying(
            "send_offsets_to_transaction", epoch, self.cfg.commit_timeout_s, offsets
        )
        crash_point("kafka.after_markers")
        remaining = self.rt.producer.flush(self.cfg.flush_timeout_s)
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
            raise self.cfg.error(
                KafkaException(error), "delivery", epoch, self.rt, hint=hint, topic=topic
            )
        if self.rt.purged:
            # librdkafka dropped records of this epoch: its transaction failed after the marker
            # went in (an AddPartitionsToTxn refused, say). The transaction's own error says why:
            # the next transactional call returns it; the epoch fails either way, never prepared
            # without its records.
            self.clients.retrying(
                "send_offsets_to_transaction", epoch, self.cfg.commit_timeout_s, offsets
            )
            raise AbortableError(
                f"{self.rt.purged} record(s) of epoch {epoch} were dropped by the producer before "
                f"the brokers at {self.cfg.bootstrap_servers} acknowledged them: the transaction "
                "failed; the epoch is aborted and can be written again",
                sink_id=self.cfg.sink_id,
                epoch=epoch,
            )
        if remaining:
            raise AbortableError(
                f"{remaining} record(s) were not acknowledged within flush_timeout_s="
                f"{self.cfg.flush_timeout_s:g} s by the brokers at {self.cfg.bootstrap_servers}",
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
