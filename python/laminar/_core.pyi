"""Type stubs for the private Rust extension `laminar._core`."""

from collections.abc import Sequence
from typing import Any, Literal, final

# Each section below adds its own names (`__all__ += [...]`), so sections merge independently.
__all__ = ["__version__"]

__version__: str

# --- serialization (Arrow → Kafka payloads, PostgreSQL COPY BINARY) --------------------------

__all__ += [
    "KafkaRecordStream",
    "KafkaRecords",
    "PgCopyBuffer",
    "check_kafka_schema",
    "check_pg_copy_schema",
    "encode_kafka",
    "encode_pg_copy",
    "iter_kafka",
]

_ValueFormat = Literal["json", "raw"]

@final
class KafkaRecords:
    """The Kafka payloads of one batch, ready for ``Producer.produce``.

    ``values[i]`` and ``keys[i]`` feed ``produce(topic, value=values[i], key=keys[i])``. The
    payloads are plain ``bytes`` built in Rust, the fastest form to hand to confluent-kafka.
    """

    @property
    def values(self) -> list[bytes | None]:
        """One value per row; ``None`` only for a null raw value (a tombstone)."""
    @property
    def keys(self) -> list[bytes | None] | None:
        """One key per row (``None`` for a null key), or ``None`` when no key column was given."""
    @property
    def num_rows(self) -> int:
        """Number of records."""
    @property
    def total_bytes(self) -> int:
        """Bytes of all values and keys together."""
    @property
    def value_bytes(self) -> int:
        """Bytes of all values."""
    @property
    def key_bytes(self) -> int:
        """Bytes of all keys."""
    def __len__(self) -> int: ...

@final
class KafkaRecordStream:
    """``(key, value)`` pairs of a batch, encoded one chunk (about 1 MiB) at a time as they are
    consumed: whatever the batch size, only one chunk is buffered besides the pair in hand.

    ``for key, value in stream: producer.produce(topic, value=value, key=key)``. ``key`` is
    ``None`` without a key column or for a null key; ``value`` is ``None`` only for a null raw
    value. Iterate it from one thread.
    """

    @property
    def num_rows(self) -> int:
        """Number of records in the whole stream."""
    def __iter__(self) -> KafkaRecordStream: ...
    def __next__(self) -> tuple[bytes | None, bytes | None]: ...
    def __length_hint__(self) -> int: ...

@final
class PgCopyBuffer:
    """A complete ``COPY … FROM STDIN (FORMAT BINARY)`` stream: header, rows, trailer."""

    @property
    def chunks(self) -> list[bytes]:
        """The stream in chunks of about 1 MiB; write them in order with ``copy.write``."""
    @property
    def columns(self) -> list[str]:
        """Target column names in stream order, for ``COPY table (…)``."""
    @property
    def num_rows(self) -> int:
        """Rows in the stream."""
    @property
    def total_bytes(self) -> int:
        """Total bytes over all chunks."""
    def to_bytes(self) -> bytes:
        """The whole stream as one ``bytes`` (a copy; prefer writing ``chunks``)."""

def encode_kafka(
    data: Any,
    *,
    value_format: _ValueFormat = "json",
    key: str | None = None,
    value_column: str | None = None,
) -> KafkaRecords:
    """Encodes every row of an Arrow table as a Kafka ``(key, value)`` payload.

    ``data`` is a pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader``, or any object with
    ``__arrow_c_stream__`` / ``__arrow_c_array__``; it is read without copying and encoded with
    the GIL released. ``value_format="json"`` writes one JSON object per row (rules in
    ``docs/serialization.md``); ``"raw"`` uses the bytes of ``value_column`` (default: the only
    column). ``key`` names the key column: strings as UTF-8, binary as is, integers as decimal
    text, anything else as its JSON text; a null key gives ``None``.

    Raises ``ConfigError`` (unknown column, unsupported type — checked before anything is
    encoded) and ``DataError`` (malformed Arrow data).
    """

def check_kafka_schema(
    schema: Any,
    *,
    value_format: _ValueFormat = "json",
    key: str | None = None,
    value_column: str | None = None,
) -> None:
    """Checks that data of this schema can be encoded with these options, without encoding.

    ``schema`` is a pyarrow ``Schema`` (or anything with ``__arrow_c_schema__`` or ``.schema``).
    Raises ``ConfigError`` naming the column and its type.
    """

def iter_kafka(
    data: Any,
    *,
    value_format: _ValueFormat = "json",
    key: str | None = None,
    value_column: str | None = None,
) -> KafkaRecordStream:
    """Like :func:`encode_kafka`, but streams the ``(key, value)`` pairs as they are consumed.

    The schema and the data are checked before this returns (same errors as ``encode_kafka``);
    encoding then runs chunk by chunk, with the GIL released, as the stream is iterated. Use it for
    large batches: the memory held per record is the record in hand, not the whole batch.
    """

def encode_pg_copy(
    data: Any,
    columns: Sequence[tuple[str, str, int]],
    *,
    source_columns: Sequence[str] | None = None,
) -> PgCopyBuffer:
    """Encodes every row of an Arrow table as a PostgreSQL COPY BINARY stream.

    ``columns`` are the target table's ``(name, typname, atttypmod)`` in COPY order, as read from
    the catalog (``int4``, ``varchar``, ``_int4`` for arrays…). ``source_columns[i]`` names the
    Arrow column that feeds ``columns[i]`` (default: the same name). Every value is checked before
    the buffer is returned, so nothing is sent for a batch that cannot be written.

    Raises ``ConfigError`` (missing column, incompatible types — names the column and both
    types) and ``DataError`` (a value that does not fit its column — names the column and row).
    """

def check_pg_copy_schema(
    schema: Any,
    columns: Sequence[tuple[str, str, int]],
    *,
    source_columns: Sequence[str] | None = None,
) -> None:
    """Checks that an Arrow schema can feed the target columns, without encoding.

    Raises ``ConfigError`` naming the column and both types.
    """
