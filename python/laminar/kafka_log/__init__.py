"""Compatibility path: ``laminar.kafka_log`` re-exports :mod:`laminar.kafka.log`.

The same public names (add, never rename); docs/engine.md, "Package layout". A package rather
than a module file, so the old file's path is free and git pairs that file with its new home as a
rename: edits made to it on other branches follow it there.
"""

from laminar.kafka.log import (
    WITNESS_CLOCK_SKEW_MS,
    ClientSecurity,
    Compression,
    ControlType,
    EndTxnError,
    KafkaLogClient,
    KafkaLogError,
    LogRecord,
    PartitionLog,
    ReadStats,
    RecordBatch,
    UnsupportedSecurityError,
    WitnessResult,
    committed_records,
    decode_record_batches,
    read_committed,
    read_partition,
)

__all__ = [
    "WITNESS_CLOCK_SKEW_MS",
    "ClientSecurity",
    "Compression",
    "ControlType",
    "EndTxnError",
    "KafkaLogClient",
    "KafkaLogError",
    "LogRecord",
    "PartitionLog",
    "ReadStats",
    "RecordBatch",
    "UnsupportedSecurityError",
    "WitnessResult",
    "committed_records",
    "decode_record_batches",
    "read_committed",
    "read_partition",
]
