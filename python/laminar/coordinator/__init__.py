"""Compatibility path: the code lives in :mod:`laminar.spark.writer` (docs/engine.md, "Package layout").

``laminar.coordinator`` stays importable with the same public names (add, never rename). It is a package
rather than a module file so that the old file's path is free: git pairs the old file with its
new home as a rename, and edits made on other branches to the old file follow it there.
"""

from laminar.spark.writer import (
    AbortableError,
    ArrowData,
    ConfigError,
    EpochResult,
    ExactlyOnceWriter,
    InDoubtError,
    KafkaSink,
    MAX_EPOCH,
    PostgresSink,
    TransactionalSink,
    check_epoch,
    exactly_once,
    is_deferred,
    log,
    map_pg_error,
    read_once,
    reduce_checked,
    write_single,
)

__all__ = [
    "AbortableError",
    "ArrowData",
    "ConfigError",
    "EpochResult",
    "ExactlyOnceWriter",
    "InDoubtError",
    "KafkaSink",
    "MAX_EPOCH",
    "PostgresSink",
    "TransactionalSink",
    "check_epoch",
    "exactly_once",
    "is_deferred",
    "log",
    "map_pg_error",
    "read_once",
    "reduce_checked",
    "write_single",
]
