"""Laminar: exactly-once transactional sinks from Spark Structured Streaming to Kafka and
PostgreSQL."""

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
from laminar.kafka.sink import KafkaSink
from laminar.postgres.sink import PostgresSink
from laminar.spark.writer import EpochResult, ExactlyOnceWriter, exactly_once

__all__ = [
    "AbortableError",
    "AuthorizationError",
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
