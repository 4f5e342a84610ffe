"""`PostgresSink`'s recovery: the last committed epoch from ``laminar.sink_epochs``, the
resolution of an in-doubt commit on the core's `PostgresInDoubtMachine` (docs/protocol.md §1),
and ending a prepared transaction — this sink's own, or a participant's by gid."""

from __future__ import annotations

import logging

import psycopg

from laminar._core import Command, Event, PostgresInDoubtMachine, epoch_committed
from laminar._faults import crash_point
from laminar.errors import (
    AbortableError,
    ConfigError,
    FatalError,
    InDoubtError,
    LaminarError,
)
from laminar.postgres._errors import is_connection_failure
from laminar.postgres._names import (
    gid_prefix,
)
from laminar.postgres._ready import _Ready
from laminar.postgres._steps import (
    PreparedTransaction,
    committed_epoch,
    list_prepared,
)
from laminar.postgres._steps import commit_prepared as _commit_prepared
from laminar.postgres._steps import rollback_prepared as _rollback_prepared
from laminar.protocol.driver import drive, perform_driver_side

log = logging.getLogger("laminar.postgres.sink")


class _Recovery(_Ready):
    """In-doubt resolution and prepared transactions."""

    def _commit_prepared_epoch(self, epoch: int) -> None:
        gid = self._prepared_gid or self.gid(epoch)
        self._machine.commit_started(epoch)
        try:
            found = _commit_prepared(self._connection(), gid)
        except (psycopg.Error, LaminarError) as e:
            lost = isinstance(e, AbortableError) or (
                isinstance(e, psycopg.Error) and is_connection_failure(e, self._conn)
            )
            # in doubt, lost or not, with the decision kept: recover() completes the COMMIT
            # PREPARED
            self._machine.commit_failed(lost)
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
            committed = self._read_committed(epoch)
            self._machine.commit_overtaken(committed)
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
        self._machine.commit_ok()
        crash_point("postgres.after_commit")

    def _rollback_prepared_epoch(self, epoch: int) -> None:
        gid = self._prepared_gid or self.gid(epoch)
        # the abort has started (SinkTransaction.abort answered "rollback_prepared")
        try:
            found = _rollback_prepared(self._connection(), gid)
        except (psycopg.Error, LaminarError) as e:
            self._machine.abort_failed()
            if isinstance(e, psycopg.Error) and is_connection_failure(e, self._conn):
                self._drop_connection()
            if isinstance(e, LaminarError):
                raise
            raise self._err(e, f"ROLLBACK PREPARED {gid!r}", epoch) from e
        self._prepared_gid = None
        if not found and self._read_committed(epoch):
            self._machine.abort_overtaken()
            raise FatalError(
                f"prepared transaction {gid!r} was committed by another process before this "
                "abort: the epoch is committed",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        self._machine.abort_ok()

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
        if not self._ready and self._machine.between_epochs:
            self._ensure_ready()

    def recover(self) -> int | None:
        """Resolve an in-doubt commit (or abort) from the durable record; return the last
        committed epoch.

        After a lost COMMIT, ``laminar.sink_epochs`` says whether the epoch committed. After a
        lost COMMIT/ROLLBACK PREPARED, a gid still in ``pg_prepared_xacts`` is completed with the
        decision that was being sent; a gid that is gone is read from ``laminar.sink_epochs``.
        """
        answer = self._machine.recover()
        if answer.kind == "read_last":
            last = self.last_committed_epoch()
            self._machine.learned_last(last)
            return last
        epoch = answer.epoch
        assert epoch is not None
        # the core's PostgresInDoubtMachine decides (docs/protocol.md §1): finish the pending gid
        # with the decision that was being sent, then laminar.sink_epochs says; this performs
        gid = self._prepared_gid
        machine = PostgresInDoubtMachine(self.sink_id, epoch, gid, commit=answer.commit)
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
        self._machine.resolved(committed, last)
        self._prepared_gid = None
        return last

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
        epoch = self._machine.prepared_epoch
        if epoch is not None and gid == self._prepared_gid:
            self.commit_transaction(epoch)
            return True
        try:
            with self._idle_connection() as conn:
                return _commit_prepared(conn, gid)
        except psycopg.Error as e:
            raise self._err(e, f"COMMIT PREPARED {gid!r}") from e

    def rollback_prepared(self, gid: str) -> bool:
        """``ROLLBACK PREPARED gid`` for one of this sink's gids; False if it no longer exists."""
        self._own_gid(gid)
        epoch = self._machine.prepared_epoch
        if epoch is not None and gid == self._prepared_gid:
            self.abort_transaction(epoch)
            return True
        try:
            with self._idle_connection() as conn:
                return _rollback_prepared(conn, gid)
        except psycopg.Error as e:
            raise self._err(e, f"ROLLBACK PREPARED {gid!r}") from e
