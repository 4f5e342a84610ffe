"""The records side of `laminar.kafka.log`: what a read returns (`RecordBatch`, `PartitionLog`,
`ReadStats`, `WitnessResult`, the codec and marker enums) and the two pure functions over record
batches, `decode_record_batches` and `committed_records`, both done by the core (``laminar._core``,
module ``kafka``). Re-exported by `laminar.kafka.log`, their public home.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum

from laminar import _core
from laminar._core import LogRecord

__all__ = [
    "Compression",
    "ControlType",
    "PartitionLog",
    "ReadStats",
    "RecordBatch",
    "WitnessResult",
    "batch_of",
    "committed_records",
    "decode_record_batches",
]


class Compression(IntEnum):
    """The compression codec of a record batch (attributes bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class ControlType(IntEnum):
    """What a control record marks: the end of a transaction."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True)
class RecordBatch:
    """A decoded record batch (message format v2)."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    compression: Compression
    transactional: bool
    #: The data records; empty for a control batch.
    records: tuple[LogRecord, ...]
    #: For a control batch: what it marks (commit or abort); ``None`` for data.
    control: ControlType | None = None

    @property
    def is_control(self) -> bool:
        """Whether this batch is a transaction marker."""
        return self.control is not None


@dataclass
class PartitionLog:
    """What one partition holds between two offsets, transactions resolved."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    #: Records of committed transactions and non-transactional records, in offset order.
    committed: list[LogRecord] = field(default_factory=list)
    #: Records of aborted transactions (including those of fenced producers).
    aborted: list[LogRecord] = field(default_factory=list)
    #: Records of transactions with no marker yet (open, or abandoned by a dead producer).
    open: list[LogRecord] = field(default_factory=list)
    #: Offsets of the commit and abort markers seen.
    commit_markers: list[int] = field(default_factory=list)
    abort_markers: list[int] = field(default_factory=list)


@dataclass
class ReadStats:
    """What a client read: requests sent, and of the fetches, answers, bytes, batches, records."""

    requests: int = 0
    fetches: int = 0
    bytes: int = 0
    batches: int = 0
    records: int = 0

    def add(self, scan: tuple[int, int, int, int]) -> None:
        """Adds a scan's ``(fetches, bytes, batches, records)``."""
        self.fetches += scan[0]
        self.bytes += scan[1]
        self.batches += scan[2]
        self.records += scan[3]


@dataclass(frozen=True)
class WitnessResult:
    """What `KafkaLogClient.witness` found (docs/protocol.md §1, step 5)."""

    #: The highest epoch among the sink's committed records, if any was found.
    epoch: int | None
    #: Partitions whose read reached the limit without a record of the sink and that the time
    #: bound could not settle: non-empty means the answer is not proven.
    undecided: tuple[int, ...]
    #: Partitions of the topic, and those that held records.
    partitions: int
    nonempty: int
    #: What the search read.
    read: ReadStats

    @property
    def conclusive(self) -> bool:
        """Whether ``epoch`` is proven to be the sink's last committed epoch."""
        return not self.undecided


def batch_of(topic: str, partition: int, row: tuple) -> RecordBatch:  # type: ignore[type-arg]
    base, last, pid, epoch, sequence, codec, transactional, control, records = row
    return RecordBatch(
        topic=topic,
        partition=partition,
        base_offset=base,
        last_offset=last,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        compression=Compression(codec),
        transactional=transactional,
        records=tuple(records),
        control=None if control is None else ControlType(control),
    )


def decode_record_batches(
    data: bytes, *, topic: str = "", partition: int = 0, verify_crc: bool = True
) -> Iterator[RecordBatch]:
    """Decode the record batches in ``data`` (a Fetch response's ``records`` field).

    A trailing partial batch (a fetch cut at its byte limit) is ignored; anything else that does
    not decode raises `KafkaLogError`: a bad CRC, a message format other than v2, a corrupt body.
    """
    rows = _core.decode_record_batches(
        data, topic=topic, partition=partition, verify_crc=verify_crc
    )
    for row in rows:
        yield batch_of(topic, partition, row)


def committed_records(
    batches: Iterable[RecordBatch], *, topic: str = "", partition: int = 0, start_offset: int = 0
) -> PartitionLog:
    """Replay the markers of one partition's batches (in offset order) and sort its records into
    committed, aborted and open (rules in the module docstring). Records before
    ``start_offset`` (a fetch returns whole batches) are left out."""
    rows = [
        (
            None if b.control is None else int(b.control),
            b.producer_id,
            b.producer_epoch,
            b.transactional,
            b.base_offset,
            b.last_offset,
            [(r.offset, r) for r in b.records],
        )
        for b in batches
    ]
    committed, aborted, open_, commits, aborts, end = _core.replay_batches(rows, start_offset)
    return PartitionLog(
        topic, partition, start_offset, end, committed, aborted, open_, commits, aborts
    )
