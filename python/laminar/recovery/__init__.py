"""Compatibility path: ``laminar.recovery`` re-exports :mod:`laminar.protocol.recovery`.

The same public names (add, never rename); docs/engine.md, "Package layout". A package rather
than a module file, so the old file's path is free and git pairs that file with its new home as a
rename: edits made to it on other branches follow it there.
"""

from laminar.protocol.recovery import (
    DecisionRow,
    delete_redo,
    end_txn,
    log,
    read_decisions,
    read_redo,
    redo_exists,
    redo_from_log,
    refusal_error,
    resolve_kafka_sinks,
    settle_kafka_sinks,
)

__all__ = [
    "DecisionRow",
    "delete_redo",
    "end_txn",
    "log",
    "read_decisions",
    "read_redo",
    "redo_exists",
    "redo_from_log",
    "refusal_error",
    "resolve_kafka_sinks",
    "settle_kafka_sinks",
]
