"""`PostgresSink`'s settings: the constructor's checks (all but the DSN's, `_session`), kept in one
frozen `Settings` value that each part of the sink is given, and the base holding the core's
machine of the sink's transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from laminar._core import SinkTransaction, postgres_answer_timeout
from laminar._sink import TransactionalSink
from laminar.errors import ConfigError
from laminar.postgres import _upsert as _pg_upsert
from laminar.postgres._names import TableName, parse_table_name, render_identifier
from laminar.postgres._steps import DEFAULT_SLICE_BYTES

__all__ = ["DEFAULT_SCHEMA", "DEFAULT_SLICE_BYTES", "ColumnsSpec", "Settings", "parse_settings"]

#: The schema an unqualified table name is assumed to live in for the default sink id.
DEFAULT_SCHEMA = "public"

ColumnsSpec = Sequence[str] | Mapping[str, str] | None


@dataclass(frozen=True)
class Settings:
    """What a `PostgresSink` is configured with, checked: no secret, nothing live (it is pickled
    to executors with the sink)."""

    sink_id: str
    table_name: TableName
    columns: list[str] | dict[str, str] | None
    mode: str
    key: tuple[str, ...] | None
    #: Whether ``sink_id`` is the default (the table's schema-qualified name).
    sink_id_defaulted: bool
    two_phase_part: int | None
    connect_timeout_s: float
    slice_bytes: int
    #: How long the server may leave one answer outstanding (docs/postgres.md, "A hung server").
    statement_timeout_s: float = 30.0

    @property
    def connect_timeout(self) -> int:
        """libpq's ``connect_timeout``: whole seconds, at least one."""
        return max(1, round(self.connect_timeout_s))

    @property
    def answer_timeout_s(self) -> float:
        """The performer's deadline on one wait for the server's answer (the core's rule,
        `laminar._core.postgres_answer_timeout`)."""
        return postgres_answer_timeout(self.statement_timeout_s)


def parse_settings(
    table: str,
    columns: ColumnsSpec,
    sink_id: str | None,
    *,
    mode: str,
    key: str | Sequence[str] | None,
    two_phase_part: int | None,
    connect_timeout_s: float,
    slice_bytes: int,
    statement_timeout_s: float = 30.0,
) -> Settings:
    """The constructor's arguments checked (`ConfigError` naming the argument and the fix)."""
    table_name = parse_table_name(table)
    normalised = _normalise_columns(columns)
    mode, upsert_key = _pg_upsert.parse_mode(mode, key)
    if sink_id is None:
        schema = table_name.schema or DEFAULT_SCHEMA
        sink_id = f"{render_identifier(schema)}.{render_identifier(table_name.name)}"
        defaulted = True
    elif not isinstance(sink_id, str) or not sink_id:
        raise ConfigError("sink_id must be a non-empty string (or None for the table name)")
    elif "\x00" in sink_id or not _is_utf8(sink_id):
        raise ConfigError(
            f"sink_id {sink_id!r} holds a NUL or a lone surrogate, which PostgreSQL cannot "
            "store (its gids and rows name the sink); use printable text"
        )
    else:
        defaulted = False
    if two_phase_part is not None and (
        isinstance(two_phase_part, bool) or not isinstance(two_phase_part, int)
    ):
        raise ConfigError(f"two_phase_part must be an int >= 0, got {two_phase_part!r}")
    if two_phase_part is not None and two_phase_part < 0:
        raise ConfigError(f"two_phase_part must be >= 0, got {two_phase_part}")
    for name, value in (
        ("connect_timeout_s", connect_timeout_s),
        ("statement_timeout_s", statement_timeout_s),
    ):
        if not isinstance(value, int | float) or not 0 < value < float("inf"):
            raise ConfigError(f"{name} must be a number of seconds > 0, got {value!r}")
    if slice_bytes < 1:
        raise ConfigError(f"slice_bytes must be >= 1, got {slice_bytes}")
    return Settings(
        sink_id=sink_id,
        table_name=table_name,
        columns=normalised,
        mode=mode,
        key=upsert_key,
        sink_id_defaulted=defaulted,
        two_phase_part=two_phase_part,
        connect_timeout_s=connect_timeout_s,
        slice_bytes=slice_bytes,
        statement_timeout_s=float(statement_timeout_s),
    )


class _SinkBase(TransactionalSink):
    """The base of `PostgresSink`: its settings and the partition its machine writes as."""

    _settings: Settings
    _txn: SinkTransaction | None

    @property
    def _two_phase_part(self) -> int | None:
        """The partition of a scale-out participant, or None (`Settings.two_phase_part`)."""
        return self._settings.two_phase_part

    @property
    def _machine_participant(self) -> int | None:
        """A scale-out participant's machine only ends an epoch by preparing
        (`TransactionalSink._machine`)."""
        return self._two_phase_part


def _normalise_columns(columns: ColumnsSpec) -> list[str] | dict[str, str] | None:
    if columns is None:
        return None
    if isinstance(columns, Mapping):
        out = {}
        for key, value in columns.items():
            if not isinstance(key, str) or not isinstance(value, str) or not key or not value:
                raise ConfigError(
                    f"columns= maps Arrow column names to column names (non-empty strings); got "
                    f"{key!r}: {value!r}"
                )
            out[key] = value
        return out
    if isinstance(columns, str | bytes) or not isinstance(columns, Sequence):
        raise ConfigError(
            "columns= must be None, a list of column names (one per Arrow column, in order) or "
            f"a mapping {{arrow_name: column_name}}, not {type(columns).__name__}"
        )
    names = list(columns)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"columns= lists column names (non-empty strings); got {name!r}")
    return names


def _is_utf8(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8 (no lone surrogates, as ``os.fsdecode`` makes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
