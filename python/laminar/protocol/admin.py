"""The operator commands behind ``laminar status|resolve|recover|reset`` (see `laminar.cli`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from typing import Any

import psycopg

from laminar._core import ResolveMachine, next_epoch_base, participant_base
from laminar._redact import SECRET, redact_dsn, redact_text
from laminar.errors import FatalError, LaminarError
from laminar.kafka.log import ClientSecurity, KafkaLogClient, UnsupportedSecurityError
from laminar.kafka.sink import KafkaSink
from laminar.metadata import applied_version
from laminar.postgres._names import parse_gid
from laminar.protocol import records as _records
from laminar.protocol.distributed import DistributedDriver, kafka_participant
from laminar.protocol.driver import drive
from laminar.protocol.recovery import read_decisions
from laminar.protocol.watcher import Watcher, inspect

__all__ = ["CommandError", "run"]

log = logging.getLogger("laminar.cli")


class CommandError(Exception):
    """A command that cannot go on: the message for stderr and the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def run(args: argparse.Namespace, kafka_extra: dict[str, str]) -> int:
    """Run one command; returns its exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    password = str(
        psycopg.conninfo.conninfo_to_dict(args.dsn).get("password") or ""
    )  # the cli package checked
    try:
        conn = psycopg.connect(args.dsn, connect_timeout=10)
    except psycopg.Error as e:
        raise CommandError(
            redact_text(f"cannot connect to {redact_dsn(args.dsn)}: {e}", (password,))
        ) from e
    with conn:
        if applied_version(conn) is None:
            conn.rollback()
            if args.command == "status":
                return _empty_status(args)
            raise CommandError(
                f"{redact_dsn(args.dsn)} has no laminar metadata (schema laminar): no sink has "
                "written to this database yet"
            )
        conn.rollback()
        factory = _KafkaFactory(conn, kafka_extra)
        try:
            if args.command == "status":
                return _status(conn, args, factory)
            if args.command == "resolve":
                return _resolve(conn, args, factory)
            if args.command == "recover":
                return _recover(args, factory)
            if args.command == "reset":
                return _reset(conn, args)
        except LaminarError as e:
            raise CommandError(redact_text(str(e), (password,))) from e
        except psycopg.Error as e:
            raise CommandError(redact_text(f"PostgreSQL: {e}", (password,))) from e
        finally:
            factory.close()
    raise CommandError(f"unknown command {args.command}", 2)


class _KafkaFactory:
    """Builds KafkaSinks from their registered configuration (plus secrets given on the command
    line) to read markers and complete transactions."""

    def __init__(self, conn: psycopg.Connection[Any], extra: dict[str, str]) -> None:
        self.configs = _records.read_kafka_registry(conn)
        conn.rollback()
        self.extra = extra
        self.sinks: dict[str, Any] = {}
        self._reachability: dict[str, str] = {}

    def __call__(self, transactional_id: str) -> Any:
        if transactional_id in self.sinks:
            return self.sinks[transactional_id]
        config = self.configs.get(transactional_id)
        if config is None:
            base_part = participant_base(transactional_id)
            if base_part is None:
                return None
            base = self(base_part[0])
            if base is None:
                return None
            self.sinks[transactional_id] = kafka_participant(base, base_part[1])
            return self.sinks[transactional_id]
        producer = {
            k: v for k, v in dict(config.get("producer_config") or {}).items() if v != SECRET
        }
        producer.update(self.extra)
        self._check_reachable(str(config["bootstrap_servers"]), producer)
        sink = KafkaSink(
            config["bootstrap_servers"],
            config["topic"],
            transactional_id,
            key=config.get("key"),
            value_format=config.get("value_format") or "json",
            producer_config=producer,
            init_timeout_s=10.0,
            commit_timeout_s=10.0,
        )
        self.sinks[transactional_id] = sink
        return sink

    def _check_reachable(self, bootstrap: str, producer: dict[str, Any]) -> None:
        """Fail fast (a few seconds, once per cluster) when a registered sink's brokers do not
        answer — a decommissioned cluster must not stall `status` or `recover` behind
        librdkafka's retries."""

        known = self._reachability.get(bootstrap)
        if known is None:
            known = ""
            try:
                security = ClientSecurity.from_config(producer)
                with KafkaLogClient(bootstrap, timeout=5.0, security=security) as client:
                    client.connect()
            except UnsupportedSecurityError:
                pass  # not checkable here: librdkafka's own timeouts apply
            except LaminarError as e:
                known = str(e)
            self._reachability[bootstrap] = known
        if known:
            raise FatalError(f"the brokers at {bootstrap} do not answer: {known}")

    def close(self) -> None:
        for sink in self.sinks.values():
            with contextlib.suppress(LaminarError):
                sink.close()


# -- status ---------------------------------------------------------------------------------------


