"""`PostgresSink`'s readiness: its start-up checks (the laminar schema, the table, the sink's
registration, ``max_prepared_transactions``) once per process, the table each epoch writes
(re-checked in each transaction, read again when it changed) and the COPY plan of a batch."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import psycopg

from laminar.errors import AuthorizationError, ConfigError, IllegalStateError
from laminar.metadata import ensure_schema, register_sink
from laminar.postgres import _partners
from laminar.postgres import _upsert as _pg_upsert
from laminar.postgres._base import DEFAULT_SCHEMA, Settings
from laminar.postgres._names import render_identifier
from laminar.postgres._session import IDLE, Session
from laminar.postgres._steps import (
    CopyPlan,
    TableInfo,
    committed_epoch,
    current_table,
    load_table,
    plan_copy,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = ["Readiness"]

log = logging.getLogger("laminar.postgres.sink")

#: The start-up checks scale-out participants passed in this process, by what they depend on:
#: the table read and checked, the sink registered, ``max_prepared_transactions``. A task's
#: participant is a new sink per attempt (`laminar.protocol.distributed.postgres_participant`)
#: and a Spark Python worker runs one task after another, so without this each task paid them
#: again; a long-lived sink passes them once per process too. Each epoch's transaction still
#: locks the table and compares its definition (`Readiness.checked_table`), reading it again
#: when it changed.
_PARTICIPANTS_READY: dict[tuple[Any, ...], tuple[TableInfo, int]] = {}


class Readiness:
    """What one sink knows of its table and server in this process: whether the start-up checks
    passed, the table's definition, the COPY plan of the last schema, whether the open
    transaction checked the table, and ``max_prepared_transactions``."""

    def __init__(self, settings: Settings, kind: str) -> None:
        self.settings = settings
        self.kind = kind
        #: Whether the start-up checks passed in this process (None: not tried).
        self.ready: bool | None = None
        #: The table's definition as last read (None: to be read again).
        self.info: TableInfo | None = None
        #: Whether the open transaction holds the table's lock and checked its definition.
        self.checked = False
        self.plan: tuple[pa.Schema, TableInfo, CopyPlan] | None = None
        #: The server's ``max_prepared_transactions`` (None: not read yet).
        self.max_prepared: int | None = None

    # -- start-up -----------------------------------------------------------------------------

    def start(self, conn: psycopg.Connection[Any], session: Session) -> int | None:
        """Once per process: create/upgrade the metadata schema, resolve and check the table,
        register the sink; return the last committed epoch. The caller sets `ready`."""
        s = self.settings
        where = session.where()
        memo_key = None
        if s.two_phase_part is not None:
            memo_key = (session.dsn, s.table_name, s.sink_id, s.mode, s.key)
        passed = _PARTICIPANTS_READY.get(memo_key) if memo_key is not None else None
        try:
            if conn.info.transaction_status != IDLE:
                conn.rollback()
            if passed is not None:
                info, self.max_prepared = passed
                with conn.transaction():
                    last = committed_epoch(conn, s.sink_id)
            else:
                ensure_schema(conn, where=where)
                with conn.transaction():
                    info = load_table(conn, s.table_name, where)
                    self.check(info, where)
                    if s.key is not None:
                        _pg_upsert.check_privileges(conn, info, where)
                    config = self._registry_config(info, session.conninfo())
                    previous = register_sink(conn, s.sink_id, self.kind, config)
                    self._check_registered_table(info, previous)
                    last = committed_epoch(conn, s.sink_id)
                    setting = conn.execute("SELECT current_setting('max_prepared_transactions')")
                    row = setting.fetchone()
                    self.max_prepared = int(row[0]) if row else 0
                if memo_key is not None:
                    _PARTICIPANTS_READY[memo_key] = (info, self.max_prepared)
        except psycopg.Error as e:
            raise session.error(e, f"preparing sink {s.sink_id!r} in {where}") from e
        self.info = info
        self.plan = None
        return last

    def check(self, info: TableInfo, where: str) -> None:
        """The table may be written by this sink: INSERT granted, the schema the default sink id
        assumes, the upsert key a unique index's columns."""
        s = self.settings
        if not info.can_insert:
            raise AuthorizationError(
                f"the role of {where} may not INSERT into {info.display}: "
                f"GRANT INSERT ON {info.display} TO <role>",
                sink_id=s.sink_id,
            )
        unqualified_default = s.sink_id_defaulted and s.table_name.schema is None
        if unqualified_default and info.schema != DEFAULT_SCHEMA:
            raise ConfigError(
                f"table {s.table_name.display()} resolves to {info.display} through "
                f"search_path, but the default sink id assumes schema {DEFAULT_SCHEMA!r} "
                f"({s.sink_id}); write table={info.display!r} or pass sink_id=",
                sink_id=s.sink_id,
            )
        if s.key is not None:
            try:
                _pg_upsert.resolve_key(info, s.key)
            except ConfigError as e:
                e.sink_id = s.sink_id
                raise

    def _registry_config(self, info: TableInfo, params: dict[str, Any]) -> dict[str, Any]:
        s = self.settings
        upsert = {} if s.key is None else {"mode": s.mode, "key": list(s.key)}
        return {
            **upsert,
            "table": [info.schema, info.name],
            "columns": s.columns,
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
            f"sink id {self.settings.sink_id!r} is registered for table {before}, not "
            f"{info.display}: its committed epochs belong to that table, so writing here would "
            "skip them. Pass another sink_id= for this table (or, to re-point the sink on "
            "purpose, delete its rows from laminar.sinks and laminar.sink_epochs)",
            sink_id=self.settings.sink_id,
        )

    def prepared_disabled(self, where: str) -> ConfigError:
        """The error of a server whose ``max_prepared_transactions`` is 0."""
        return ConfigError(
            f"max_prepared_transactions is 0 on the server of {where}, so PREPARE "
            "TRANSACTION is disabled. Set max_prepared_transactions to at least the number of "
            "concurrent participants (e.g. ALTER SYSTEM SET max_prepared_transactions = 64, or "
            "in postgresql.conf) and restart PostgreSQL: the setting only changes on restart",
            sink_id=self.settings.sink_id,
        )

    # -- the table of an epoch ----------------------------------------------------------------

    def table(self) -> TableInfo:
        """The table's definition; `IllegalStateError` before it was read."""
        if self.info is None:
            raise IllegalStateError(
                "the target table has not been read yet: call begin_transaction(epoch) first",
                sink_id=self.settings.sink_id,
            )
        return self.info

    def shown(self) -> str:
        """The table as messages name it."""
        info = self.info
        return info.display if info is not None else self.settings.table_name.display()

    def forget(self) -> None:
        """Drop the cached definition and plan: the next write reads the table again."""
        self.info = None
        self.plan = None

    def checked_table(self, conn: psycopg.Connection[Any], where: str) -> TableInfo:
        """The table as this transaction writes it: locked, its definition compared with the
        cached one and read again when it changed (`_pg_steps.current_table`; the COPY plan
        follows: `plan_for` re-plans for a new definition)."""
        cached = self.info
        info = current_table(conn, cached, self.settings.table_name, where)
        if info is not cached:
            if cached is not None:
                log.warning(
                    "sink %s: the definition of table %s changed since it was read; writing "
                    "with the new one",
                    self.settings.sink_id,
                    info.display,
                )
            self.check(info, where)
        return info

    def plan_for(self, table: TableInfo, schema: pa.Schema) -> CopyPlan:
        """The COPY plan of ``schema`` into ``table`` (kept while both stay the same)."""
        cached = self.plan
        if cached is not None and cached[1] is table and cached[0].equals(schema):
            return cached[2]
        plan = plan_copy(table, schema, self.settings.columns)
        if self.settings.key is not None:
            _pg_upsert.check_key_in_plan(table, plan, self.settings.key)
        self.plan = (schema, table, plan)
        return plan

    def participant(self, epoch: int | None) -> _partners.Participant | None:
        """This sink as a scale-out participant of ``epoch`` (None when it is not one)."""
        s = self.settings
        if s.two_phase_part is None or epoch is None:
            return None
        if s.key is None:
            hint = "repartition the DataFrame by the unique index's columns before the sink"
        else:
            hint = (
                "repartition the DataFrame by the key before the sink "
                f"(df.repartition({', '.join(map(repr, s.key))}))"
            )
        return _partners.Participant(s.sink_id, epoch, s.two_phase_part, self.shown(), hint)
