"""`PostgresSink`'s recovery: its prepared transaction ended (this sink's own, or one of its
gids), and the resolution of an in-doubt commit on the core's `PostgresInDoubtMachine`
(docs/protocol.md §1), whose commands are performed here."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from typing_extensions import assert_never

from laminar._core import Command, Event, PostgresInDoubtMachine, SinkTransaction
from laminar._faults import crash_point
from laminar.engine.loop import drive, perform_driver_side
from laminar.errors import (
    AbortableError,
    ConfigError,
    FatalError,
    InDoubtError,
    LaminarError,
)
from laminar.postgres._errors import classify
from laminar.postgres._names import gid_prefix, make_gid
from laminar.postgres._session import Session
from laminar.postgres._steps import (
    PreparedTransaction,
    committed_epoch,
    list_prepared,
)
from laminar.postgres._steps import commit_prepared as _commit_prepared
from laminar.postgres._steps import rollback_prepared as _rollback_prepared

if TYPE_CHECKING:
    from laminar._core import _PostgresInDoubtCommand

__all__ = ["Recovery"]

log = logging.getLogger("laminar.postgres.sink")

#: Whether the sink id committed an epoch, read from ``laminar.sink_epochs``.
ReadCommitted = Callable[[int], bool]


class Recovery:
    """One sink's prepared transactions: the gid of the one it prepared (and of a PREPARE whose
    reply was lost), their end by COMMIT/ROLLBACK PREPARED, and in-doubt resolution."""

    def __init__(self, sink_id: str, part: int | None) -> None:
        self.sink_id = sink_id
        self.part = part
        #: The gid this sink prepared and has not ended yet.
        self.prepared_gid: str | None = None
        #: The gid of a PREPARE sent whose reply is not known yet.
        self.prepare_sent: str | None = None

    def gid(self, epoch: int) -> str:
        """The prepared-transaction id this sink uses for ``epoch``."""
        return make_gid(self.sink_id, epoch, self.part or 0)

    # -- this sink's prepared transaction ----------------------------------------------------------

    def commit_epoch(
        self,
        epoch: int,
        machine: SinkTransaction,
        session: Session,
        read_committed: ReadCommitted,
    ) -> None:
        """``COMMIT PREPARED`` of the epoch's gid (the machine answered "commit_prepared")."""
        gid = self.prepared_gid or self.gid(epoch)
        machine.commit_started(epoch)
        try:
            found = _commit_prepared(session.connection(), gid)
        except (psycopg.Error, LaminarError) as e:
            lost = (isinstance(e, LaminarError) and e.failure_kind == "abortable") or (
                isinstance(e, psycopg.Error) and classify(e, session.conn).connection_lost
            )
            # in doubt, lost or not, with the decision kept: recover() completes the COMMIT
            # PREPARED
            machine.commit_failed(lost)
            if lost:
                session.drop()
                raise InDoubtError(
                    f"COMMIT PREPARED {gid!r} did not complete (the server could not be reached "
                    "or the connection was lost): recover() completes it",
                    sink_id=self.sink_id,
                    epoch=epoch,
                ) from e
            if isinstance(e, LaminarError):
                raise
            raise session.error(e, f"COMMIT PREPARED {gid!r}", epoch) from e
        if not found:
            # Someone else resolved it (a watcher, the CLI): the epoch record says how.
            committed = read_committed(epoch)
            machine.commit_overtaken(committed)
            self.prepared_gid = None
            if not committed:
                raise AbortableError(
                    f"prepared transaction {gid!r} was rolled back by another process before "
                    "this commit; the epoch can be written again",
                    sink_id=self.sink_id,
                    epoch=epoch,
                )
            return
        self.prepared_gid = None
        machine.commit_ok()
        crash_point("postgres.after_commit")

    def rollback_epoch(
        self,
        epoch: int,
        machine: SinkTransaction,
        session: Session,
        read_committed: ReadCommitted,
    ) -> None:
        """``ROLLBACK PREPARED`` of the epoch's gid (the machine answered
        "rollback_prepared": the abort has started)."""
        gid = self.prepared_gid or self.gid(epoch)
        try:
            found = _rollback_prepared(session.connection(), gid)
        except (psycopg.Error, LaminarError) as e:
            machine.abort_failed()
            if isinstance(e, psycopg.Error) and classify(e, session.conn).connection_lost:
                session.drop()
            if isinstance(e, LaminarError):
                raise
            raise session.error(e, f"ROLLBACK PREPARED {gid!r}", epoch) from e
        self.prepared_gid = None
        if not found and read_committed(epoch):
            machine.abort_overtaken()
            raise FatalError(
                f"prepared transaction {gid!r} was committed by another process before this "
                "abort: the epoch is committed",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        machine.abort_ok()

    def rollback_sent(self, machine: SinkTransaction, session: Session, epoch: int) -> None:
        """After a PREPARE whose reply was lost: roll its gid back if it exists (the abort has
        started; the caller reports it ok)."""
        sent, self.prepare_sent = self.prepare_sent, None
        if sent is None:
            return
        try:
            with session.idle(machine.writing is not None) as conn:
                _rollback_prepared(conn, sent)
        except (psycopg.Error, LaminarError) as e:
            machine.abort_failed()
            self.prepared_gid = sent
            if isinstance(e, LaminarError):
                raise
            raise session.error(e, f"ROLLBACK PREPARED {sent!r}", epoch) from e

    # -- in doubt -----------------------------------------------------------------------------

    def resolve(
        self, epoch: int, commit: bool, session: Session, epoch_open: bool
    ) -> tuple[bool, int | None]:
        """Resolve the in-doubt end of ``epoch`` (``commit``: the decision being sent): return
        whether it committed and the last committed epoch (the caller then forgets
        `prepared_gid`). The core's `PostgresInDoubtMachine`
        decides (docs/protocol.md §1): finish the pending gid with the decision that was being
        sent, then ``laminar.sink_epochs`` says; this performs its commands."""
        machine = PostgresInDoubtMachine(self.sink_id, epoch, self.prepared_gid, commit=commit)
        try:
            with session.idle(epoch_open) as conn:
                drive(machine, lambda c: self._perform(c, conn))
        except psycopg.Error as e:
            raise session.error(e, f"recovering epoch {epoch}", epoch) from e
        committed, last = machine.committed, machine.last
        assert committed is not None  # the machine ended ok: it read laminar.sink_epochs
        return committed, last

    def _perform(self, c: _PostgresInDoubtCommand, conn: psycopg.Connection[Any]) -> Event:
        """One command of the in-doubt machine, on ``conn``."""
        match c:
            case Command.Reached() | Command.Log() | Command.Sleep():
                return perform_driver_side(c, log)
            case Command.CommitPrepared(gid):
                return Event.found(_commit_prepared(conn, gid))
            case Command.RollbackPrepared(gid):
                return Event.found(_rollback_prepared(conn, gid))
            case Command.ReadSinkEpochs():
                return Event.progress([(self.sink_id, committed_epoch(conn, self.sink_id))])
            case _:
                assert_never(c)

    # -- any of this sink's gids ----------------------------------------------------------------

    def list(self, session: Session, epoch_open: bool) -> list[PreparedTransaction]:
        """This sink id's prepared transactions in ``pg_prepared_xacts``, oldest first."""
        try:
            with session.idle(epoch_open) as conn:
                return list_prepared(conn, gid_prefix(self.sink_id))
        except psycopg.Error as e:
            raise session.error(e, "listing prepared transactions") from e

    def own_gid(self, gid: str) -> None:
        """`ConfigError` unless ``gid`` is one of this sink's."""
        if not gid.startswith(gid_prefix(self.sink_id)):
            raise ConfigError(
                f"{gid!r} is not a prepared transaction of sink {self.sink_id!r} (its gids start "
                f"with {gid_prefix(self.sink_id)!r})",
                sink_id=self.sink_id,
            )

    def finish(self, gid: str, commit: bool, session: Session, epoch_open: bool) -> bool:
        """``COMMIT PREPARED`` (``commit``) or ``ROLLBACK PREPARED`` of ``gid``, not this
        sink's open one; False if it no longer exists."""
        finish = _commit_prepared if commit else _rollback_prepared
        verb = "COMMIT PREPARED" if commit else "ROLLBACK PREPARED"
        try:
            with session.idle(epoch_open) as conn:
                return finish(conn, gid)
        except psycopg.Error as e:
            raise session.error(e, f"{verb} {gid!r}") from e
