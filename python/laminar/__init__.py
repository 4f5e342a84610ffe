"""Laminar: exactly-once transactional sinks from Spark Structured Streaming to Kafka and
PostgreSQL.

The sinks and the writer (`KafkaSink`, `PostgresSink`, `exactly_once`, ...) and the
subpackages are imported on first use (PEP 562 ``__getattr__``): ``import laminar`` and
``import laminar.spark.source`` stay light, because Spark starts fresh driver-side Python
processes for every ``format("laminar")`` micro-batch and each one imports laminar
(docs/spark.md, "Throughput"). ``laminar.KafkaSink`` and ``from laminar import KafkaSink`` work as
before.
"""

from typing import TYPE_CHECKING, Any

from laminar import _lazy
from laminar._core import (
    EpochRecord,
    EpochTracker,
    KafkaRecords,
    KafkaRecordStream,
    PgCopyBuffer,
    PreparedTxnState,
    TransactionalSinkMetrics,
    TransactionState,
    __version__,
    check_kafka_schema,
    check_pg_copy_schema,
    encode_kafka,
    encode_pg_copy,
    iter_kafka,
)
from laminar._settings import EnvValue, env
from laminar._sink import TransactionalSink
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
    RecordTooLargeError,
)

if TYPE_CHECKING:
    from laminar.kafka.registry import AvroOptions
    from laminar.kafka.sink import KafkaSink
    from laminar.postgres.sink import PostgresSink
    from laminar.spark.writer import EpochResult, ExactlyOnceWriter, exactly_once

#: Public names imported on first use, and the module each one lives in.
_LAZY = {
    "AvroOptions": "laminar.kafka.registry",
    "KafkaSink": "laminar.kafka.sink",
    "PostgresSink": "laminar.postgres.sink",
    "EpochResult": "laminar.spark.writer",
    "ExactlyOnceWriter": "laminar.spark.writer",
    "exactly_once": "laminar.spark.writer",
}

__all__ = [
    "AbortableError",
    "AuthorizationError",
    "AvroOptions",
    "ConfigError",
    "DataError",
    "EnvValue",
    "EpochRecord",
    "EpochResult",
    "EpochTracker",
    "ExactlyOnceWriter",
    "FatalError",
    "FencedError",
    "IllegalStateError",
    "InDoubtError",
    "InvalidStateEncoding",
    "KafkaRecordStream",
    "KafkaRecords",
    "KafkaSink",
    "LaminarError",
    "PgCopyBuffer",
    "PostgresSink",
    "PreparedTxnState",
    "RecordTooLargeError",
    "TransactionState",
    "TransactionalSink",
    "TransactionalSinkMetrics",
    "__version__",
    "check_kafka_schema",
    "check_pg_copy_schema",
    "encode_kafka",
    "encode_pg_copy",
    "env",
    "exactly_once",
    "iter_kafka",
]


def __getattr__(name: str) -> Any:
    """A lazy public name (`_LAZY`), or a subpackage not imported yet (``laminar.spark``,
    ``laminar.protocol``, ...: an eager ``import laminar`` used to load them all)."""
    return _lazy.attribute(__name__, name, _LAZY)


def __dir__() -> list[str]:
    return _lazy.names(__name__, _LAZY)
