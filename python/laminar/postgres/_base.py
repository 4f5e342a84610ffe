"""`PostgresSink`'s configuration and connection: the constructor's checks, the DSN read in the
writing process (``laminar.env``) and kept out of errors, the public properties, the one error
mapping (`_err`) and the connection each epoch and each read uses."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
from psycopg.conninfo import conninfo_to_dict

from laminar._core import SinkTransaction
from laminar._redact import parse_dsn, redact_dsn
from laminar._settings import Setting, is_deferred, resolve
from laminar._sink import TransactionalSink
from laminar.errors import (
    AbortableError,
    ConfigError,
    LaminarError,
)
from laminar.postgres import _upsert as _pg_upsert
from laminar.postgres._errors import map_pg_error
from laminar.postgres._names import (
    TableName,
    make_gid,
    parse_table_name,
    render_identifier,
)
from laminar.postgres._steps import (
    DEFAULT_SLICE_BYTES,
    CopyPlan,
    TableInfo,
)

#: The schema an unqualified table name is assumed to live in for the default sink id.
DEFAULT_SCHEMA = "public"

ColumnsSpec = Sequence[str] | Mapping[str, str] | None


class _SinkBase(TransactionalSink):
    """What every piece of `PostgresSink` reads: its settings, its connection and its errors."""

    def __init__(
        self,
        dsn: Setting,
        table: str,
        columns: ColumnsSpec = None,
        sink_id: str | None = None,
        *,
        mode: str = "append",
        key: str | Sequence[str] | None = None,
        two_phase_part: int | None = None,
        connect_timeout_s: float = 10.0,
        slice_bytes: int = DEFAULT_SLICE_BYTES,
    ) -> None:
        self._dsn_setting: Setting = dsn
        self._resolved_dsn: str | None = None
        self._password: str | None = None
        if not is_deferred(dsn):
            self._check_dsn(dsn)
        self._table_name = parse_table_name(table)
        self._columns = _normalise_columns(columns)
        self._mode, self._key = _pg_upsert.parse_mode(mode, key)
        if sink_id is None:
            schema = self._table_name.schema or DEFAULT_SCHEMA
            sink_id = f"{render_identifier(schema)}.{render_identifier(self._table_name.name)}"
            self._sink_id_defaulted = True
        elif not isinstance(sink_id, str) or not sink_id:
            raise ConfigError("sink_id must be a non-empty string (or None for the table name)")
        elif "\x00" in sink_id or not _is_utf8(sink_id):
            raise ConfigError(
                f"sink_id {sink_id!r} holds a NUL or a lone surrogate, which PostgreSQL cannot "
                "store (its gids and rows name the sink); use printable text"
            )
        else:
            self._sink_id_defaulted = False
        if two_phase_part is not None and (
            isinstance(two_phase_part, bool) or not isinstance(two_phase_part, int)
        ):
            raise ConfigError(f"two_phase_part must be an int >= 0, got {two_phase_part!r}")
        if two_phase_part is not None and two_phase_part < 0:
            raise ConfigError(f"two_phase_part must be >= 0, got {two_phase_part}")
        if connect_timeout_s <= 0:
            raise ConfigError(f"connect_timeout_s must be > 0, got {connect_timeout_s}")
        if slice_bytes < 1:
            raise ConfigError(f"slice_bytes must be >= 1, got {slice_bytes}")
        self._two_phase_part = two_phase_part
        self._connect_timeout_s = connect_timeout_s
        self._slice_bytes = slice_bytes
        super().__init__(sink_id)
        self._conn: psycopg.Connection[Any] | None = None
        self._table_info: TableInfo | None = None
        #: Whether the open transaction holds the table's lock and checked its definition.
        self._table_checked = False
        self._plan: tuple[pa.Schema, TableInfo, CopyPlan] | None = None
        self._ready: bool | None = None
        self._txn: SinkTransaction | None = None
        self._prepared_gid: str | None = None
        self._prepare_sent: str | None = None
        self._epoch_rows: int | None = 0
        self._epoch_bytes: int | None = 0
        self._max_prepared: int | None = None

    @property
    def _machine(self) -> SinkTransaction:
        """The core's machine of this sink's transaction (docs/engine.md, "The sink's
        transaction"), over `tracker`: each call asks it what to do and reports the outcome."""
        tracker = self.tracker
        if self._txn is None or self._txn.tracker is not tracker:
            self._txn = SinkTransaction(tracker, participant=self._two_phase_part)
        return self._txn

    # -- configuration ------------------------------------------------------------------------

    @property
    def dsn(self) -> Setting:
        """The connection string as given (with its password: do not log it), or the
        ``laminar.env(...)`` it is read from."""
        return self._dsn_setting

    @property
    def resolved_dsn(self) -> str:
        """The connection string in this process, an ``laminar.env`` setting read here (with its
        password: do not log it)."""
        return self._dsn

    @property
    def _dsn(self) -> str:
        """The connection string in this process (an ``laminar.env`` setting is read here)."""
        if self._resolved_dsn is None:
            dsn = resolve(self._dsn_setting, f"PostgresSink {self.sink_id!r}: dsn")
            self._check_dsn(dsn)
        assert self._resolved_dsn is not None
        return self._resolved_dsn

    def _check_dsn(self, dsn: object) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigError("PostgresSink needs dsn= a libpq connection string or URI")
        params = parse_dsn(dsn, "PostgresSink: dsn")
        self._resolved_dsn = dsn
        self._password = str(params.get("password") or "")

    def _secrets(self) -> tuple[str, ...]:
        """Secret values to mask in messages (the DSN's password, once known)."""
        if self._password is None:
            with contextlib.suppress(ConfigError):
                _ = self._dsn
        return (self._password,) if self._password else ()

    @property
    def table(self) -> TableName:
        """The table as configured (``schema`` None: resolved through ``search_path``)."""
        return self._table_name

    @property
    def columns(self) -> list[str] | dict[str, str] | None:
        """The column mapping as configured."""
        return self._columns

    @property
    def mode(self) -> str:
        """``"append"`` (COPY every row) or ``"upsert"`` (replace rows by `key`)."""
        return self._mode

    @property
    def key(self) -> tuple[str, ...] | None:
        """The upsert key's columns as configured (None in append mode)."""
        return self._key

    @property
    def two_phase_part(self) -> int | None:
        """The partition number of a scale-out participant, or None."""
        return self._two_phase_part

    def __repr__(self) -> str:
        setting = self._dsn_setting
        dsn = repr(setting) if is_deferred(setting) else repr(redact_dsn(str(setting)))
        upsert = "" if self._key is None else f", mode='upsert', key={list(self._key)!r}"
        return (
            f"PostgresSink(dsn={dsn}, table={self._table_name.display()!r}, "
            f"sink_id={self.sink_id!r}{upsert})"
        )

    def _where(self) -> str:
        params = _safe_conninfo(self._dsn)
        database = params.get("dbname") or params.get("user") or "(default database)"
        return f"database {database!r} ({redact_dsn(self._dsn)})"

    def _err(self, err: BaseException, what: str, epoch: int | None = None) -> LaminarError:
        return map_pg_error(err, what, sink_id=self.sink_id, epoch=epoch, secrets=self._secrets())

    def gid(self, epoch: int) -> str:
        """The prepared-transaction id this sink uses for ``epoch``."""
        return make_gid(self.sink_id, epoch, self._two_phase_part or 0)

    # -- connection ---------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self._drop_connection()
        extra: dict[str, Any] = {"connect_timeout": max(1, round(self._connect_timeout_s))}
        if "application_name" not in _safe_conninfo(self._dsn):
            extra["application_name"] = f"laminar {self.sink_id}"[:63]
        try:
            conn = psycopg.connect(self._dsn, **extra)
        except psycopg.Error as e:
            raise self._err(e, f"connecting to {self._where()}") from e
        self._conn = conn
        return conn

    def _epoch_connection(self, epoch: int | None) -> psycopg.Connection[Any]:
        """The connection holding the open epoch's transaction. Never a new one: a session that
        was lost took the transaction (and its claim) with it, so writing or committing on a
        fresh session would land rows outside the epoch's transaction."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            raise AbortableError(
                f"the connection holding epoch {epoch}'s transaction was lost (the server rolled "
                "the transaction back): abort the epoch and write it again",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        return conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    @contextlib.contextmanager
    def _idle_connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection with no transaction of ours open: the sink's own when it has none (a
        read transaction opened on it is ended afterwards), a short-lived one while an epoch's
        transaction is open on it."""
        conn = self._conn
        usable = conn is not None and not conn.closed and not conn.broken
        if (usable and conn is not None and conn.info.transaction_status == _IDLE) or (
            not usable and self._machine.writing is None
        ):
            conn = self._connection()
            try:
                yield conn
            finally:
                if not conn.closed and conn.info.transaction_status != _IDLE:
                    conn.rollback()
            return
        try:
            temp = psycopg.connect(
                self._dsn, connect_timeout=max(1, round(self._connect_timeout_s))
            )
        except psycopg.Error as e:
            raise self._err(e, f"connecting to {self._where()}") from e
        with temp:
            yield temp


_IDLE = psycopg.pq.TransactionStatus.IDLE


def _safe_conninfo(dsn: str) -> dict[str, Any]:
    try:
        return dict(conninfo_to_dict(dsn))
    except psycopg.ProgrammingError:
        return {}


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
