"""The resolution watcher (Vitess): finds transactions left unresolved for longer than a threshold,
resolves them by the recorded decisions, and counts what lingers.

What it looks at, in the decision database:

- **decided epochs whose Kafka part is behind** (``laminar.txn_state`` ahead of the sink's
  marker): completed by the recovery recipe (EndTxn, then the redo log; without one they wait for
  Spark's replay and linger meanwhile);
- **corrupt decisions** (a ``prepared_state`` that does not decode): reported, never acted on;
- **prepared PostgreSQL participants** (``pg_prepared_xacts``, gids ``laminar:…``): decision
  commit → ``COMMIT PREPARED``; no decision or rollback → ``ROLLBACK PREPARED``; a decision still
  in ``prepare`` is first flipped to ``rollback`` (conditionally: a coordinator that decided
  first wins);
- **distributed decisions without conclusion** (``laminar.dt_state``): completed the same way,
  then concluded (deleted).

The rules are the core's (`laminar._core.watcher_action`). Each pass logs one line an alert can
match::

    laminar.watcher lingering=2 oldest_age_s=612.3 unresolved=3 resolved=1 group=orders+tid

It runs as a background thread of a writer (``exactly_once(..., watcher=True)``; it takes the
writer's lock, so it never runs during an epoch, and looks only at the writer's group) and as the
one-shot ``laminar recover``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from laminar._core import is_lingering, watcher_action
from laminar.errors import LaminarError
from laminar.metadata import table
from laminar.recovery import read_decisions, resolve_kafka_sinks
from laminar.sinks._pg_steps import commit_prepared, list_prepared, rollback_prepared

__all__ = ["Item", "Watcher", "WatcherReport", "find_decision", "inspect"]

log = logging.getLogger("laminar.watcher")


@dataclass
class Item:
    """One unresolved transaction."""

    #: ``kafka_behind``, ``corrupt_decision``, ``participant`` or ``distributed``.
    kind: str
    #: How ``laminar resolve`` names it: ``kafka:<transactional_id>``, a gid, or a dtid.
    id: str
    epoch: int | None
    age_s: float
    #: The recorded decision: ``commit``/``prepare``/``rollback`` (participants, distributed),
    #: ``commit`` for a decided Kafka epoch, None when there is none.
    decision: str | None
    detail: str = ""
    #: What the watcher decided to do, and what came of it.
    action: str = "wait"
    outcome: str = "unresolved"
    lingering: bool = False


@dataclass
class WatcherReport:
    """The result of one pass."""

    items: list[Item] = field(default_factory=list)

    @property
    def unresolved(self) -> list[Item]:
        """The items still unresolved after the pass."""
        return [i for i in self.items if i.outcome != "resolved"]

    @property
    def lingering(self) -> int:
        """How many unresolved items are older than the lingering threshold."""
        return sum(1 for i in self.unresolved if i.lingering)

    @property
    def oldest_age_s(self) -> float:
        """The age of the oldest unresolved item (0 when none)."""
        return max((i.age_s for i in self.unresolved), default=0.0)

    @property
    def resolved(self) -> int:
        """How many items this pass resolved."""
        return sum(1 for i in self.items if i.outcome == "resolved")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "lingering": self.lingering,
            "oldest_age_s": round(self.oldest_age_s, 3),
            "resolved": self.resolved,
            "unresolved": len(self.unresolved),
            "items": [asdict(i) for i in self.items],
        }


def find_decision(conn: psycopg.Connection[Any], gid: str) -> tuple[str | None, str | None]:
    """The distributed decision a prepared gid belongs to: ``(dtid, state)`` or (None, None)."""
    row = conn.execute(
        sql.SQL(
            "SELECT s.dtid, s.state FROM {p} p JOIN {s} s USING (dtid)"
            " WHERE p.kind = 'postgres' AND (p.resource = %s OR starts_with(%s, p.resource))"
            " ORDER BY s.created_at DESC LIMIT 1"
        ).format(p=table("dt_participant"), s=table("dt_state")),
        (gid, gid),
    ).fetchone()
    return (None, None) if row is None else (row[0], row[1])


KafkaSinkFactory = Callable[[str], Any]


def inspect(
    conn: psycopg.Connection[Any],
    *,
    group_id: str | None = None,
    kafka_sink: KafkaSinkFactory | None = None,
    sink_ids: Sequence[str] | None = None,
) -> list[Item]:
    """Every unresolved transaction in the decision database (of one group when given), without
    acting. ``kafka_sink(transactional_id)`` gives a KafkaSink to read markers with (None: Kafka
    parts are not checked); ``sink_ids`` limits prepared gids to those sinks."""
    items: list[Item] = []
    for row in read_decisions(conn, group_id=group_id):
        corrupt = row.corruption()
        if corrupt is not None:
            items.append(
                Item(
                    "corrupt_decision",
                    f"kafka:{row.transactional_id}",
                    row.epoch,
                    row.age_s,
                    "commit",
                    corrupt,
                )
            )
            continue
        if kafka_sink is None:
            continue
        try:
            sink = kafka_sink(row.transactional_id)
            if sink is None:
                continue
            marker = sink.last_committed_epoch()
        except LaminarError as e:
            items.append(
                Item(
                    "kafka_behind",
                    f"kafka:{row.transactional_id}",
                    row.epoch,
                    row.age_s,
                    "commit",
                    f"the marker could not be read: {e}",
                )
            )
            continue
        if marker is None or marker < row.epoch:
            items.append(
                Item(
                    "kafka_behind",
                    f"kafka:{row.transactional_id}",
                    row.epoch,
                    row.age_s,
                    "commit",
                    f"decided epoch {row.epoch}, Kafka marker {marker}",
                )
            )
    conn.commit()
    for prepared in list_prepared(conn):
        if sink_ids is not None and prepared.sink_id not in sink_ids:
            continue
        dtid, state = find_decision(conn, prepared.gid)
        if group_id is not None and dtid is None and sink_ids is None:
            continue
        items.append(
            Item(
                "participant",
                prepared.gid,
                prepared.epoch,
                prepared.age_s,
                state,
                f"prepared transaction of sink {prepared.sink_id} (decision {dtid or 'none'})",
            )
        )
    query = sql.SQL(
        "SELECT dtid, epoch, state, extract(epoch FROM clock_timestamp() - created_at) FROM {t}"
    ).format(t=table("dt_state"))
    params: tuple[Any, ...] = ()
    if group_id is not None:
        query = query + sql.SQL(" WHERE group_id = %s")
        params = (group_id,)
    for dtid, epoch, state, age in conn.execute(query + sql.SQL(" ORDER BY created_at"), params):
        items.append(Item("distributed", dtid, int(epoch), float(age), state, ""))
    conn.commit()
    return items


class Watcher:
    """Finds and resolves unresolved transactions (module docstring); ``run_once`` for one pass,
    ``start``/``stop`` for a background thread every ``interval_s`` seconds.

    ``kafka_sinks``: the writer's live Kafka sinks (in-process watcher), or ``kafka_sink``: a
    factory building one from a transactional id (``laminar recover``). ``lock``: held during a
    pass (the writer's, so that a pass never runs during an epoch).
    """

    def __init__(
        self,
        dsn: str,
        *,
        group_id: str | None = None,
        kafka_sinks: Sequence[Any] = (),
        kafka_sink: KafkaSinkFactory | None = None,
        interval_s: float = 30.0,
        resolve_after_s: float = 60.0,
        lingering_after_s: float = 300.0,
        lock: Any = None,
        sink_ids: Sequence[str] | None = None,
    ) -> None:
        self.dsn = dsn
        self.group_id = group_id
        self.sink_ids = None if sink_ids is None else list(sink_ids)
        by_id = {s.sink_id: s for s in kafka_sinks}
        self._kafka_sink: KafkaSinkFactory | None = (
            kafka_sink if kafka_sink is not None else (by_id.get if by_id else None)
        )
        self.interval_s = interval_s
        self.resolve_after_s = resolve_after_s
        self.lingering_after_s = lingering_after_s
        self._lock = lock if lock is not None else threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: The last pass's report (the metric: ``last_report.lingering``).
        self.last_report: WatcherReport | None = None
        self.passes = 0

    @property
    def lingering(self) -> int:
        """How many transactions lingered at the last pass (the alerting metric)."""
        return self.last_report.lingering if self.last_report is not None else 0

    # -- one pass --------------------------------------------------------------------------------

    def run_once(self) -> WatcherReport:
        """Inspect, resolve what the rules say, and report (logs the summary line)."""
        with self._lock, psycopg.connect(self.dsn) as conn:
            items = inspect(
                conn, group_id=self.group_id, kafka_sink=self._kafka_sink, sink_ids=self.sink_ids
            )
            for item in items:
                item.action = watcher_action(
                    item.kind,  # type: ignore[arg-type]
                    item.age_s,
                    decision=item.decision if item.kind != "kafka_behind" else None,  # type: ignore[arg-type]
                    resolve_after_s=self.resolve_after_s,
                    lingering_after_s=self.lingering_after_s,
                )
                try:
                    self._act(conn, item)
                except (LaminarError, psycopg.Error) as e:
                    item.outcome = "failed"
                    item.detail = f"{item.detail}; {item.action} failed: {e}".lstrip("; ")
                    with contextlib.suppress(psycopg.Error):
                        conn.rollback()
                item.lingering = item.outcome != "resolved" and is_lingering(
                    item.age_s, self.lingering_after_s
                )
        report = WatcherReport(items)
        self.last_report = report
        self.passes += 1
        line = (
            f"laminar.watcher lingering={report.lingering} "
            f"oldest_age_s={report.oldest_age_s:.1f} unresolved={len(report.unresolved)} "
            f"resolved={report.resolved}" + (f" group={self.group_id}" if self.group_id else "")
        )
        if report.lingering:
            lingering = [
                f"{i.id}({i.kind},{i.age_s:.0f}s)" for i in report.unresolved if i.lingering
            ]
            log.warning("%s items=%s", line, ",".join(lingering[:10]))
        else:
            log.info("%s", line)
        return report

    def _act(self, conn: psycopg.Connection[Any], item: Item) -> None:
        action = item.action
        if action in ("wait", "report_only"):
            return
        if item.kind == "kafka_behind":
            assert self._kafka_sink is not None
            sink = self._kafka_sink(item.id.split(":", 1)[1])
            awaiting = resolve_kafka_sinks(conn, [sink], init=lambda s: s.init_transactions())
            if awaiting:
                item.detail = f"awaits Spark's replay of epoch {awaiting[sink.sink_id]}"
                return
            item.outcome = "resolved"
            return
        if item.kind == "participant":
            if action == "set_rollback_then_roll_back":
                dtid, _ = find_decision(conn, item.id)
                if dtid is not None and not _set_rollback(conn, dtid):
                    action = "complete"  # the coordinator decided to commit first
            done = (
                commit_prepared(conn, item.id)
                if action == "complete"
                else rollback_prepared(conn, item.id)
            )
            item.outcome = "resolved"
            item.detail = f"{'committed' if action == 'complete' else 'rolled back'}" + (
                "" if done else " (already gone)"
            )
            return
        if item.kind == "distributed":
            if action == "set_rollback_then_roll_back" and not _set_rollback(conn, item.id):
                return  # decided meanwhile: the next pass completes it
            resources = conn.execute(
                sql.SQL(
                    "SELECT kind, resource FROM {t}"
                    " WHERE dtid = %s AND kind IN ('postgres', 'kafka')"
                ).format(t=table("dt_participant")),
                (item.id,),
            ).fetchall()
            conn.commit()
            prefixes = [r for k, r in resources if k == "postgres"]
            kafka = [r for k, r in resources if k == "kafka"]
            if kafka and not self._settle_kafka(conn, item, kafka, commit=action == "complete"):
                return
            remaining = [
                p.gid for p in list_prepared(conn) if any(p.gid.startswith(r) for r in prefixes)
            ]
            conn.commit()
            for gid in remaining:
                if action == "complete":
                    commit_prepared(conn, gid)
                else:
                    rollback_prepared(conn, gid)
            conn.execute(
                sql.SQL("DELETE FROM {t} WHERE dtid = %s").format(t=table("dt_state")), (item.id,)
            )
            conn.commit()
            item.outcome = "resolved"
            how = "committed" if action == "complete" else "rolled back"
            item.detail = f"{len(remaining)} participant(s) {how}, concluded"

    def _settle_kafka(
        self, conn: psycopg.Connection[Any], item: Item, tids: list[str], *, commit: bool
    ) -> bool:
        """The Kafka participants of a distributed transaction (scale-out): committed through
        their ``txn_state`` decisions (EndTxn, docs/protocol.md §3's recipe), or aborted by a
        fresh producer's ``init_transactions``. False (item left unresolved) if one cannot be."""
        if self._kafka_sink is None:
            item.detail = f"Kafka participants {tids} need their sinks' configuration"
            return False
        sinks = [self._kafka_sink(t) for t in tids]
        missing = [t for t, s in zip(tids, sinks, strict=True) if s is None]
        if missing:
            item.detail = f"Kafka participants {missing} are not registered"
            return False
        if commit:
            awaiting = resolve_kafka_sinks(conn, sinks, init=lambda s: s.init_transactions())
            if awaiting:
                item.detail = f"Kafka participants {sorted(awaiting)} cannot be committed"
                return False
        else:
            for sink in sinks:
                sink.init_transactions()
        return True

    # -- background thread ----------------------------------------------------------------------

    def start(self) -> None:
        """Run a pass every ``interval_s`` seconds in a daemon thread."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="laminar-watcher", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (waits for a pass in progress)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except Exception as e:  # the watcher must outlive a failing pass
                log.warning("laminar.watcher pass failed: %s", e)


def _set_rollback(conn: psycopg.Connection[Any], dtid: str) -> bool:
    """``prepare`` → ``rollback`` (conditional); False if the decision is already ``commit``."""
    row = conn.execute(
        sql.SQL(
            "UPDATE {t} SET state = 'rollback', updated_at = now(),"
            " message = 'rolled back by the resolution watcher' WHERE dtid = %s"
            " AND state IN ('prepare', 'rollback') RETURNING 1"
        ).format(t=table("dt_state")),
        (dtid,),
    ).fetchone()
    conn.commit()
    return row is not None
