"""The operator commands behind ``laminar status|resolve|recover|reset`` (see `laminar.cli`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from typing import Any

import psycopg
from psycopg import sql

from laminar import _records
from laminar._core import next_epoch_base
from laminar._redact import SECRET, redact_dsn, redact_text
from laminar.errors import FatalError, LaminarError
from laminar.metadata import applied_version, table
from laminar.recovery import read_decisions, resolve_kafka_sinks
from laminar.sinks._pg_names import parse_gid
from laminar.sinks._pg_steps import commit_prepared, list_prepared, rollback_prepared
from laminar.watcher import Item, Watcher, find_decision, inspect

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
    )  # cli.py checked
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
        rows = conn.execute(
            sql.SQL("SELECT sink_id, config FROM {t} WHERE kind = 'kafka'").format(t=table("sinks"))
        ).fetchall()
        conn.rollback()
        self.configs: dict[str, dict[str, Any]] = {r[0]: dict(r[1] or {}) for r in rows}
        self.extra = extra
        self.sinks: dict[str, Any] = {}
        self._reachability: dict[str, str] = {}

    def __call__(self, transactional_id: str) -> Any:
        from laminar.sinks.kafka import KafkaSink

        if transactional_id in self.sinks:
            return self.sinks[transactional_id]
        config = self.configs.get(transactional_id)
        if config is None:
            from laminar.scaleout import kafka_participant, participant_base

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
        from laminar.kafka_log import ClientSecurity, KafkaLogClient, UnsupportedSecurityError

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
    sinks = conn.execute(
        sql.SQL(
            "SELECT s.sink_id, s.kind, s.owner, s.generation, s.epoch_base, s.last_commit_ms,"
            " e.epoch, e.committed_at, e.rows,"
            " extract(epoch FROM clock_timestamp() - coalesce(e.committed_at, s.updated_at))"
            " FROM {s} s LEFT JOIN {e} e USING (sink_id) ORDER BY s.kind, s.sink_id"
        ).format(s=table("sinks"), e=table("sink_epochs"))
    ).fetchall()
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
    rows = conn.execute(
        sql.SQL(
            "SELECT dtid, group_id, epoch, state, message,"
            " extract(epoch FROM clock_timestamp() - created_at) FROM {t} ORDER BY created_at"
        ).format(t=table("dt_state"))
    ).fetchall()
    parts = conn.execute(
        sql.SQL(
            "SELECT dtid, participant, kind, resource, state FROM {t} ORDER BY dtid, participant"
        ).format(t=table("dt_participant"))
    ).fetchall()
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
    target: str = args.transaction_id
    commit = bool(args.commit)
    verb = "commit" if commit else "roll back"
    if target.startswith("kafka:"):
        return _resolve_kafka(conn, target.split(":", 1)[1], commit, args.force, kafka)
    if parse_gid(target) is not None:
        prepared = {p.gid for p in list_prepared(conn)}
        conn.rollback()
        if target not in prepared:
            raise CommandError(f"no prepared transaction {target!r} in this database", 6)
        dtid, state = find_decision(conn, target)
        conn.rollback()
        _check_decision(state, commit, args.force, f"{target} (decision {dtid})")
        done = commit_prepared(conn, target) if commit else rollback_prepared(conn, target)
        if dtid is not None:
            conn.execute(
                sql.SQL("UPDATE {t} SET state = %s WHERE dtid = %s AND resource = %s").format(
                    t=table("dt_participant")
                ),
                ("committed" if commit else "rolled_back", dtid, target),
            )
            conn.commit()
        _say(args, {"id": target, "action": verb, "done": done})
        return 0
    row = conn.execute(
        sql.SQL("SELECT state FROM {t} WHERE dtid = %s").format(t=table("dt_state")), (target,)
    ).fetchone()
    conn.rollback()
    if row is None:
        raise CommandError(
            f"{target!r} is not an in-doubt transaction here (see `laminar status`)", 6
        )
    _check_decision(row[0], commit, args.force, target)
    item = Item("distributed", target, None, 0.0, row[0])
    item.action = "complete" if commit else "roll_back"
    conn.execute(
        sql.SQL("UPDATE {t} SET state = %s, updated_at = now() WHERE dtid = %s").format(
            t=table("dt_state")
        ),
        ("commit" if commit else "rollback", target),
    )
    conn.commit()
    Watcher(args.dsn, kafka_sink=kafka)._act(conn, item)
    _say(args, {"id": target, "action": verb, "done": item.outcome == "resolved"})
    return 0


def _check_decision(state: str | None, commit: bool, force: bool, what: str) -> None:
    if commit and state == "prepare" and not force:
        raise CommandError(
            f"{what} has no decision yet (state PREPARE: its coordinator never collected every "
            "participant's vote, and its Kafka participants have no recorded producer identity "
            "to commit with): only --rollback is safe. Add --force to commit what PostgreSQL "
            "holds anyway",
            4,
        )
    opposite = "rollback" if commit else "commit"
    if state == opposite and not force:
        raise CommandError(
            f"the recorded decision for {what} is {state.upper()}: refusing to "
            f"{'commit' if commit else 'roll back'} it (that breaks atomicity). Add --force if "
            "you know the decision is wrong",
            4,
        )


def _resolve_kafka(
    conn: psycopg.Connection[Any], tid: str, commit: bool, force: bool, kafka: _KafkaFactory
) -> int:
    rows = read_decisions(conn, [tid])
    conn.rollback()
    if not rows:
        raise CommandError(f"no decision for Kafka sink {tid!r} in laminar.txn_state", 6)
    row = rows[0]
    sink = kafka(tid)
    if sink is None:
        raise CommandError(f"Kafka sink {tid!r} is not registered in laminar.sinks", 6)
    corrupt = row.corruption()
    if commit:
        if corrupt is not None:
            # keep the decided epoch, forget the unreadable producer identity: recovery then
            # completes it from the redo log or the replay
            from laminar._core import PreparedTxnState

            fresh = PreparedTxnState(tid, row.epoch)
            conn.execute(
                sql.SQL("UPDATE {t} SET prepared_state = %s WHERE transactional_id = %s").format(
                    t=table("txn_state")
                ),
                (str(fresh), tid),
            )
            conn.commit()
        awaiting = resolve_kafka_sinks(conn, [sink], init=lambda s: s.init_transactions())
        if awaiting:
            print(
                f"Kafka sink {tid}: decided epoch {awaiting[tid]} can only be completed by "
                "Spark's replay of that batch (no redo log, and the broker no longer holds the "
                "transaction): restart the query from its checkpoint"
            )
            return 5
        print(f"Kafka sink {tid}: decided epoch {row.epoch} is committed in Kafka")
        return 0
    if not force:
        raise CommandError(
            f"the decision for Kafka sink {tid} is COMMIT of epoch {row.epoch} (PostgreSQL has "
            "it): rolling Kafka's part back leaves PostgreSQL ahead of Kafka for good. Add "
            "--force to accept Kafka's state",
            4,
        )
    marker = sink.last_committed_epoch()
    from laminar._core import PreparedTxnState

    conn.execute(
        sql.SQL(
            "UPDATE {t} SET epoch = %s, previous_epoch = %s, prepared_state = %s"
            " WHERE transactional_id = %s"
        ).format(t=table("txn_state")),
        (
            -1 if marker is None else marker,
            marker,
            str(PreparedTxnState(tid, -1 if marker is None else marker)),
            tid,
        ),
    )
    conn.commit()
    print(f"Kafka sink {tid}: decision moved back to Kafka's marker ({marker})")
    return 0


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
