"""Prints what ``laminar resolve|recover|reset`` did (`laminar.protocol.admin`): a line per
transaction and a summary, or JSON with ``--json``."""

from __future__ import annotations

import json

from laminar.protocol.admin import Reset, Resolved
from laminar.protocol.watcher import WatcherReport

__all__ = ["print_recovered", "print_reset", "print_resolved"]


def print_resolved(target: str, done: Resolved, *, commit: bool, as_json: bool) -> None:
    """``laminar resolve``'s outcome for ``target`` (as the operator named it)."""
    what, name, value = done.what, done.name, done.value
    if what == "kafka_committed":
        print(f"Kafka sink {name}: decided epoch {value} is committed in Kafka")
    elif what == "awaits_replay":
        print(
            f"Kafka sink {name}: decided epoch {value} can only be completed by Spark's replay "
            "of that batch (no redo log, and the broker no longer holds the transaction): "
            "restart the query from its checkpoint"
        )
    elif what == "moved_back":
        print(f"Kafka sink {name}: decision moved back to Kafka's marker ({value})")
    else:
        verb = "commit" if commit else "roll back"
        doc = {"id": target, "action": verb, "done": bool(value)}
        if as_json:
            print(json.dumps(doc, default=str))
        else:
            print(f"{doc['id']}: {doc['action']} {'done' if doc['done'] else '(already gone)'}")


def print_recovered(report: WatcherReport, *, as_json: bool) -> None:
    """``laminar recover``'s pass: each item with what was done and what came of it."""
    if as_json:
        print(json.dumps(report.as_dict(), indent=2, default=str))
        return
    for item in report.items:
        print(f"{item.id}: {item.kind}, {item.action} -> {item.outcome} {item.detail}".rstrip())
    print(
        f"recovered {report.resolved}, unresolved {len(report.unresolved)}, lingering "
        f"{report.lingering}"
    )


def print_reset(done: Reset, *, as_json: bool) -> None:
    """``laminar reset``'s answer: the epoch the sink's next batch 0 is written as."""
    if as_json:
        doc = {"sink_id": done.sink_id, "members": done.members, "epoch_base": done.epoch_base}
        print(json.dumps(doc))
    else:
        print(
            f"{done.sink_id}: reset; the next query to write it becomes its owner and its batch 0 "
            f"is written as epoch {done.epoch_base}"
        )
