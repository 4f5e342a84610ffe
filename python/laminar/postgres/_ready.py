"""`PostgresSink`'s start-up and table checks: the laminar schema and the sink's registration,
the table each epoch writes to (checked once, re-checked when it changes), the COPY plan and
the rows' COPY — also on a coordinator's own transaction (an atomic group)."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
from psycopg import sql

from laminar._input import check_epoch, materialize
from laminar._types import ArrowData
from laminar.errors import (
    AuthorizationError,
    ConfigError,
    IllegalStateError,
)
from laminar.metadata import ensure_schema, register_sink
from laminar.postgres import _partners
from laminar.postgres import _upsert as _pg_upsert
from laminar.postgres._base import _IDLE, DEFAULT_SCHEMA, _safe_conninfo, _SinkBase
from laminar.postgres._names import (
    render_identifier,
)
from laminar.postgres._steps import (
    CopyPlan,
    TableInfo,
    claim_epoch,
    committed_epoch,
    copy_batch,
    current_table,
    load_table,
    plan_copy,
    record_epoch_totals,
)

log = logging.getLogger("laminar.postgres.sink")

#: The start-up checks scale-out participants passed in this process, by what they depend on:
#: the table read and checked, the sink registered, ``max_prepared_transactions``. A task's
#: participant is a new sink per attempt (`laminar.protocol.distributed.postgres_participant`)
#: and a Spark Python worker runs one task after another, so without this each task paid them
#: again; a long-lived sink passes them once per process too. Each epoch's transaction still
#: locks the table and compares its definition (`_checked_table`), reading it again when it
#: changed.
_PARTICIPANTS_READY: dict[tuple[Any, ...], tuple[TableInfo, int]] = {}


class _Ready(_SinkBase):
    """Start-up, the table and the COPY of an epoch's rows."""

    # -- start-up -----------------------------------------------------------------------------

    def _ensure_ready(self) -> psycopg.Connection[Any]:
        """Connect; once per process: create/upgrade the metadata schema, resolve and check the
        table, register the sink, learn the last committed epoch."""
        conn = self._connection()
        if self._ready:
            return conn
        where = self._where()
        memo_key = None
        if self._two_phase_part is not None:
            memo_key = (self._dsn, self._table_name, self.sink_id, self._mode, self._key)
        passed = _PARTICIPANTS_READY.get(memo_key) if memo_key is not None else None
        try:
            if conn.info.transaction_status != _IDLE:
                conn.rollback()
            if passed is not None:
                info, self._max_prepared = passed
                with conn.transaction():
                    last = committed_epoch(conn, self.sink_id)
            else:
                ensure_schema(conn, where=where)
                with conn.transaction():
                    info = load_table(conn, self._table_name, where)
                    self._check_table(info)
                    if self._key is not None:
                        _pg_upsert.check_privileges(conn, info, where)
                    config = self._registry_config(info)
                    previous = register_sink(conn, self.sink_id, self.kind, config)
                    self._check_registered_table(info, previous)
                    last = committed_epoch(conn, self.sink_id)
                    setting = conn.execute("SELECT current_setting('max_prepared_transactions')")
                    row = setting.fetchone()
                    self._max_prepared = int(row[0]) if row else 0
                if memo_key is not None:
                    _PARTICIPANTS_READY[memo_key] = (info, self._max_prepared)
        except psycopg.Error as e:
            raise self._err(e, f"preparing sink {self.sink_id!r} in {where}") from e
        self._table_info = info
        self._plan = None
        self._machine.learned_last(last)
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

    def _prepared_disabled(self) -> ConfigError:
        return ConfigError(
            f"max_prepared_transactions is 0 on the server of {self._where()}, so PREPARE "
            "TRANSACTION is disabled. Set max_prepared_transactions to at least the number of "
            "concurrent participants (e.g. ALTER SYSTEM SET max_prepared_transactions = 64, or "
            "in postgresql.conf) and restart PostgreSQL: the setting only changes on restart",
            sink_id=self.sink_id,
        )

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

    def _participant(self, epoch: int | None) -> _partners.Participant | None:
        """This sink as a scale-out participant of ``epoch`` (None when it is not one)."""
        if self._two_phase_part is None or epoch is None:
            return None
        if self._key is None:
            hint = "repartition the DataFrame by the unique index's columns before the sink"
        else:
            hint = (
                "repartition the DataFrame by the key before the sink "
                f"(df.repartition({', '.join(map(repr, self._key))}))"
            )
        return _partners.Participant(
            self.sink_id, epoch, self._two_phase_part, self._shown_table(), hint
        )

    def _watch_connection(self) -> psycopg.Connection[Any]:
        """A connection of its own for a `_partners.Watch` (autocommit)."""
        return psycopg.connect(
            self._dsn,
            autocommit=True,
            connect_timeout=max(1, round(self._connect_timeout_s)),
            application_name="laminar partner watch",
        )

    def _write_rows(
        self, conn: psycopg.Connection[Any], table: TableInfo, plan: CopyPlan, data: pa.Table
    ) -> tuple[int, int]:
        """Append (COPY) or upsert (`_pg_upsert`) ``data``; return (rows, bytes) sent. A
        scale-out participant's write that waits for another partition of its epoch is
        refused (`_partners`) instead of waiting for ever."""
        me = self._participant(self.transaction_state.epoch)
        if me is None:
            return self._write_data(conn, table, plan, data)
        with _partners.Watch(me, conn.info.backend_pid, self._watch_connection) as watch:
            try:
                return self._write_data(conn, table, plan, data)
            except psycopg.Error as e:
                refusal = watch.refusal(e)
                if refusal is None:
                    raise
                raise refusal from e

    def _write_data(
        self, conn: psycopg.Connection[Any], table: TableInfo, plan: CopyPlan, data: pa.Table
    ) -> tuple[int, int]:
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
