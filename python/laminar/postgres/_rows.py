"""`PostgresSink`'s rows: a batch sent in the open transaction, by COPY (append mode) or through
the upsert's staging table (`_upsert`); a scale-out participant's write is watched for a partner
it would wait for (`_partners`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from laminar.postgres import _partners
from laminar.postgres import _upsert as _pg_upsert
from laminar.postgres._base import Settings
from laminar.postgres._session import Session
from laminar.postgres._steps import CopyPlan, TableInfo, copy_batch

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = ["RowWriter"]


class RowWriter:
    """Sends one sink's batches into its table, on the connection it is given."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def write(
        self,
        conn: psycopg.Connection[Any],
        table: TableInfo,
        plan: CopyPlan,
        data: pa.Table,
        *,
        me: _partners.Participant | None,
        session: Session,
        epoch_open: bool,
    ) -> tuple[int, int]:
        """Append (COPY) or upsert ``data``; return (rows, bytes) sent. ``me``: the sink as a
        scale-out participant of the epoch, whose write that waits for another partition of its
        epoch is refused (`_partners`) instead of waiting for ever. ``session`` opens the
        watch's and the staging table's connections; ``epoch_open``: the sink's own connection
        holds an epoch's transaction (so those use connections of their own)."""
        if me is None:
            return self._write_data(conn, table, plan, data, session, epoch_open)
        with _partners.Watch(me, conn.info.backend_pid, session.watch_connection) as watch:
            try:
                return self._write_data(conn, table, plan, data, session, epoch_open)
            except psycopg.Error as e:
                refusal = watch.refusal(e)
                if refusal is None:
                    raise
                raise refusal from e

    def _write_data(
        self,
        conn: psycopg.Connection[Any],
        table: TableInfo,
        plan: CopyPlan,
        data: pa.Table,
        session: Session,
        epoch_open: bool,
    ) -> tuple[int, int]:
        s = self.settings
        if s.key is None:
            return copy_batch(conn, table, plan, data, slice_bytes=s.slice_bytes)

        def create_stage(statement: sql.Composed) -> None:
            """Create upsert mode's staging table on a connection without the epoch's
            transaction, committed at once (`_pg_upsert`); a concurrent writer creating it too
            is no error."""
            with session.idle(epoch_open) as side:
                try:
                    side.execute(statement)
                    side.commit()
                except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
                    side.rollback()

        return _pg_upsert.upsert_batch(
            conn,
            table,
            plan,
            data,
            s.key,
            stage_id=f"{s.sink_id}\0{s.two_phase_part or 0}",
            create_stage=create_stage,
            slice_bytes=s.slice_bytes,
        )
