"""Laminar: exactly-once transactional sinks from Spark Structured Streaming to Kafka and
PostgreSQL."""

from laminar._core import (
    EpochRecord,
    EpochTracker,
    PreparedTxnState,
    TransactionalSinkMetrics,
    TransactionState,
    __version__,
)
from laminar.coordinator import EpochResult, ExactlyOnceWriter, exactly_once
from laminar.errors import (
    AbortableError,
    AuthorizationError,
    ConfigError,
    DataError,
    FatalError,
    FencedError,
    IllegalStateError,
    InDoubtError,
    InvalidStateEncoding,
    LaminarError,
)
from laminar.sinks.base import TransactionalSink

__all__ = [
    "AbortableError",
    "AuthorizationError",
    "ConfigError",
    "DataError",
    "EpochRecord",
    "EpochResult",
    "EpochTracker",
    "ExactlyOnceWriter",
    "FatalError",
    "FencedError",
    "IllegalStateError",
    "InDoubtError",
    "InvalidStateEncoding",
    "LaminarError",
    "PreparedTxnState",
    "TransactionState",
    "TransactionalSink",
    "TransactionalSinkMetrics",
    "__version__",
    "exactly_once",
]
