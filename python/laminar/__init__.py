"""Laminar: exactly-once transactional sinks from Spark Structured Streaming to Kafka and PostgreSQL."""

from laminar._core import (
    KafkaRecords,
    KafkaRecordStream,
    PgCopyBuffer,
    __version__,
    check_kafka_schema,
    check_pg_copy_schema,
    encode_kafka,
    encode_pg_copy,
    iter_kafka,
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
    "FatalError",
    "FencedError",
    "IllegalStateError",
    "InDoubtError",
    "InvalidStateEncoding",
    "KafkaRecordStream",
    "KafkaRecords",
    "LaminarError",
    "PgCopyBuffer",
    "__version__",
    "check_kafka_schema",
    "check_pg_copy_schema",
    "encode_kafka",
    "encode_pg_copy",
    "iter_kafka",
]
