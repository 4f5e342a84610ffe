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

__all__ = [
    "AbortableError",
    "AuthorizationError",
    "ConfigError",
    "DataError",
    "EpochRecord",
    "EpochTracker",
    "FatalError",
    "FencedError",
    "IllegalStateError",
    "InDoubtError",
    "InvalidStateEncoding",
    "LaminarError",
    "PreparedTxnState",
    "TransactionState",
    "TransactionalSinkMetrics",
    "__version__",
]
