"""``PostgresSink``: each epoch lands in a PostgreSQL table exactly once (docs/protocol.md §2).

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

The core's `SinkTransaction` decides each step of the lifecycle (docs/engine.md, "The sink's
transaction": skip a replay, which commit, what a failed COMMIT means, what close does); this
module performs its answers. It holds the lifecycle; the class's pieces live beside it
(docs/engine.md, "Package layout"): `_base` (settings, properties, the error mapping, the
connection), `_ready` (start-up, the table, the COPY of an epoch's rows) and `_recovery`
(in-doubt resolution, prepared transactions).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import ClassVar

import psycopg

from laminar._core import PreparedTxnState, SinkAnswer
from laminar._faults import crash_point
from laminar._input import check_epoch, materialize
from laminar._redact import redact_text
from laminar._types import ArrowData
from laminar.errors import (
    AbortableError,
    AuthorizationError,
    ConfigError,
    DataError,
    InDoubtError,
    LaminarError,
)
from laminar.postgres import _partners
from laminar.postgres._base import DEFAULT_SCHEMA, ColumnsSpec
from laminar.postgres._errors import is_connection_failure, sqlstate_of
from laminar.postgres._recovery import _Recovery
from laminar.postgres._steps import (
    PreparedTransaction,
    claim_epoch,
    committed_epoch,
    prepare_transaction,
    record_epoch_totals,
)
from laminar.postgres._steps import rollback_prepared as _rollback_prepared

__all__ = ["DEFAULT_SCHEMA", "ColumnsSpec", "PostgresSink", "PreparedTransaction"]

log = logging.getLogger("laminar.postgres.sink")


class PostgresSink(_Recovery):
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
        "_txn",
        "_prepared_gid",
        "_prepare_sent",
        "_epoch_rows",
        "_epoch_bytes",
        "_max_prepared",
        "_resolved_dsn",
        "_password",
    )

    def init_transactions(self) -> None:
        """Connect, create the metadata schema on first use, check the table, register the sink,
        read its last committed epoch and resolve an in-doubt commit of this process."""
        self._machine.init()  # refused mid-epoch: finish the epoch first
        self._ready = None
        self._ensure_ready()
        if self._machine.in_doubt is not None:
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

    # -- one epoch ----------------------------------------------------------------------------

    def begin_transaction(self, epoch: int) -> bool:
        """Open ``epoch``'s transaction and claim the epoch; False (nothing open) if the sink id
        already committed it — then nothing must be written."""
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        answer = self._machine.begin(epoch)  # refused while an epoch is open
        if answer.kind == "recover":
            self.recover()
            answer = self._machine.begin(epoch)
        if answer.kind == "skip":
            return self._skip(epoch, answer)
        conn = self._ensure_ready()
        try:
            if self._two_phase_part is None:
                claimed = claim_epoch(conn, self.sink_id, epoch)
                current = None if claimed else committed_epoch(conn, self.sink_id)
            else:
                current = committed_epoch(conn, self.sink_id)
                claimed = current is None or current < epoch
                me = self._participant(epoch)
                if claimed and me is not None:
                    _partners.tag(conn, me)  # names this transaction as the epoch's partition
        except psycopg.Error as e:
            self._end_transaction_quietly()
            raise self._err(e, f"claiming epoch {epoch} in laminar.sink_epochs", epoch) from e
        if not claimed:
            self._end_transaction_quietly()
            return self._skip(epoch, self._machine.store_holds(epoch, current))
        crash_point("postgres.after_claim")
        self._machine.opened(epoch)
        self._table_checked = False
        self._epoch_rows = self._epoch_bytes = 0
        self._prepare_sent = None
        return True

    def _skip(self, epoch: int, answer: SinkAnswer) -> bool:
        """The machine's "skip": the epoch is committed already; warn when it is older."""
        if answer.older:
            log.warning(
                "sink %s: epoch %d is older than the last committed epoch %d; Spark only replays "
                "the last batch, so a query restarted from another checkpoint may be writing",
                self.sink_id,
                epoch,
                answer.last,
            )
        return False

    def write(self, batch: ArrowData) -> None:
        """COPY the batch's rows into the table within the open transaction.

        Columns and types are checked before any row is sent (`ConfigError` naming the table, the
        column and both types), values too (`DataError` naming the column and row); after either
        the transaction is rolled back, so the epoch can be written again with a fixed batch.
        """
        epoch = self._machine.write()  # refused without an open epoch
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
        self._machine.wrote(rows, nbytes)

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
        epoch = self._machine.prepare()  # refused without an open epoch
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
        self._machine.prepared(epoch)
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
        # refused for another epoch or state, and for a scale-out participant's one-phase commit
        if self._machine.commit(epoch).kind == "commit_prepared":
            self._commit_prepared_epoch(epoch)
            return
        self._finish_epoch(epoch)
        crash_point("postgres.before_commit")
        conn = self._epoch_connection(epoch)
        self._machine.commit_started(epoch)
        try:
            conn.commit()
        except psycopg.Error as e:
            lost = is_connection_failure(e, conn)
            if self._machine.commit_failed(lost).kind == "in_doubt":
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
            raise self._err(e, f"committing epoch {epoch}", epoch) from e
        self._machine.commit_ok()
        crash_point("postgres.after_commit")

    def abort_transaction(self, epoch: int) -> None:
        """Discard the epoch's transaction (``ROLLBACK``, or ``ROLLBACK PREPARED`` after a
        prepare). Aborting an epoch the sink already rolled back itself is a no-op."""
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        answer = self._machine.abort(epoch)  # the abort has started; refused for another epoch
        if answer.kind == "nothing":
            return
        if answer.kind == "rollback_prepared":
            self._rollback_prepared_epoch(epoch)
            return
        self._end_transaction_quietly()
        sent, self._prepare_sent = self._prepare_sent, None
        if sent is not None:
            # A PREPARE whose reply was lost: roll the gid back if it exists.
            try:
                with self._idle_connection() as conn:
                    _rollback_prepared(conn, sent)
            except (psycopg.Error, LaminarError) as e:
                self._machine.abort_failed()
                self._prepared_gid = sent
                if isinstance(e, LaminarError):
                    raise
                raise self._err(e, f"ROLLBACK PREPARED {sent!r}", epoch) from e
        self._machine.abort_ok()

    def _abort_after_error(self) -> None:
        """Roll back after a fatal error in this call, so the sink is usable again."""
        if self._machine.abort_after_error() is not None:
            self._end_transaction_quietly()
            self._machine.abort_ok()

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

    def close(self) -> None:
        """Close the connection; an open (unprepared) transaction is rolled back, a prepared
        one is left for the coordinator to decide."""
        answer = self._machine.close()
        if answer.kind == "abort_open" and answer.epoch is not None:
            with contextlib.suppress(LaminarError):
                self.abort_transaction(answer.epoch)
        elif answer.kind == "leave_prepared":
            log.info(
                "sink %s: closing with prepared transaction %s left for the coordinator",
                self.sink_id,
                self._prepared_gid,
            )
        self._drop_connection()
        self._ready = None