def _status(conn: psycopg.Connection[Any], args: argparse.Namespace, kafka: _KafkaFactory) -> int:
    sinks = _records.read_status_sinks(conn)
    conn.rollback()
    decided = {r.transactional_id: r for r in read_decisions(conn)}
    conn.rollback()
    listed = []
    for sink_id, kind, owner, generation, base, latency, epoch, _at, rows, age in sinks:
        last: Any = epoch
        if kind == "kafka":
            try:
                sink = kafka(sink_id)
                last = sink.last_committed_epoch() if sink is not None else None
            except LaminarError as e:
                last = f"? ({str(e)[:60]})"
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
    items = inspect(conn, kafka_sink=kafka)
    for item in items:
        item.lingering = item.age_s >= args.lingering_after
    doc = {
        "database": redact_dsn(args.dsn),
        "metadata": True,
        "sinks": listed,
        "in_doubt": [vars(i) for i in items],
        "lingering": sum(1 for i in items if i.lingering),
        "distributed": _distributed(conn),
    }
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(f"laminar status: {doc['database']}\n")
        print(
            _table(
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
                    for s in listed
                ],
            )
        )
        print()
        if items:
            print(f"in doubt: {len(items)} ({doc['lingering']} lingering)")
            print(
                _table(
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
        distributed: list[dict[str, Any]] = doc["distributed"]  # type: ignore[assignment]
        for dt in distributed:
            print(
                f"\n{dt['dtid']} (group {dt['group_id']}, epoch {dt['epoch']}): "
                f"{dt['state']}, {dt['age_s']} s{' — ' + dt['message'] if dt['message'] else ''}"
            )
            print(
                _table(
                    ["PARTICIPANT", "KIND", "RESOURCE", "STATE"],
                    [
                        [p["participant"], p["kind"], p["resource"], p["state"]]
                        for p in dt["participants"]
                    ],
                )
            )
    return 5 if items else 0


def _empty_status(args: argparse.Namespace) -> int:
    """`status` of a database no sink has written to: nothing registered, nothing in doubt."""
    database = redact_dsn(args.dsn)
    doc = {"database": database, "metadata": False, "sinks": [], "in_doubt": [], "lingering": 0}
    if args.json:
        print(json.dumps({**doc, "distributed": []}, indent=2))
    else:
        print(f"laminar status: {database}\n\nno laminar metadata: no sink has written here\n")
        print("in doubt: none")
    return 0


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


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


# -- resolve --------------------------------------------------------------------------------------


def _resolve(conn: psycopg.Connection[Any], args: argparse.Namespace, kafka: _KafkaFactory) -> int:
    """``laminar resolve``: the core's `ResolveMachine` — never against a recorded decision
    without ``--force``, and a forced change only through the transition tables' ``force_*``
    events (docs/engine.md §4); its refusals are the core's (exit 4: against the decision,
    6: nothing to resolve)."""
    target: str = args.transaction_id
    commit = bool(args.commit)
    if target.startswith("kafka:"):
        kind, name = "kafka", target.split(":", 1)[1]
    elif parse_gid(target) is not None:
        kind, name = "gid", target
    else:
        kind, name = "dtid", target
    machine = ResolveMachine(kind, name, commit=commit, force=bool(args.force))  # type: ignore[arg-type]
    driver = DistributedDriver({}, lambda: conn, log, kafka_sink=kafka)
    try:
        drive(machine, driver.perform)
    except LaminarError as e:
        code = _REFUSAL_EXIT.get(getattr(e, "refusal", None) or "")
        if code is None:
            raise
        raise CommandError(str(e), code) from e
    outcome = machine.outcome
    assert outcome is not None
    what, value = outcome
    if what == "kafka_committed":
        print(f"Kafka sink {name}: decided epoch {value} is committed in Kafka")
    elif what == "awaits_replay":
        print(
            f"Kafka sink {name}: decided epoch {value} can only be completed by Spark's replay "
            "of that batch (no redo log, and the broker no longer holds the transaction): "
            "restart the query from its checkpoint"
        )
        return 5
    elif what == "moved_back":
        print(f"Kafka sink {name}: decision moved back to Kafka's marker ({value})")
    else:
        verb = "commit" if commit else "roll back"
        _say(args, {"id": target, "action": verb, "done": bool(value)})
    return 0


#: Exit codes of the core's refusals (docs/engine.md §5).
_REFUSAL_EXIT = {"against_decision": 4, "not_found": 6}


def _say(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(doc, default=str))
    else:
        print(f"{doc['id']}: {doc['action']} {'done' if doc['done'] else '(already gone)'}")


# -- recover --------------------------------------------------------------------------------------


def _recover(args: argparse.Namespace, kafka: _KafkaFactory) -> int:
    watcher = Watcher(args.dsn, kafka_sink=kafka, resolve_after_s=args.older_than)
    report = watcher.run_once()
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, default=str))
    else:
        for item in report.items:
            print(f"{item.id}: {item.kind}, {item.action} -> {item.outcome} {item.detail}".rstrip())
        print(
            f"recovered {report.resolved}, unresolved {len(report.unresolved)}, lingering "
            f"{report.lingering}"
        )
    return 5 if report.unresolved else 0


# -- reset ----------------------------------------------------------------------------------------


def _reset(conn: psycopg.Connection[Any], args: argparse.Namespace) -> int:
    found = _records.read_registry(conn, args.sink_id)
    if found is None:
        conn.rollback()
        raise CommandError(f"{args.sink_id!r} is not in laminar.sinks", 6)
    kind, config, base = found
    members = [args.sink_id]
    if kind == "atomic_group":
        members += list(config.get("sinks") or [])
    # the core's one epoch-base rule (the group's restart uses the same)
    new_base = next_epoch_base(base, _records.committed_epochs(conn, members))
    _records.reset_owner(conn, members, new_base)
    conn.commit()
    doc = {"sink_id": args.sink_id, "members": members, "epoch_base": new_base}
    if args.json:
        print(json.dumps(doc))
    else:
        print(
            f"{args.sink_id}: reset; the next query to write it becomes its owner and its batch 0 "
            f"is written as epoch {new_base}"
        )
    return 0
