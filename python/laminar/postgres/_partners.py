"""A scale-out participant that waits for a row another partition of its epoch wrote: found
and refused with a `DataError`, instead of a batch that hangs (docs/postgres.md, "Upsert mode";
docs/protocol.md §4, task step d).

The partitions of one epoch write in parallel, each in a transaction that ends with ``PREPARE
TRANSACTION`` and stays open — holding its row locks — until the epoch's decision, which waits
for every partition. When two partitions write rows that conflict in a unique index of the table
(in upsert mode: the same key), the second one's statement waits for the first one's
transaction: a wait only the decision ends, while the decision waits for the waiting partition.
PostgreSQL sees no deadlock (a prepared transaction waits for nothing; the decision waits
outside the database), so the batch would hang.

Each participant's transaction first takes a shared, transaction-scoped advisory lock named
after its sink and epoch (`tag`: it names the sessions, and the prepared transactions, of the
epoch's partitions). While one of its writes runs longer than `FIRST_LOOK_S`, a `Watch` thread
looks, from a connection of its own, at what the write waits for: a prepared transaction whose
gid is another partition's of the same sink and epoch, or a session holding the same tag (a
partition still writing, which will prepare). Either way it cancels the statement and the write
is refused with a `DataError` naming both partitions and the fix. A deadlock PostgreSQL finds
first between two such partitions is refused the same way. No other wait is touched: a
partition waiting for a transaction of another writer waits as it always did.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psycopg

from laminar.errors import DataError
from laminar.postgres._names import make_gid, parse_gid

__all__ = ["FIRST_LOOK_S", "Participant", "Watch", "tag"]

log = logging.getLogger("laminar.postgres.sink")

#: When a write's first look happens: before PostgreSQL's own deadlock check (its
#: ``deadlock_timeout`` is 1 s by default), so that two partitions waiting for each other are
#: named, not one of them aborted as a deadlock victim.
FIRST_LOOK_S = 0.5
#: How often a write still running is looked at again.
LOOK_EVERY_S = 0.5

_TAG = "SELECT pg_advisory_xact_lock_shared(hashtextextended(%s, 0))"

# What session `pid` waits for: a prepared transaction (its gid), or a session holding the
# epoch's tag (an advisory lock on an int8 key shows as classid = high 32 bits, objid = low 32
# bits, objsubid = 1).
_BLOCKERS = """
SELECT p.gid, NULL::int
FROM pg_locks w JOIN pg_prepared_xacts p ON p.transaction = w.transactionid
WHERE w.pid = %(pid)s AND NOT w.granted AND w.locktype = 'transactionid'
UNION ALL
SELECT NULL, b.pid
FROM unnest(pg_blocking_pids(%(pid)s)) AS b(pid)
WHERE b.pid <> 0 AND EXISTS (
    SELECT 1 FROM pg_locks t
    WHERE t.pid = b.pid AND t.granted AND t.locktype = 'advisory' AND t.objsubid = 1
      AND ((t.classid::int8 << 32) | t.objid::int8) = hashtextextended(%(tag)s, 0))
"""

_HOLDS_TAG = """
SELECT p.pid FROM unnest(%(pids)s::int[]) AS p(pid)
WHERE EXISTS (
    SELECT 1 FROM pg_locks t
    WHERE t.pid = p.pid AND t.granted AND t.locktype = 'advisory' AND t.objsubid = 1
      AND ((t.classid::int8 << 32) | t.objid::int8) = hashtextextended(%(tag)s, 0))
