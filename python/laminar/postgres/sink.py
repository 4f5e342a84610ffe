"""``PostgresSink``: each epoch lands in a PostgreSQL table exactly once (docs/protocol.md §2).

(Over 500 lines for now: `PostgresSink` is still one class. Its split into `laminar.postgres`
pieces waits until the branches that edit it are merged: git's rename detection needs this file
mostly whole to carry their edits here (docs/engine.md, "Package layout").)

One database transaction per epoch::

    BEGIN
      upsert laminar.sink_epochs(sink_id → epoch) WHERE the stored epoch is older
        RETURNING epoch        -- first: the row lock is taken before any data moves;
                               -- no row: the epoch is already committed → ROLLBACK, skip
      COPY <table> (<columns>) FROM STDIN (FORMAT BINARY)   -- rows encoded by the Rust core
      UPDATE laminar.sink_epochs SET rows, bytes            -- totals for `laminar status`
    COMMIT                     -- or PREPARE TRANSACTION 'laminar:<sink>:<epoch>:<part>'

A second writer of the same sink id blocks on the row lock, then sees the epoch committed and
skips it: an epoch never commits twice. A connection lost during COMMIT leaves the outcome unknown
(`InDoubtError`); `recover()` — or the next `begin_transaction` — reads ``laminar.sink_epochs``
to learn it, never guessing.

As a two-phase participant the transaction ends with ``PREPARE TRANSACTION`` (gid format in
``laminar.postgres._names``); ``commit_transaction`` is then ``COMMIT PREPARED`` and
``abort_transaction`` ``ROLLBACK PREPARED``. With ``two_phase_part=p`` the sink is partition ``p``
of a scale-out write (§4): it does not claim the epoch row (the coordinator records the epoch in
its decision transaction, with ``_pg_steps.claim_epoch`` on its own connection, so parallel
partitions never wait on each other) and it can only end by preparing.

The sink object is picklable configuration: the connection opens lazily in the process that
writes, and reconnects on the next epoch after a failure.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from laminar._core import Command, Event, PostgresInDoubtMachine, PreparedTxnState, epoch_committed
from laminar._faults import crash_point
from laminar._input import check_epoch, materialize
from laminar._redact import redact_dsn, redact_text
from laminar._settings import Setting, is_deferred, resolve
from laminar._sink import TransactionalSink
from laminar._types import ArrowData
from laminar.errors import (
    AbortableError,
    AuthorizationError,
    ConfigError,
    DataError,
    FatalError,
    IllegalStateError,
    InDoubtError,
    LaminarError,
)
from laminar.metadata import ensure_schema, register_sink
from laminar.postgres import _upsert as _pg_upsert
from laminar.postgres._errors import is_connection_failure, map_pg_error, sqlstate_of
from laminar.postgres._names import (
    TableName,
    gid_prefix,
    make_gid,
    parse_table_name,
    render_identifier,
)
from laminar.postgres._steps import (
    DEFAULT_SLICE_BYTES,
    CopyPlan,
    PreparedTransaction,
    TableInfo,
    claim_epoch,
    committed_epoch,
    copy_batch,
    current_table,
    list_prepared,
    load_table,
    plan_copy,
    prepare_transaction,
    record_epoch_totals,
)
from laminar.postgres._steps import commit_prepared as _commit_prepared
from laminar.postgres._steps import rollback_prepared as _rollback_prepared
from laminar.protocol.driver import drive, perform_driver_side

__all__ = ["PostgresSink", "PreparedTransaction"]

log = logging.getLogger("laminar.postgres.sink")

#: The schema an unqualified table name is assumed to live in for the default sink id.
DEFAULT_SCHEMA = "public"

ColumnsSpec = Sequence[str] | Mapping[str, str] | None


class PostgresSink(TransactionalSink):
    """Writes each epoch's rows into ``table`` in one transaction, exactly once per sink id.

    ``dsn``: a libpq connection string or URI (its password never appears in messages, reprs or
    logs), or ``laminar.env("VAR")`` to read it from that environment variable in the process
    that writes (e.g. the Spark Connect server's Python worker), so it never travels in the
    pickled configuration; libpq's own ``PGPASSWORD``/``PGHOST``/… and ``~/.pgpass`` work there
    too. ``table``: ``"schema.table"`` or ``"table"`` (found through ``search_path``); quote
    parts in double quotes to keep dots, quotes or capitals. ``columns``: None (Arrow column names
    are the table's column names), a list (the target column of each Arrow column, in order) or a
    mapping Arrow name → column name. ``sink_id``: the stable identity under which committed
    epochs are recorded; default: the schema-qualified table name (``public.<table>`` when the
    table is unqualified).

    Keyword-only: ``mode="upsert"`` with ``key=`` (a column or a list of columns: those of a
    unique index of the table) replaces rows by key instead of appending them — the last row of
    a key in a batch wins (docs/postgres.md, "Upsert mode"); ``two_phase_part`` makes the sink
    partition ``p`` of a scale-out write (it ends each epoch with ``PREPARE TRANSACTION`` and
    leaves the epoch record to the coordinator); ``connect_timeout_s`` bounds connection
    attempts; ``slice_bytes`` bounds the Arrow bytes encoded per COPY statement (bigger batches
    stream in several).
    """

    kind: ClassVar[str] = "postgres"
    _runtime_attrs: ClassVar[tuple[str, ...]] = (
        "_conn",
        "_table_info",
        "_table_checked",
        "_plan",
        "_ready",
        "_pending_decision",
        "_prepared_gid",
        "_prepare_sent",
        "_epoch_rows",
        "_epoch_bytes",
        "_max_prepared",
        "_resolved_dsn",
        "_password",
    )

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
        self._pending_decision: str | None = None
        self._prepared_gid: str | None = None
        self._prepare_sent: str | None = None
        self._epoch_rows: int | None = 0
        self._epoch_bytes: int | None = 0
        self._max_prepared: int | None = None

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
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as e:
            raise ConfigError(f"PostgresSink: malformed dsn ({redact_text(str(e))})") from None
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
            not usable and self.transaction_state.name != "Active"
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

    # -- start-up -----------------------------------------------------------------------------

    def _ensure_ready(self) -> psycopg.Connection[Any]:
        """Connect; once per process: create/upgrade the metadata schema, resolve and check the
        table, register the sink, learn the last committed epoch."""
        conn = self._connection()
        if self._ready:
            return conn
        where = self._where()
        try:
            if conn.info.transaction_status != _IDLE:
                conn.rollback()
            ensure_schema(conn, where=where)
            with conn.transaction():
                info = load_table(conn, self._table_name, where)
                self._check_table(info)
                if self._key is not None:
                    _pg_upsert.check_privileges(conn, info, where)
                previous = register_sink(conn, self.sink_id, self.kind, self._registry_config(info))
                self._check_registered_table(info, previous)
                last = committed_epoch(conn, self.sink_id)
                setting = conn.execute("SELECT current_setting('max_prepared_transactions')")
                row = setting.fetchone()
                self._max_prepared = int(row[0]) if row else 0
        except psycopg.Error as e:
            raise self._err(e, f"preparing sink {self.sink_id!r} in {where}") from e
        self._table_info = info
        self._plan = None
        if self.transaction_state.name == "Idle":
            self.tracker.last_committed_epoch = last
        self._ready = True
        return conn

    def _check_table(self, info: TableInfo) -> None:
        if not info.can_insert:
            raise AuthorizationError(
                f"the role of {self._where()} may not INSERT into {info.display}: "
                f"GRANT INSERT ON {info.display} TO <role>",
                sink_id=self.sink_id,
            )
        unqualified_default = self._sink_id_defaulted and self._table_name.schema is None
        if unqualified_default and info.schema != DEFAULT_SCHEMA:
            raise ConfigError(
                f"table {self._table_name.display()} resolves to {info.display} through "
                f"search_path, but the default sink id assumes schema {DEFAULT_SCHEMA!r} "
                f"({self.sink_id}); write table={info.display!r} or pass sink_id=",
                sink_id=self.sink_id,
            )
        if self._key is not None:
            try:
                _pg_upsert.resolve_key(info, self._key)
            except ConfigError as e:
                e.sink_id = self.sink_id
                raise

    def _registry_config(self, info: TableInfo) -> dict[str, Any]:
        params = _safe_conninfo(self._dsn)
        upsert = {} if self._key is None else {"mode": self._mode, "key": list(self._key)}
        return {
            **upsert,
            "table": [info.schema, info.name],
            "columns": self._columns,
            "database": info.database,
            "host": params.get("host") or params.get("hostaddr"),
            "port": params.get("port"),
            "user": params.get("user"),
        }

    def _check_registered_table(self, info: TableInfo, previous: dict[str, Any] | None) -> None:
        registered = (previous or {}).get("table")
        if registered is None or registered == [info.schema, info.name]:
            return
        before = ".".join(render_identifier(str(p)) for p in registered)
        raise ConfigError(
            f"sink id {self.sink_id!r} is registered for table {before}, not {info.display}: "
            "its committed epochs belong to that table, so writing here would skip them. Pass "
            "another sink_id= for this table (or, to re-point the sink on purpose, delete its "
            "rows from laminar.sinks and laminar.sink_epochs)",
            sink_id=self.sink_id,
        )

    def init_transactions(self) -> None:
        """Connect, create the metadata schema on first use, check the table, register the sink,
        read its last committed epoch and resolve an in-doubt commit of this process."""
        state = self.transaction_state
        if state.name not in ("Idle", "Failed"):
            raise IllegalStateError(
                f"init_transactions() while the sink is {state.name}: finish the epoch first",
                sink_id=self.sink_id,
            )
        self._ready = None
        self._ensure_ready()
        if self.transaction_state.name == "Failed":
            self.recover()
        if self._two_phase_part is not None and self._max_prepared == 0:
            raise self._prepared_disabled()
        # a scale-out participant sees its sibling partitions' prepared gids: expected
        lingering = self.prepared_transactions() if self._two_phase_part is None else []
        if lingering:
            log.warning(
                "sink %s: %d prepared transaction(s) await a decision: %s (oldest %.0f s); the "
                "coordinator or `laminar resolve` must commit or roll them back",
                self.sink_id,
                len(lingering),
                ", ".join(p.gid for p in lingering[:5]),
                lingering[0].age_s,
            )

    def _prepared_disabled(self) -> ConfigError:
        return ConfigError(
            f"max_prepared_transactions is 0 on the server of {self._where()}, so PREPARE "
            "TRANSACTION is disabled. Set max_prepared_transactions to at least the number of "
            "concurrent participants (e.g. ALTER SYSTEM SET max_prepared_transactions = 64, or "
            "in postgresql.conf) and restart PostgreSQL: the setting only changes on restart",
            sink_id=self.sink_id,
        )

    # -- one epoch ----------------------------------------------------------------------------

    def begin_transaction(self, epoch: int) -> bool:
        """Open ``epoch``'s transaction and claim the epoch; False (nothing open) if the sink id
        already committed it — then nothing must be written."""
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        if self.transaction_state.name == "Failed":
            self.recover()
        if self.transaction_state.name != "Idle":
            self.tracker.begin(epoch)  # raises IllegalStateError, changing nothing
        last = self.tracker.last_committed_epoch
        if last is not None and epoch <= last:
            return self._skip(epoch, last)
        conn = self._ensure_ready()
        try:
            if self._two_phase_part is None:
                claimed = claim_epoch(conn, self.sink_id, epoch)
                current = None if claimed else committed_epoch(conn, self.sink_id)
            else:
                current = committed_epoch(conn, self.sink_id)
                claimed = current is None or current < epoch
        except psycopg.Error as e:
            self._end_transaction_quietly()
            raise self._err(e, f"claiming epoch {epoch} in laminar.sink_epochs", epoch) from e
        if not claimed:
            self._end_transaction_quietly()
            self.tracker.last_committed_epoch = current
            return self._skip(epoch, current)
        crash_point("postgres.after_claim")
        self.tracker.begin(epoch)
        self._table_checked = False
        self._epoch_rows = self._epoch_bytes = 0
        self._prepare_sent = None
        return True

    def _skip(self, epoch: int, last: int | None) -> bool:
        if last is not None and epoch < last:
            log.warning(
                "sink %s: epoch %d is older than the last committed epoch %d; Spark only replays "
                "the last batch, so a query restarted from another checkpoint may be writing",
                self.sink_id,
                epoch,
                last,
            )
        return self.tracker.begin(epoch)

    def write(self, batch: ArrowData) -> None:
        """COPY the batch's rows into the table within the open transaction.

        Columns and types are checked before any row is sent (`ConfigError` naming the table, the
        column and both types), values too (`DataError` naming the column and row); after either
        the transaction is rolled back, so the epoch can be written again with a fixed batch.
        """
        state = self.transaction_state
        if state.name != "Active":
            raise IllegalStateError(
                f"write() needs an open transaction, but the sink is {state.name}: call "
                "begin_transaction(epoch) first (and only write when it returned True)",
                sink_id=self.sink_id,
            )
        epoch = state.epoch
        conn = self._epoch_connection(epoch)
        try:
            # A stream is read once, here: a retry of this call then fails loudly (a spent
            # reader is refused) instead of writing nothing (laminar._input).
            data = materialize(batch)
            if not self._table_checked:
                self._table_info = self._checked_table(conn)
                self._table_checked = True
            table = self._table()
            rows, nbytes = self._write_rows(conn, table, self._plan_for(table, data.schema), data)
        except (ConfigError, DataError, AuthorizationError) as e:
            self._abort_after_error()
            if e.epoch is None and e.sink_id is None:
                e.sink_id, e.epoch = self.sink_id, epoch
            raise
        except psycopg.Error as e:
            error = self._err(e, f"writing to {self._shown_table()}", epoch)
            # Whatever the server refused (a type, a column, a lost connection), the next epoch
            # reads the table's definition again rather than trusting the cached one.
            self._table_info = None
            self._plan = None
            if not isinstance(error, AbortableError):
                self._abort_after_error()
            raise error from e
        self._epoch_rows = (self._epoch_rows or 0) + rows
        self._epoch_bytes = (self._epoch_bytes or 0) + nbytes
        self.tracker.record_write(rows, nbytes)

    def _table(self) -> TableInfo:
        if self._table_info is None:
            raise IllegalStateError(
                "the target table has not been read yet: call begin_transaction(epoch) first",
                sink_id=self.sink_id,
            )
        return self._table_info

    def _shown_table(self) -> str:
        info = self._table_info
        return info.display if info is not None else self._table_name.display()

    def _checked_table(self, conn: psycopg.Connection[Any]) -> TableInfo:
        """The table as this transaction writes it: locked, its definition compared with the
        cached one and read again when it changed (`_pg_steps.current_table`; the COPY plan
        follows: `_plan_for` re-plans for a new definition)."""
        cached = self._table_info
        info = current_table(conn, cached, self._table_name, self._where())
        if info is not cached:
            if cached is not None:
                log.warning(
                    "sink %s: the definition of table %s changed since it was read; writing "
                    "with the new one",
                    self.sink_id,
                    info.display,
                )
            self._check_table(info)
        return info

    def _plan_for(self, table: TableInfo, schema: pa.Schema) -> CopyPlan:
        cached = self._plan
        if cached is not None and cached[1] is table and cached[0].equals(schema):
            return cached[2]
        plan = plan_copy(table, schema, self._columns)
        if self._key is not None:
            _pg_upsert.check_key_in_plan(table, plan, self._key)
        self._plan = (schema, table, plan)
        return plan

    def _write_rows(
        self, conn: psycopg.Connection[Any], table: TableInfo, plan: CopyPlan, data: pa.Table
    ) -> tuple[int, int]:
        """Append (COPY) or upsert (`_pg_upsert`) ``data``; return (rows, bytes) sent."""
        if self._key is None:
            return copy_batch(conn, table, plan, data, slice_bytes=self._slice_bytes)
        return _pg_upsert.upsert_batch(
            conn,
            table,
            plan,
            data,
            self._key,
            stage_id=f"{self.sink_id}\0{self._two_phase_part or 0}",
            create_stage=self._create_stage,
            slice_bytes=self._slice_bytes,
        )

    def _create_stage(self, statement: sql.Composed) -> None:
        """Create upsert mode's staging table on a connection without the epoch's transaction,
        committed at once (`_pg_upsert`); a concurrent writer creating it too is no error."""
        with self._idle_connection() as side:
            try:
                side.execute(statement)
                side.commit()
            except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
                side.rollback()

    def _finish_epoch(self, epoch: int) -> None:
        """Store the epoch's totals (claim mode) — the last statement before COMMIT/PREPARE."""
        if self._two_phase_part is not None:
            return
        try:
            record_epoch_totals(
                self._epoch_connection(epoch),
                self.sink_id,
                self._epoch_rows or 0,
                self._epoch_bytes or 0,
            )
        except psycopg.Error as e:
            error = self._err(e, f"recording epoch {epoch} in laminar.sink_epochs", epoch)
            if not isinstance(error, AbortableError):
                self._abort_after_error()
            raise error from e

    def prepare_transaction(self) -> PreparedTxnState:
        """End the epoch's transaction with ``PREPARE TRANSACTION``: durable, invisible, and
        still holding its locks until ``commit_transaction`` / ``abort_transaction``."""
        state = self.transaction_state
        if state.name != "Active":
            self.tracker.prepare()  # raises IllegalStateError, changing nothing
        epoch = state.epoch
        assert epoch is not None
        if self._max_prepared == 0:
            self._abort_after_error()
            raise self._prepared_disabled()
        gid = self.gid(epoch)
        self._finish_epoch(epoch)
        crash_point("postgres.before_prepare")
        conn = self._epoch_connection(epoch)
        self._prepare_sent = gid
        try:
            prepare_transaction(conn, gid)
        except psycopg.Error as e:
            if is_connection_failure(e, self._conn):
                # The PREPARE may or may not have happened: abort_transaction cleans up the gid.
                self._drop_connection()
                raise self._err(e, f"preparing {gid}", epoch) from e
            self._prepare_sent = None
            self._abort_after_error()  # a failed PREPARE TRANSACTION is a ROLLBACK
            if sqlstate_of(e) == "55000" and "disabled" in str(e):
                self._max_prepared = 0
                raise self._prepared_disabled() from e
            raise self._err(e, f"preparing {gid}", epoch) from e
        self.tracker.prepare(epoch=epoch)
        self._prepared_gid = gid
        crash_point("postgres.after_prepare")
        return PreparedTxnState(
            self.sink_id,
            epoch,
            record_count=self._epoch_rows or 0,
            created_at_ms=time.time_ns() // 1_000_000,
        )

    def commit_transaction(self, epoch: int) -> None:
        """Commit the epoch: ``COMMIT`` (one phase) or ``COMMIT PREPARED`` after a prepare.

        A lost connection during the commit raises `InDoubtError`; ask `recover()` for the
        outcome (it reads ``laminar.sink_epochs``), never abort blindly.
        """
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        state = self.transaction_state
        if state.name == "Prepared" and state.epoch == epoch:
            self._commit_prepared_epoch(epoch)
            return
        if state.name != "Active" or state.epoch != epoch:
            self.tracker.commit_started(epoch=epoch)  # raises IllegalStateError
        if self._two_phase_part is not None:
            raise IllegalStateError(
                f"sink {self.sink_id!r} is scale-out participant {self._two_phase_part}: it "
                "commits only through prepare_transaction() and the coordinator's decision",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        self._finish_epoch(epoch)
        crash_point("postgres.before_commit")
        conn = self._epoch_connection(epoch)
        self.tracker.commit_started(epoch=epoch)
        try:
            conn.commit()
        except psycopg.Error as e:
            self.tracker.commit_failed()
            if is_connection_failure(e, conn):
                self._pending_decision = "commit"
                self._drop_connection()
                raise InDoubtError(
                    redact_text(
                        f"the connection was lost during COMMIT of epoch {epoch}: whether it "
                        f"committed is unknown; recover() reads laminar.sink_epochs to decide "
                        f"({' '.join(str(e).split())})",
                        self._secrets(),
                    ),
                    sink_id=self.sink_id,
                    epoch=epoch,
                ) from e
            # The server answered: the transaction is rolled back (e.g. a deferred constraint).
            self.tracker.resolve(False)
            raise self._err(e, f"committing epoch {epoch}", epoch) from e
        self.tracker.commit_ok()
        crash_point("postgres.after_commit")

    def _commit_prepared_epoch(self, epoch: int) -> None:
        gid = self._prepared_gid or self.gid(epoch)
        self.tracker.commit_started(epoch=epoch)
        try:
            found = _commit_prepared(self._connection(), gid)
        except (psycopg.Error, LaminarError) as e:
            # Failed(epoch) with the decision kept: recover() completes the COMMIT PREPARED.
            self.tracker.commit_failed()
            self._pending_decision = "commit"
            lost = isinstance(e, AbortableError) or (
                isinstance(e, psycopg.Error) and is_connection_failure(e, self._conn)
            )
            if lost:
                self._drop_connection()
                raise InDoubtError(
                    f"COMMIT PREPARED {gid!r} did not complete (the server could not be reached "
                    "or the connection was lost): recover() completes it",
                    sink_id=self.sink_id,
                    epoch=epoch,
                ) from e
            if isinstance(e, LaminarError):
                raise
            raise self._err(e, f"COMMIT PREPARED {gid!r}", epoch) from e
        if not found:
            # Someone else resolved it (a watcher, the CLI): the epoch record says how.
            self.tracker.commit_failed()
            committed = self._read_committed(epoch)
            self.tracker.resolve(committed)
            self._prepared_gid = None
            if not committed:
                raise AbortableError(
                    f"prepared transaction {gid!r} was rolled back by another process before "
                    "this commit; the epoch can be written again",
                    sink_id=self.sink_id,
                    epoch=epoch,
                )
            return
        self._prepared_gid = None
        self.tracker.commit_ok()
        crash_point("postgres.after_commit")

    def abort_transaction(self, epoch: int) -> None:
        """Discard the epoch's transaction (``ROLLBACK``, or ``ROLLBACK PREPARED`` after a
        prepare). Aborting an epoch the sink already rolled back itself is a no-op."""
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        state = self.transaction_state
        if state.name == "Idle":
            record = self.tracker.record(epoch)
            if record is not None and record.state == "Aborted":
                return
        if state.name == "Prepared" and state.epoch == epoch:
            self._rollback_prepared_epoch(epoch)
            return
        self.tracker.abort_started(epoch=epoch)  # Active only; raises IllegalStateError otherwise
        self._end_transaction_quietly()
        sent, self._prepare_sent = self._prepare_sent, None
        if sent is not None:
            # A PREPARE whose reply was lost: roll the gid back if it exists.
            try:
                with self._idle_connection() as conn:
                    _rollback_prepared(conn, sent)
            except (psycopg.Error, LaminarError) as e:
                self.tracker.abort_failed()
                self._pending_decision = "abort"
                self._prepared_gid = sent
                if isinstance(e, LaminarError):
                    raise
                raise self._err(e, f"ROLLBACK PREPARED {sent!r}", epoch) from e
        self.tracker.abort_ok()

    def _rollback_prepared_epoch(self, epoch: int) -> None:
        gid = self._prepared_gid or self.gid(epoch)
        self.tracker.abort_started(epoch=epoch)
        try:
            found = _rollback_prepared(self._connection(), gid)
        except (psycopg.Error, LaminarError) as e:
            self.tracker.abort_failed()
            self._pending_decision = "abort"
            if isinstance(e, psycopg.Error) and is_connection_failure(e, self._conn):
                self._drop_connection()
            if isinstance(e, LaminarError):
                raise
            raise self._err(e, f"ROLLBACK PREPARED {gid!r}", epoch) from e
        self._prepared_gid = None
        if not found and self._read_committed(epoch):
            self.tracker.abort_failed()
            self.tracker.resolve(True)
            raise FatalError(
                f"prepared transaction {gid!r} was committed by another process before this "
                "abort: the epoch is committed",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        self.tracker.abort_ok()

    def _abort_after_error(self) -> None:
        """Roll back after a fatal error in this call, so the sink is usable again."""
        if self.transaction_state.name == "Active":
            self.tracker.abort_started()
            self._end_transaction_quietly()
            self.tracker.abort_ok()

    def _end_transaction_quietly(self) -> None:
        """Roll back the connection's open transaction; a lost connection has none left (the
        server rolls back the transaction of a session that ends)."""
        conn = self._conn
        if conn is None:
            return
        try:
            if not conn.closed and not conn.broken:
                conn.rollback()
        except psycopg.Error:
            self._drop_connection()
            return
        if conn.closed or conn.broken:
            self._drop_connection()

    # -- recovery and state -------------------------------------------------------------------

    def _read_committed(self, epoch: int) -> bool:
        last = self.last_committed_epoch()
        return epoch_committed(last, epoch)

    def last_committed_epoch(self) -> int | None:
        """The last epoch committed under this sink id, read from ``laminar.sink_epochs``."""
        self._ensure_ready_quietly()
        try:
            with self._idle_connection() as conn:
                return committed_epoch(conn, self.sink_id)
        except psycopg.Error as e:
            raise self._err(e, "reading laminar.sink_epochs") from e

    def _ensure_ready_quietly(self) -> None:
        if not self._ready and self.transaction_state.name in ("Idle", "Failed"):
            self._ensure_ready()

    def recover(self) -> int | None:
        """Resolve an in-doubt commit (or abort) from the durable record; return the last
        committed epoch.

        After a lost COMMIT, ``laminar.sink_epochs`` says whether the epoch committed. After a
        lost COMMIT/ROLLBACK PREPARED, a gid still in ``pg_prepared_xacts`` is completed with the
        decision that was being sent; a gid that is gone is read from ``laminar.sink_epochs``.
        """
        state = self.transaction_state
        if state.name != "Failed":
            last = self.last_committed_epoch()
            if self.transaction_state.name == "Idle":
                self.tracker.last_committed_epoch = last
            return last
        epoch = state.epoch
        assert epoch is not None
        # the core's PostgresInDoubtMachine decides (docs/protocol.md §1): finish the pending gid
        # with the decision that was being sent, then laminar.sink_epochs says; this performs
        gid = self._prepared_gid
        commit = (self._pending_decision or "commit") == "commit"
        machine = PostgresInDoubtMachine(self.sink_id, epoch, gid, commit=commit)
        try:
            with self._idle_connection() as conn:

                def perform(c: Command) -> Event:
                    if (event := perform_driver_side(c, log)) is not None:
                        return event
                    if c.kind in ("commit_prepared", "rollback_prepared"):
                        assert c.gid is not None
                        finish = (
                            _commit_prepared if c.kind == "commit_prepared" else _rollback_prepared
                        )
                        return Event.found(finish(conn, c.gid))
                    if c.kind == "read_sink_epochs":
                        return Event.progress([(self.sink_id, committed_epoch(conn, self.sink_id))])
                    raise FatalError(f"in-doubt resolution: unexpected command {c.kind!r}")

                drive(machine, perform)
        except psycopg.Error as e:
            raise self._err(e, f"recovering epoch {epoch}", epoch) from e
        committed, last = machine.committed, machine.last
        assert committed is not None  # the machine ended ok: it read laminar.sink_epochs
        self.tracker.resolve(committed)
        self.tracker.last_committed_epoch = last
        self._pending_decision = None
        self._prepared_gid = None
        return last

    def close(self) -> None:
        """Close the connection; an open (unprepared) transaction is rolled back, a prepared
        one is left for the coordinator to decide."""
        state = self.transaction_state
        if state.name == "Active" and state.epoch is not None:
            with contextlib.suppress(LaminarError):
                self.abort_transaction(state.epoch)
        elif state.name == "Prepared":
            log.info(
                "sink %s: closing with prepared transaction %s left for the coordinator",
                self.sink_id,
                self._prepared_gid,
            )
        self._drop_connection()
        self._ready = None

    # -- for a coordinator: this sink's steps inside a transaction it owns ------------------------

    def check_in_transaction(self, conn: psycopg.Connection[Any], schema: pa.Schema) -> None:
        """Lock the table on ``conn`` (in its current transaction), check its definition (read
        again if it changed) and plan the COPY of ``schema``: a `ConfigError` here comes before
        any byte is sent anywhere. A coordinator calls it first, then `write_in_transaction`
        with ``checked=True`` in the same transaction."""
        try:
            self._table_info = self._checked_table(conn)
            self._plan_for(self._table_info, schema)
        except psycopg.Error as e:
            self._table_info = self._plan = None
            raise self._err(e, f"checking table {self._shown_table()}") from e

    def write_in_transaction(
        self,
        conn: psycopg.Connection[Any],
        epoch: int,
        batch: ArrowData,
        *,
        checked: bool = False,
    ) -> int | None:
        """Claim ``epoch`` and COPY ``batch`` on ``conn``, in its current transaction, without
        committing; return the rows written, or None if this sink id already committed the epoch
        (then nothing was written and the caller must not count this sink).

        For a coordinator that puts several Postgres sinks of one database — and its own decision
        rows — into ONE transaction: it commits (or prepares, or rolls back) ``conn`` itself. The
        sink's own connection and state are not touched. Run `init_transactions` once first (it
        creates the metadata schema and registers the sink). ``checked=True``: the caller ran
        `check_in_transaction` in this transaction. Errors are mapped as for `write`.
        """
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        try:
            data = materialize(batch)
            if not claim_epoch(conn, self.sink_id, epoch):
                return None
            if not checked or self._table_info is None:
                self._table_info = self._checked_table(conn)
            table = self._table_info
            rows, nbytes = self._write_rows(conn, table, self._plan_for(table, data.schema), data)
            record_epoch_totals(conn, self.sink_id, rows, nbytes)
        except psycopg.Error as e:
            error = self._err(e, f"writing epoch {epoch} to {self._shown_table()}", epoch)
            self._table_info = self._plan = None
            raise error from e
        return rows

    # -- two-phase participants: listing and resolving -------------------------------------------

    def prepared_transactions(self) -> list[PreparedTransaction]:
        """This sink id's prepared transactions in ``pg_prepared_xacts``, oldest first, with
        their age (for the coordinator, the resolution watcher and ``laminar status``)."""
        try:
            with self._idle_connection() as conn:
                return list_prepared(conn, gid_prefix(self.sink_id))
        except psycopg.Error as e:
            raise self._err(e, "listing prepared transactions") from e

    def _own_gid(self, gid: str) -> None:
        if not gid.startswith(gid_prefix(self.sink_id)):
            raise ConfigError(
                f"{gid!r} is not a prepared transaction of sink {self.sink_id!r} (its gids start "
                f"with {gid_prefix(self.sink_id)!r})",
                sink_id=self.sink_id,
            )

    def commit_prepared(self, gid: str) -> bool:
        """``COMMIT PREPARED gid`` for one of this sink's gids; False if it no longer exists."""
        self._own_gid(gid)
        state = self.transaction_state
        if state.name == "Prepared" and gid == self._prepared_gid and state.epoch is not None:
            self.commit_transaction(state.epoch)
            return True
        try:
            with self._idle_connection() as conn:
                return _commit_prepared(conn, gid)
        except psycopg.Error as e:
            raise self._err(e, f"COMMIT PREPARED {gid!r}") from e

    def rollback_prepared(self, gid: str) -> bool:
        """``ROLLBACK PREPARED gid`` for one of this sink's gids; False if it no longer exists."""
        self._own_gid(gid)
        state = self.transaction_state
        if state.name == "Prepared" and gid == self._prepared_gid and state.epoch is not None:
            self.abort_transaction(state.epoch)
            return True
        try:
            with self._idle_connection() as conn:
                return _rollback_prepared(conn, gid)
        except psycopg.Error as e:
            raise self._err(e, f"ROLLBACK PREPARED {gid!r}") from e


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
