"""What the operator commands ``laminar status|resolve|recover|reset`` read and decide in the
decision database, answered as data; `laminar.cli` prints the answers and picks the exit codes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import psycopg

from laminar._core import ResolveMachine, next_epoch_base
from laminar.engine import records as _records
from laminar.engine.loop import drive
from laminar.errors import AuthorizationError, LaminarError
from laminar.metadata import applied_version
from laminar.postgres._names import parse_gid
from laminar.protocol.distributed import DistributedDriver
from laminar.protocol.kafka_sinks import RegisteredKafkaSinks
from laminar.protocol.watcher import Item, Watcher, WatcherReport, inspect

__all__ = [
    "Reset",
    "Resolved",
    "Status",
    "has_metadata",
    "recover",
    "reset",
    "resolve",
    "status",
]

log = logging.getLogger("laminar.cli")


def has_metadata(conn: psycopg.Connection[Any]) -> bool:
    """Whether a sink has written to this database (its ``laminar`` schema exists); leaves no
    transaction open."""
    found = applied_version(conn) is not None
    conn.rollback()
    return found


# -- status ---------------------------------------------------------------------------------------


@dataclass
class Status:
    """What ``laminar status`` shows: the registered sinks, the in-doubt transactions (the
    watcher's inspection) and the distributed transactions not concluded."""

    sinks: list[dict[str, Any]]
    in_doubt: list[Item]
    distributed: list[dict[str, Any]]
    #: Kafka sinks whose marker could not be read, with why: their last committed epoch is
    #: unknown, and so is whether they have anything in doubt.
    unreadable: dict[str, str] = field(default_factory=dict)

    @property
    def lingering(self) -> int:
        """How many in-doubt transactions linger (the core's rule, on each item)."""
        return sum(1 for i in self.in_doubt if i.lingering)


def status(
    conn: psycopg.Connection[Any], kafka: RegisteredKafkaSinks, *, lingering_after_s: float
) -> Status:
    """Every registered sink with its last committed epoch (a Kafka sink's read from its
    marker; an unreadable one as ``? (<why>)``), decided epoch, owner and latency; every in-doubt
    transaction, lingering after ``lingering_after_s``; every distributed transaction not
    concluded."""
    sinks = _records.read_status_sinks(conn)
    conn.rollback()
    decided = {r.transactional_id: r for r in _records.read_decisions(conn)}
    conn.rollback()
    listed = []
    unreadable: dict[str, str] = {}
    for sink_id, kind, owner, generation, base, latency, epoch, _at, rows, age in sinks:
        last: Any = epoch
        if kind == "kafka":
            try:
                sink = kafka(sink_id)
                last = sink.last_committed_epoch() if sink is not None else None
            except AuthorizationError as e:
                # the ACL to grant is the point: never cut
                last = f"? ({type(e).__name__}: {e})"
                unreadable[sink_id] = f"{type(e).__name__}: {e}"
            except LaminarError as e:
                last = f"? ({str(e)[:60]})"
                unreadable[sink_id] = f"{type(e).__name__}: {e}"
        listed.append(
            {
                "sink_id": sink_id,
                "kind": kind,
                "owner": owner,
                "generation": generation,
                "epoch_base": base,
                "last_committed_epoch": last,
                "decided_epoch": decided[sink_id].epoch if sink_id in decided else None,
                "rows": rows,
                "age_s": None if age is None else round(float(age), 1),
                "commit_latency_ms": None if latency is None else round(float(latency), 2),
            }
        )
    items = inspect(conn, kafka_sink=kafka, lingering_after_s=lingering_after_s)
    return Status(listed, items, _distributed(conn), unreadable)


def _distributed(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Every distributed transaction not concluded (scale-out, docs/protocol.md §4), with the
    participants its tasks claimed (``attempt`` rows name the claiming attempt)."""
    rows, parts = _records.read_dt_status(conn)
    conn.rollback()
    found = []
    for dtid, group_id, epoch, state, message, age in rows:
        found.append(
            {
                "dtid": dtid,
                "group_id": group_id,
                "epoch": int(epoch),
                "state": state,
                "message": message,
                "age_s": round(float(age), 1),
                "participants": [
                    {"participant": p, "kind": k, "resource": r, "state": st}
                    for d, p, k, r, st in parts
                    if d == dtid
                ],
            }
        )
    return found


# -- resolve --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """What ``laminar resolve`` did: the core's outcome (``kafka_committed``,
    ``awaits_replay``, ``moved_back``, or another with ``value`` whether it was done) for the
    transaction ``name``."""

    what: str
    name: str
    value: Any


def resolve(
    conn: psycopg.Connection[Any],
    target: str,
    kafka: RegisteredKafkaSinks,
    *,
    commit: bool,
    force: bool,
) -> Resolved:
    """``laminar resolve``: the core's `ResolveMachine` — never against a recorded decision
    without ``force``, and a forced change only through the transition tables' ``force_*``
    events (docs/engine.md §4). Its refusals are raised as the core's errors, carrying the
    refusal's kind (``against_decision``, ``not_found``: docs/engine.md §5)."""
    if target.startswith("kafka:"):
        kind, name = "kafka", target.split(":", 1)[1]
    elif parse_gid(target) is not None:
        kind, name = "gid", target
    else:
        kind, name = "dtid", target
    machine = ResolveMachine(kind, name, commit=commit, force=force)  # type: ignore[arg-type]
    driver = DistributedDriver({}, lambda: conn, log, kafka_sink=kafka)
    drive(machine, driver.perform)
    outcome = machine.outcome
    assert outcome is not None
    what, value = outcome
    return Resolved(what, name, value)


# -- recover --------------------------------------------------------------------------------------


def recover(dsn: str, kafka: RegisteredKafkaSinks, *, older_than_s: float) -> WatcherReport:
    """``laminar recover``: one watcher pass that resolves every in-doubt transaction
    unresolved for at least ``older_than_s`` seconds by its recorded decision."""
    return Watcher(dsn, kafka_sink=kafka, resolve_after_s=older_than_s).run_once()


# -- reset ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reset:
    """What ``laminar reset`` did: the sink (or atomic group with its members) and the epoch its
    next query's batch 0 is written as."""

    sink_id: str
    members: list[str]
    epoch_base: int


def reset(conn: psycopg.Connection[Any], sink_id: str) -> Reset | None:
    """``laminar reset``: the next query to write ``sink_id`` (with an atomic group's members)
    becomes its owner and writes past every committed epoch; None when it is not registered."""
    found = _records.read_registry(conn, sink_id)
    if found is None:
        conn.rollback()
        return None
    kind, config, base = found
    members = [sink_id]
    if kind == "atomic_group":
        members += list(config.get("sinks") or [])
    # the core's one epoch-base rule (the group's restart uses the same)
    new_base = next_epoch_base(base, _records.committed_epochs(conn, members))
    _records.reset_owner(conn, members, new_base)
    conn.commit()
    return Reset(sink_id, members, new_base)
