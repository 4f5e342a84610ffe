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
class performs its answers with its parts (docs/engine.md, "Package layout"), each given what it
needs as arguments: `Settings` (`_base`, what it was configured with), `Session` (`_session`,
the DSN, the connection and the error mapping), `Readiness` (`_ready`, the start-up checks, the
table and the COPY plan), `RowWriter` (`_rows`, COPY or upsert of a batch) and `Recovery`
(`_recovery`, its prepared transactions and in-doubt resolution). The module is over 500 lines
because the class is the sink's whole public surface (configuration, lifecycle, recovery, the
coordinator's steps), each method a thin driver of its parts.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from typing_extensions import assert_never

from laminar._core import PreparedTxnState, SinkAnswer, epoch_committed
from laminar._faults import crash_point
from laminar._input import check_epoch, materialize
from laminar._redact import redact_dsn, redact_text
from laminar._settings import Setting, is_deferred
from laminar._types import ArrowData
from laminar.errors import (
    AuthorizationError,
    ConfigError,
    DataError,
    InDoubtError,
    LaminarError,
)
from laminar.postgres import _partners
from laminar.postgres._base import DEFAULT_SCHEMA, ColumnsSpec, _SinkBase, parse_settings
from laminar.postgres._deadline import connect
from laminar.postgres._errors import classify
from laminar.postgres._names import TableName
from laminar.postgres._ready import Readiness
from laminar.postgres._recovery import Recovery
from laminar.postgres._rows import RowWriter
from laminar.postgres._session import Session, check_dsn
from laminar.postgres._steps import (
    DEFAULT_SLICE_BYTES,
    PreparedTransaction,
    claim_epoch,
    committed_epoch,
    prepare_transaction,
    record_epoch_totals,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = ["DEFAULT_SCHEMA", "ColumnsSpec", "PostgresSink", "PreparedTransaction"]

log = logging.getLogger("laminar.postgres.sink")


class PostgresSink(_SinkBase):
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
    stream in several); ``statement_timeout_s`` is how long the server may leave one answer
    outstanding (a statement, one COPY chunk, the COMMIT) before the connection is given up — a
    hung server or backend then ends in a retriable `AbortableError` (`InDoubtError` for a
    COMMIT in flight, resolved by recovery), never a writer blocked forever (docs/postgres.md,
    "A hung server").
    """

    _logger_name = "laminar.postgres.sink"

    kind: ClassVar[str] = "postgres"
    #: The parts live in one process: unpickled, the sink builds new ones (`_assemble`).
    _runtime_attrs: ClassVar[tuple[str, ...]] = (
        "_session",
        "_readiness",
        "_rows",
        "_recovery",
        "_txn",
        "_epoch_rows",
        "_epoch_bytes",
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
        statement_timeout_s: float = 30.0,
    ) -> None:
        resolved = None if is_deferred(dsn) else check_dsn(dsn)
        settings = parse_settings(
            table,
            columns,
            sink_id,
            mode=mode,
            key=key,
            two_phase_part=two_phase_part,
            connect_timeout_s=connect_timeout_s,
            slice_bytes=slice_bytes,
            statement_timeout_s=statement_timeout_s,
        )
        super().__init__(settings.sink_id)
        self._dsn_setting: Setting = dsn
        self._settings = settings
        self._assemble(resolved)

    def _assemble(self, resolved: tuple[str, str] | None = None) -> None:
        """Build the parts from the configuration (at construction and when unpickled)."""
        s = self._settings
        self._session = Session(
            self._dsn_setting, s.sink_id, s.connect_timeout, resolved, s.answer_timeout_s
        )
        self._readiness = Readiness(s, self.kind)
        self._rows = RowWriter(s)
        self._recovery = Recovery(s.sink_id, s.two_phase_part)
        self._txn = None
        self._epoch_rows: int | None = 0
        self._epoch_bytes: int | None = 0

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._assemble()

    def partition(self, part: int) -> PostgresSink:
        """This sink as scale-out participant ``part`` (same DSN, table, sink id and settings,
        ``two_phase_part=part``): a new sink sharing nothing live with this one."""
        sink = object.__new__(PostgresSink)
        _SinkBase.__init__(sink, self.sink_id)
        sink._dsn_setting = self._dsn_setting
        sink._settings = replace(self._settings, two_phase_part=part)
        sink._assemble()
        return sink

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
        return self._session.dsn

    def open_connection(self, dsn: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
        """A new connection of the caller's own to this sink's database (or ``dsn``), with the
        sink's connect time-out and its deadline on the server's answers (docs/postgres.md, "A
        hung server") — how a coordinator opens its decision connection. ``kwargs`` go to
        ``psycopg.connect``."""
        kwargs.setdefault("connect_timeout", self._settings.connect_timeout)
        return connect(
            self._session.dsn if dsn is None else dsn,
            answer_timeout_s=self._settings.answer_timeout_s,
            **kwargs,
        )

    def connection_secrets(self) -> tuple[str, ...]:
        """The secret values of the connection string in this process (its password, once
        read; none when it cannot be read): what a message about the server must mask
        (`laminar._redact.redact_text`). With `resolved_dsn`, what a check of the server
        outside the sink needs (`laminar.readiness`); never log either."""
        return self._session.secrets()

    @property
    def table(self) -> TableName:
        """The table as configured (``schema`` None: resolved through ``search_path``)."""
        return self._settings.table_name

    @property
    def columns(self) -> list[str] | dict[str, str] | None:
        """The column mapping as configured."""
        return self._settings.columns

    @property
    def mode(self) -> str:
        """``"append"`` (COPY every row) or ``"upsert"`` (replace rows by `key`)."""
        return self._settings.mode

    @property
    def key(self) -> tuple[str, ...] | None:
        """The upsert key's columns as configured (None in append mode)."""
        return self._settings.key

    @property
    def two_phase_part(self) -> int | None:
        """The partition number of a scale-out participant, or None."""
        return self._settings.two_phase_part

    def __repr__(self) -> str:
        setting = self._dsn_setting
        dsn = repr(setting) if is_deferred(setting) else repr(redact_dsn(str(setting)))
        key = self._settings.key
        upsert = "" if key is None else f", mode='upsert', key={list(key)!r}"
        return (
            f"PostgresSink(dsn={dsn}, table={self._settings.table_name.display()!r}, "
            f"sink_id={self.sink_id!r}{upsert})"
        )

    def gid(self, epoch: int) -> str:
        """The prepared-transaction id this sink uses for ``epoch``."""
        return self._recovery.gid(epoch)

    # -- start-up -----------------------------------------------------------------------------

    def init_transactions(self) -> None:
        """Connect, create the metadata schema on first use, check the table, register the sink,
        read its last committed epoch and resolve an in-doubt commit of this process."""
        self._machine.init()  # refused mid-epoch: finish the epoch first
        self._readiness.ready = None
        self._ensure_ready()
        if self._machine.in_doubt is not None:
            self.recover()
        if self._two_phase_part is not None and self._readiness.max_prepared == 0:
            raise self._readiness.prepared_disabled(self._session.where())
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

    def _ensure_ready(self) -> psycopg.Connection[Any]:
        """Connect; once per process: the start-up checks (`Readiness.start`), which learn the
        last committed epoch."""
        conn = self._session.connection()
        if self._readiness.ready:
            return conn
        last = self._readiness.start(conn, self._session)
        self._machine.learned_last(last)
        self._readiness.ready = True
        return conn

    # -- one epoch ----------------------------------------------------------------------------

    def begin_transaction(self, epoch: int) -> bool:
        """Open ``epoch``'s transaction and claim the epoch; False (nothing open) if the sink id
        already committed it — then nothing must be written."""
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        if self._replayed(epoch):
            return False
        conn = self._ensure_ready()
        try:
            if self._two_phase_part is None:
                claimed = claim_epoch(conn, self.sink_id, epoch)
                current = None if claimed else committed_epoch(conn, self.sink_id)
            else:
                current = committed_epoch(conn, self.sink_id)
                claimed = not epoch_committed(current, epoch)  # the core's replay rule
                me = self._readiness.participant(epoch)
                if claimed and me is not None:
                    _partners.tag(conn, me)  # names this transaction as the epoch's partition
        except psycopg.Error as e:
            self._session.end_transaction_quietly()
            raise self._session.error(
                e, f"claiming epoch {epoch} in laminar.sink_epochs", epoch
            ) from e
        if not claimed:
            self._session.end_transaction_quietly()
            held = self._machine.store_holds(epoch, current)
            assert isinstance(held, SinkAnswer.Skip)  # the core answers a held epoch so
            self._skipped(epoch, held)
            return False
        crash_point("postgres.after_claim")
        self._machine.opened(epoch)
        self._readiness.checked = False
        self._epoch_rows = self._epoch_bytes = 0
        self._recovery.prepare_sent = None
        return True

    def _write_rows(
        self, conn: psycopg.Connection[Any], data: pa.Table, epoch: int | None
    ) -> tuple[int, int]:
        """The batch's rows through `RowWriter`, into the table `Readiness` checked."""
        table = self._readiness.table()
        return self._rows.write(
            conn,
            table,
            self._readiness.plan_for(table, data.schema),
            data,
            me=self._readiness.participant(epoch),
            session=self._session,
            epoch_open=self._machine.writing is not None,
        )

    def write(self, batch: ArrowData) -> None:
        """COPY the batch's rows into the table within the open transaction.

        Columns and types are checked before any row is sent (`ConfigError` naming the table, the
        column and both types), values too (`DataError` naming the column and row); after either
        the transaction is rolled back, so the epoch can be written again with a fixed batch.
        """
        epoch = self._machine.write()  # refused without an open epoch
        conn = self._session.epoch_connection(epoch)
        ready = self._readiness
        try:
            # A stream is read once, here: a retry of this call then fails loudly (a spent
            # reader is refused) instead of writing nothing (laminar._input).
            data = materialize(batch)
            if not ready.checked:
                ready.info = ready.checked_table(conn, self._session.where())
                ready.checked = True
            rows, nbytes = self._write_rows(conn, data, self.transaction_state.epoch)
        except (ConfigError, DataError, AuthorizationError) as e:
            self._abort_after_error()
            if e.epoch is None and e.sink_id is None:
                e.sink_id, e.epoch = self.sink_id, epoch
            raise
        except psycopg.Error as e:
            error = self._session.error(e, f"writing to {ready.shown()}", epoch)
            # Whatever the server refused (a type, a column, a lost connection), the next epoch
            # reads the table's definition again rather than trusting the cached one.
            ready.forget()
            if error.failure_kind != "abortable":
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
                self._session.epoch_connection(epoch),
                self.sink_id,
                self._epoch_rows or 0,
                self._epoch_bytes or 0,
            )
        except psycopg.Error as e:
            error = self._session.error(e, f"recording epoch {epoch} in laminar.sink_epochs", epoch)
            if error.failure_kind != "abortable":
                self._abort_after_error()
            raise error from e

    def prepare_transaction(self) -> PreparedTxnState:
        """End the epoch's transaction with ``PREPARE TRANSACTION``: durable, invisible, and
        still holding its locks until ``commit_transaction`` / ``abort_transaction``."""
        epoch = self._machine.prepare()  # refused without an open epoch
        if self._readiness.max_prepared == 0:
            self._abort_after_error()
            raise self._readiness.prepared_disabled(self._session.where())
        gid = self.gid(epoch)
        self._finish_epoch(epoch)
        crash_point("postgres.before_prepare")
        conn = self._session.epoch_connection(epoch)
        self._recovery.prepare_sent = gid
        try:
            prepare_transaction(conn, gid)
        except psycopg.Error as e:
            failure = classify(e, self._session.conn)
            if failure.connection_lost:
                # The PREPARE may or may not have happened: abort_transaction cleans up the gid.
                self._session.drop()
                raise self._session.error(e, f"preparing {gid}", epoch) from e
            self._recovery.prepare_sent = None
            self._abort_after_error()  # a failed PREPARE TRANSACTION is a ROLLBACK
            if failure.prepared_disabled:
                self._readiness.max_prepared = 0
                raise self._readiness.prepared_disabled(self._session.where()) from e
            raise self._session.error(e, f"preparing {gid}", epoch) from e
        self._machine.prepared(epoch)
        self._recovery.prepared_gid = gid
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
        if isinstance(self._machine.commit(epoch), SinkAnswer.CommitPrepared):
            self._recovery.commit_epoch(epoch, self._machine, self._session, self._read_committed)
            return
        self._finish_epoch(epoch)
        crash_point("postgres.before_commit")
        conn = self._session.epoch_connection(epoch)
        self._machine.commit_started(epoch)
        try:
            conn.commit()
        except psycopg.Error as e:
            lost = classify(e, conn).connection_lost
            if isinstance(self._machine.commit_failed(lost), SinkAnswer.InDoubt):
                self._session.drop()
                raise InDoubtError(
                    redact_text(
                        f"the connection was lost during COMMIT of epoch {epoch}: whether it "
                        f"committed is unknown; recover() reads laminar.sink_epochs to decide "
                        f"({' '.join(str(e).split())})",
                        self._session.secrets(),
                    ),
                    sink_id=self.sink_id,
                    epoch=epoch,
                ) from e
            # The server answered: the transaction is rolled back (e.g. a deferred constraint).
            raise self._session.error(e, f"committing epoch {epoch}", epoch) from e
        self._machine.commit_ok()
        crash_point("postgres.after_commit")

    def abort_transaction(self, epoch: int) -> None:
        """Discard the epoch's transaction (``ROLLBACK``, or ``ROLLBACK PREPARED`` after a
        prepare). Aborting an epoch the sink already rolled back itself is a no-op."""
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        answer = self._machine.abort(epoch)  # the abort has started; refused for another epoch
        match answer:
            case SinkAnswer.Nothing():
                return
            case SinkAnswer.RollbackPrepared():
                self._recovery.rollback_epoch(
                    epoch, self._machine, self._session, self._read_committed
                )
            case SinkAnswer.Rollback():
                self._session.end_transaction_quietly()
                # a PREPARE whose reply was lost: its gid is rolled back if it exists
                self._recovery.rollback_sent(self._machine, self._session, epoch)
                self._machine.abort_ok()
            case _:
                assert_never(answer)

    def _abort_after_error(self) -> None:
        """Roll back after a fatal error in this call, so the sink is usable again."""
        if self._machine.abort_after_error() is not None:
            self._session.end_transaction_quietly()
            self._machine.abort_ok()

    def close(self) -> None:
        """Close the connection; an open (unprepared) transaction is rolled back, a prepared
        one is left for the coordinator to decide."""
        match self._machine.close():
            case SinkAnswer.AbortOpen(epoch):
                with contextlib.suppress(LaminarError):
                    self.abort_transaction(epoch)
            case SinkAnswer.LeavePrepared():
                log.info(
                    "sink %s: closing with prepared transaction %s left for the coordinator",
                    self.sink_id,
                    self._recovery.prepared_gid,
                )
            case SinkAnswer.Nothing():
                pass
            case unknown:
                assert_never(unknown)
        self._session.drop()
        self._readiness.ready = None

    # -- recovery and state -------------------------------------------------------------------

    def _read_committed(self, epoch: int) -> bool:
        return epoch_committed(self.last_committed_epoch(), epoch)

    def last_committed_epoch(self) -> int | None:
        """The last epoch committed under this sink id, read from ``laminar.sink_epochs``."""
        if not self._readiness.ready and self._machine.between_epochs:
            self._ensure_ready()
        try:
            with self._session.idle(self._machine.writing is not None) as conn:
                return committed_epoch(conn, self.sink_id)
        except psycopg.Error as e:
            raise self._session.error(e, "reading laminar.sink_epochs") from e

    def recover(self) -> int | None:
        """Resolve an in-doubt commit (or abort) from the durable record; return the last
        committed epoch.

        After a lost COMMIT, ``laminar.sink_epochs`` says whether the epoch committed. After a
        lost COMMIT/ROLLBACK PREPARED, a gid still in ``pg_prepared_xacts`` is completed with the
        decision that was being sent; a gid that is gone is read from ``laminar.sink_epochs``.
        """
        answer = self._machine.recover()
        if isinstance(answer, SinkAnswer.ReadLast):
            last = self.last_committed_epoch()
            self._machine.learned_last(last)
            return last
        committed, last = self._recovery.resolve(
            answer.epoch, answer.commit, self._session, self._machine.writing is not None
        )
        self._machine.resolved(committed, last)
        self._recovery.prepared_gid = None
        return last

    # -- two-phase participants: listing and resolving -------------------------------------------

    def prepared_transactions(self) -> list[PreparedTransaction]:
        """This sink id's prepared transactions in ``pg_prepared_xacts``, oldest first, with
        their age (for the coordinator, the resolution watcher and ``laminar status``)."""
        return self._recovery.list(self._session, self._machine.writing is not None)

    def commit_prepared(self, gid: str) -> bool:
        """``COMMIT PREPARED gid`` for one of this sink's gids; False if it no longer exists."""
        return self._end_prepared(gid, commit=True)

    def rollback_prepared(self, gid: str) -> bool:
        """``ROLLBACK PREPARED gid`` for one of this sink's gids; False if it no longer exists."""
        return self._end_prepared(gid, commit=False)

    def _end_prepared(self, gid: str, *, commit: bool) -> bool:
        """End one of this sink's gids: its own prepared epoch through the lifecycle
        (`commit_transaction` / `abort_transaction`), any other directly."""
        self._recovery.own_gid(gid)
        epoch = self._machine.prepared_epoch
        if epoch is not None and gid == self._recovery.prepared_gid:
            (self.commit_transaction if commit else self.abort_transaction)(epoch)
            return True
        return self._recovery.finish(gid, commit, self._session, self._machine.writing is not None)

    # -- for a coordinator: this sink's steps inside a transaction it owns ------------------------

    def check_in_transaction(self, conn: psycopg.Connection[Any], schema: pa.Schema) -> None:
        """Lock the table on ``conn`` (in its current transaction), check its definition (read
        again if it changed) and plan the COPY of ``schema``: a `ConfigError` here comes before
        any byte is sent anywhere. A coordinator calls it first, then `write_in_transaction`
        with ``checked=True`` in the same transaction."""
        ready = self._readiness
        try:
            ready.info = ready.checked_table(conn, self._session.where())
            ready.plan_for(ready.info, schema)
        except psycopg.Error as e:
            ready.forget()
            raise self._session.error(e, f"checking table {ready.shown()}") from e

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
        ready = self._readiness
        try:
            data = materialize(batch)
            if not claim_epoch(conn, self.sink_id, epoch):
                return None
            if not checked or ready.info is None:
                ready.info = ready.checked_table(conn, self._session.where())
            rows, nbytes = self._write_rows(conn, data, self.transaction_state.epoch)
            record_epoch_totals(conn, self.sink_id, rows, nbytes)
        except psycopg.Error as e:
            error = self._session.error(e, f"writing epoch {epoch} to {ready.shown()}", epoch)
            ready.forget()
            raise error from e
        return rows
