"""Prints what ``laminar status`` found (`laminar.protocol.admin.status`): tables, or one JSON
document with ``--json``."""

from __future__ import annotations

import json
from typing import Any

from laminar.protocol.admin import Status

__all__ = ["print_empty", "print_status", "table"]


def print_status(database: str, found: Status, *, as_json: bool) -> None:
    """The sinks, the in-doubt transactions and the distributed ones of ``database`` (its DSN,
    redacted)."""
    items = found.in_doubt
    doc = {
        "database": database,
        "metadata": True,
        "sinks": found.sinks,
        "in_doubt": [vars(i) for i in items],
        "lingering": found.lingering,
        "distributed": found.distributed,
        "unreadable": found.unreadable,
    }
    if as_json:
        print(json.dumps(doc, indent=2, default=str))
        return
    print(f"laminar status: {database}\n")
    print(
        table(
            ["SINK", "KIND", "LAST EPOCH", "DECIDED", "OWNER", "GEN", "BASE", "COMMIT MS"],
            [
                [
                    s["sink_id"],
                    s["kind"],
                    s["last_committed_epoch"],
                    s["decided_epoch"],
                    s["owner"],
                    s["generation"],
                    s["epoch_base"],
                    s["commit_latency_ms"],
                ]
                for s in found.sinks
            ],
        )
    )
    print()
    if found.unreadable:
        print(
            f"unreadable: {len(found.unreadable)} Kafka marker(s) — their last committed epoch, "
            "and whether they have anything in doubt, are unknown:"
        )
        for sink_id, why in found.unreadable.items():
            print(f"  {sink_id}: {why}")
        print()
    if items:
        print(f"in doubt: {len(items)} ({found.lingering} lingering)")
        print(
            table(
                ["ID", "KIND", "EPOCH", "AGE S", "DECISION", "LINGERING", "DETAIL"],
                [
                    [
                        i.id,
                        i.kind,
                        i.epoch,
                        f"{i.age_s:.1f}",
                        i.decision or "none",
                        "yes" if i.lingering else "no",
                        i.detail,
                    ]
                    for i in items
                ],
            )
        )
    else:
        print("in doubt: none")
    for dt in found.distributed:
        print(
            f"\n{dt['dtid']} (group {dt['group_id']}, epoch {dt['epoch']}): "
            f"{dt['state']}, {dt['age_s']} s{' — ' + dt['message'] if dt['message'] else ''}"
        )
        print(
            table(
                ["PARTICIPANT", "KIND", "RESOURCE", "STATE"],
                [
                    [p["participant"], p["kind"], p["resource"], p["state"]]
                    for p in dt["participants"]
                ],
            )
        )


def print_empty(database: str, *, as_json: bool) -> None:
    """``status`` of a database no sink has written to: nothing registered, nothing in doubt."""
    doc = {"database": database, "metadata": False, "sinks": [], "in_doubt": [], "lingering": 0}
    if as_json:
        print(json.dumps({**doc, "distributed": [], "unreadable": {}}, indent=2))
    else:
        print(f"laminar status: {database}\n\nno laminar metadata: no sink has written here\n")
        print("in doubt: none")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Left-aligned columns two spaces apart, ``-`` for None, no trailing blanks."""
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)
