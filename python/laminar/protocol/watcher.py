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

A pass is the core's `WatcherPassMachine` (docs/engine.md §2, "The watcher"): what is found, the
rule applied to each item (`watcher_action`), which gid belongs to which decision (exact match,
`participant_matches`) and the one roll-back-and-conclude / complete-and-conclude are the core's;
`laminar.protocol.distributed.DistributedDriver` performs its commands. Each pass logs one line
an alert can match::

    laminar.protocol.watcher lingering=2 oldest_age_s=612.3 unresolved=3 resolved=1 group=orders+tid

It runs as a background thread of a writer (``exactly_once(..., watcher=True)``; it takes the
writer's lock, so it never runs during an epoch, and looks only at the writer's group) and as the
one-shot ``laminar recover``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from laminar._core import WatcherItem, WatcherPassMachine
from laminar.engine.loop import drive
from laminar.protocol.distributed import DistributedDriver

__all__ = ["Item", "Watcher", "WatcherReport", "inspect"]

log = logging.getLogger("laminar.protocol.watcher")
#: The inspection's own logger: ``laminar status`` prints its items, not a watcher's line.
_quiet = logging.getLogger("laminar.protocol.watcher.inspect")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


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


KafkaSinkFactory = Callable[[str], Any]


def _item(found: WatcherItem) -> Item:
    return Item(
        found.kind,
        found.id,
        found.epoch,
        found.age_s,
        found.decision,
        found.detail,
        found.action,
        found.outcome,
        found.lingering,
    )


def _pass(
    conn: psycopg.Connection[Any],
    machine: WatcherPassMachine,
    kafka_sink: KafkaSinkFactory | None,
    logger: logging.Logger,
) -> WatcherPassMachine:
    driver = DistributedDriver({}, lambda: conn, logger, kafka_sink=kafka_sink)
    drive(machine, driver.perform)
    return machine


def inspect(
    conn: psycopg.Connection[Any],
    *,
    group_id: str | None = None,
    kafka_sink: KafkaSinkFactory | None = None,
    sink_ids: Sequence[str] | None = None,
    lingering_after_s: float = 300.0,
) -> list[Item]:
    """Every unresolved transaction in the decision database (of one group when given), without
    acting (a pass with ``act=False``). ``kafka_sink(transactional_id)`` gives a KafkaSink to
    read markers with (None: Kafka parts are not checked); ``sink_ids`` limits prepared gids
    to those sinks. Each item's ``lingering`` is the core's rule (`is_lingering`) at
    ``lingering_after_s``."""
    machine = WatcherPassMachine(
        group_id=group_id,
        sink_ids=None if sink_ids is None else list(sink_ids),
        check_kafka=kafka_sink is not None,
        lingering_after_s=lingering_after_s,
        act=False,
    )
    return [_item(i) for i in _pass(conn, machine, kafka_sink, _quiet).items]


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
        machine = WatcherPassMachine(
            group_id=self.group_id,
            sink_ids=self.sink_ids,
            check_kafka=self._kafka_sink is not None,
            resolve_after_s=self.resolve_after_s,
            lingering_after_s=self.lingering_after_s,
        )
        with self._lock, psycopg.connect(self.dsn) as conn:
            _pass(conn, machine, self._kafka_sink, log)
        report = WatcherReport([_item(i) for i in machine.items])
        self.last_report = report
        self.passes += 1
        return report

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
                log.warning("laminar.protocol.watcher pass failed: %s", e)
