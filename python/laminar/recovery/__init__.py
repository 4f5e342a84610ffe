"""Compatibility path: the code lives in :mod:`laminar.protocol.recovery` (docs/engine.md, "Package layout").

``laminar.recovery`` stays importable with the same public names (add, never rename). It is a package
rather than a module file so that the old file's path is free: git pairs the old file with its
new home as a rename, and edits made on other branches to the old file follow it there.
"""

from laminar.protocol.recovery import (
    DecisionRow,
    FatalError,
    KafkaDriver,
    KafkaRecoveryMachine,
    LaminarError,
    decode_redo,
    delete_redo,
    drive,
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
    "FatalError",
    "KafkaDriver",
    "KafkaRecoveryMachine",
    "LaminarError",
    "decode_redo",
    "delete_redo",
    "drive",
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