"""

_DEADLOCK_PARTNER = re.compile(r"blocked by process (\d+)")


@dataclass(frozen=True)
class Participant:
    """One partition's participant: its sink, epoch and partition, and what messages name."""

    sink_id: str
    epoch: int
    part: int
    #: The table, as SQL text.
    table: str
    #: The fix messages suggest (how to keep each key in one partition).
    hint: str

    @property
    def tag_text(self) -> str:
        """The text whose hash is the epoch's tag (the same for every partition)."""
        return f"laminar partitions {self.sink_id}:{self.epoch}"

    def other_part(self, gid: str) -> int | None:
        """The partition whose gid ``gid`` is, when it is another partition of this epoch."""
        parsed = parse_gid(gid)
        if parsed is None or parsed.part == self.part or parsed.epoch != self.epoch:
            return None
        return parsed.part if gid == make_gid(self.sink_id, self.epoch, parsed.part) else None

    def refusal(self, who: str) -> DataError:
        """The error of a write that waits for ``who`` (another partition of the epoch)."""
        return DataError(
            f"table {self.table}: partition {self.part} of epoch {self.epoch} waits for a row "
            f"that {who} of the same epoch wrote, and that partition's transaction holds it "
            f"until the epoch's decision, which waits for partition {self.part}: two partitions "
            "of one epoch wrote rows that conflict in a unique index of the table (in upsert "
            "mode: the same key). Each key must come from one partition per batch, as Spark's "
            f"aggregations give it (their output is partitioned by the grouping key): {self.hint}"
            "; nothing of the epoch is committed",
            sink_id=self.sink_id,
            epoch=self.epoch,
        )


def tag(conn: psycopg.Connection[Any], me: Participant) -> None:
    """Take the epoch's tag in ``conn``'s transaction (the epoch's; held until it ends — past
    ``PREPARE TRANSACTION`` too). Shared: partitions never wait on it."""
    conn.execute(_TAG, (me.tag_text,))


class Watch:
    """Looks at what one write of ``me`` (on the session ``pid``) waits for, while it runs
    (module docstring). ``connect`` opens the watch's own connection (autocommit), only when a
    write runs longer than `FIRST_LOOK_S`. Use it as a context manager around the write, then
    `refusal` on the error the write raised."""

    def __init__(
        self, me: Participant, pid: int, connect: Callable[[], psycopg.Connection[Any]]
    ) -> None:
        self.me = me
        self.pid = pid
        self.connect = connect
        #: Whom the write was found waiting for ("partition 3 (prepared transaction '…')").
        self.found: str | None = None
        self._done = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="laminar partner watch", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        with self._lock:  # from here no cancel can be sent
            self._done = True
        self._stop.set()
        self._thread.join(timeout=0.2)  # it closes its connection itself once stopped

    def _run(self) -> None:
        if self._stop.wait(FIRST_LOOK_S):
            return
        try:
            conn = self.connect()
        except psycopg.Error as e:  # the write goes on unwatched, as it would have anyway
            log.info("partition %d: cannot watch its write's waits (%s)", self.me.part, e)
            return
        with conn:
            while not self._stop.is_set():
                try:
                    who = self._look(conn)
                except psycopg.Error as e:
                    log.info("partition %d: stopped watching its write (%s)", self.me.part, e)
                    return
                if who is not None:
                    with self._lock:
                        if not self._done:
                            self.found = who
                            conn.execute("SELECT pg_cancel_backend(%s)", (self.pid,))
                    return
                self._stop.wait(LOOK_EVERY_S)

    def _look(self, conn: psycopg.Connection[Any]) -> str | None:
        rows = conn.execute(_BLOCKERS, {"pid": self.pid, "tag": self.me.tag_text}).fetchall()
        for gid, pid in rows:
            if gid is not None:
                part = self.me.other_part(gid)
                if part is not None:
                    return f"partition {part} (prepared transaction {gid!r})"
            elif pid is not None:
                return f"another partition (PostgreSQL session {pid}, not prepared yet)"
        return None

    def refusal(self, error: BaseException) -> DataError | None:
        """The `DataError` to raise for the write's ``error`` when it comes from a wait for
        another partition of the epoch: the watch's cancel, or a deadlock PostgreSQL found with
        a session holding the epoch's tag. None for any other error."""
        if self.found is not None and isinstance(error, psycopg.errors.QueryCanceled):
            return self.me.refusal(self.found)
        if isinstance(error, psycopg.errors.DeadlockDetected):
            detail = error.diag.message_detail or ""
            pids = sorted({int(p) for p in _DEADLOCK_PARTNER.findall(detail)} - {self.pid})
            if pids:
                with contextlib.suppress(psycopg.Error), self.connect() as conn:
                    rows = conn.execute(_HOLDS_TAG, {"pids": pids, "tag": self.me.tag_text})
                    held = [int(r[0]) for r in rows.fetchall()]
                    if held:
                        return self.me.refusal(
                            f"another partition (PostgreSQL session {held[0]}; the two waited "
                            "for each other)"
                        )
        return None
