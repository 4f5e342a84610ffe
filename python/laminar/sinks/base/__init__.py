"""Compatibility path: the code lives in :mod:`laminar._sink` (docs/engine.md, "Package layout").

``laminar.sinks.base`` stays importable with the same public names (add, never rename). It is a package
rather than a module file so that the old file's path is free: git pairs the old file with its
new home as a rename, and edits made on other branches to the old file follow it there.
"""

from laminar._sink import (
    ArrowData,
    EpochTracker,
    PreparedTxnState,
    TransactionState,
    TransactionalSink,
    TransactionalSinkMetrics,
)

__all__ = [
    "ArrowData",
    "EpochTracker",
    "PreparedTxnState",
    "TransactionState",
    "TransactionalSink",
    "TransactionalSinkMetrics",
]
