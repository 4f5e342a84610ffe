"""The commands every Kafka-facing protocol shares: :class:`KafkaDriver` performs the commands of
the Kafka sinks, the decision records and the clock that the atomic group and Kafka recovery
(the writer's start-up, the watcher, ``laminar recover``) have in common, and `end_txn` completes
a prepared transaction over the wire client. The loop that runs a machine is `laminar.engine.
loop.drive` (docs/engine.md §1); the driver decides nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from laminar._core import Command, Event
from laminar.engine import records as _records
from laminar.engine.loop import now_ms, perform_driver_side
from laminar.errors import FatalError, LaminarError
from laminar.kafka._redo import produce_blob
from laminar.kafka._stalls import request_timeout_s, setup_timeout_s
from laminar.kafka.log import (
    ClientSecurity,
    KafkaAuthorizationError,
    KafkaLogClient,
    KafkaLogError,
)
from laminar.postgres._errors import map_pg_error

__all__ = ["KafkaDriver", "end_txn"]


def end_txn(
    bootstrap_servers: str,
    producer_config: dict[str, Any],
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    *,
    timeout_s: float = 10.0,
    clients: dict[Any, KafkaLogClient] | None = None,
) -> str | None:
    """``EndTxn(commit)`` for a prepared transaction; None if the broker accepted it, else why
    not (the caller reads the marker either way: it is the only proof). A coordinator that moves
    is found again within ``timeout_s`` (the sink's ``commit_timeout_s``: docs/kafka.md,
    "Failover"). ``clients``: wire clients kept by the caller for its next ``EndTxn`` (one per
    cluster and security: a commit completing several participants connects once), which it
    closes; without it the client is closed here. Refused credentials or a missing ACL raise
    `KafkaAuthorizationError` (an `AuthorizationError`) instead."""
    try:
        security = ClientSecurity.from_config(producer_config)
        key = (bootstrap_servers, security, timeout_s)
        client = clients.get(key) if clients is not None else None
        if client is None:
            client = KafkaLogClient(
                bootstrap_servers,
                timeout=request_timeout_s(timeout_s),
                retry_for_s=timeout_s,
                setup_timeout=setup_timeout_s(timeout_s, producer_config),
                security=security,
            )
            if clients is not None:
                clients[key] = client
        try:
            client.end_txn(
                transactional_id, producer_id, producer_epoch, commit=True, retry_for_s=timeout_s
            )
        finally:
            if clients is None:
                client.close()
    except KafkaAuthorizationError:
        # refused credentials or a missing ACL: init_transactions would be refused the same
        # way, and recovery stops here, naming what to grant
        raise
    except KafkaLogError as e:
        return str(e)
    return None


def _idle(conn: psycopg.Connection[Any]) -> bool:
    return conn.info.transaction_status == TransactionStatus.IDLE


class KafkaDriver:
    """Performs the commands shared by the protocols over Kafka sinks and the decision records.

    ``kafka`` maps a transactional id to its sink (`laminar.kafka.sink.KafkaSink` or a
    scale-out participant); ``connect()`` returns the open decision connection (a new one when
    the last one broke). Subclasses add their own commands in `perform` and fall back here.
    """

    def __init__(
        self,
        kafka: Mapping[str, Any],
        connect: Callable[[], psycopg.Connection[Any]],
        log: logging.Logger,
        *,
        init: Callable[[Any], None] | None = None,
    ) -> None:
        self.kafka_by_id = dict(kafka)
        #: How ``init_sink`` opens a sink's new producer (default: ``init_transactions()``).
        self.init = init
        self.connect = connect
        self.log = log
        #: The blobs of the last ``read_redo``, for ``produce_redo``.
        self.blobs: list[bytes] = []
        #: Wire clients kept for the next ``end_txn`` (`close_clients`); None: one per call.
        self.end_txn_clients: dict[Any, KafkaLogClient] | None = None

    def perform(self, command: Command) -> Event:
        """Perform ``command``; psycopg errors become `laminar.errors` (`map_pg_error`)."""
        try:
            return self._perform(command)
        except psycopg.Error as e:
            raise map_pg_error(
                e, f"{command.kind.replace('_', ' ')} ({self.what()})", epoch=command.epoch
            ) from e

    def what(self) -> str:
        """What the driver runs, for error messages."""
        return "Kafka recovery"

    def close_clients(self) -> None:
        """Close the wire clients kept for ``end_txn``."""
        clients, self.end_txn_clients = self.end_txn_clients, None
        for client in (clients or {}).values():
            client.close()

    def kafka_sink(self, sink_id: str) -> Any:
        """The sink a Kafka command names (None: the driver has no configuration for it)."""
        return self.kafka_by_id.get(sink_id)

    def _perform(self, c: Command) -> Event:
        kind = c.kind
        done = perform_driver_side(c, self.log)
        if done is not None:
            return done
        if kind in ("commit", "rollback"):
            return self._end_transaction(commit=kind == "commit")
        if kind in _KAFKA_COMMANDS:
            sink = self.kafka_sink(c.sink_id or c.transactional_id or "")
            if sink is None:
                return Event.missing()
            return self._kafka(c, sink)
        return self._records(c)

    def _end_transaction(self, *, commit: bool) -> Event:
        conn = self.connect()
        with contextlib.suppress(psycopg.Error):
            conn.commit() if commit else conn.rollback()
        return Event.ack()

    def _kafka(self, c: Command, sink: Any) -> Event:
        kind, epoch = c.kind, c.epoch
        if kind == "init_sink":
            if self.init is not None:
                self.init(sink)
            else:
                sink.init_transactions()
        elif kind == "known_epoch":
            return Event.marker(sink.tracker.last_committed_epoch, now_ms())
        elif kind == "read_marker":
            return Event.marker(sink.last_committed_epoch(), now_ms())
        elif kind == "sink_begin":
            assert epoch is not None
            return Event.began(bool(sink.begin_transaction(epoch)))
        elif kind == "sink_commit":
            assert epoch is not None
            sink.commit_transaction(epoch)
        elif kind == "sink_abort":
            # best effort: an abort that fails is cleaned up by the next fencing
            if sink.transaction_state.holds_transaction():
                try:
                    sink.abort_transaction(epoch)
                except LaminarError as err:
                    self.log.warning("sink %s: abort of epoch %s failed: %s", c.sink_id, epoch, err)
        elif kind == "produce_redo":
            assert c.blob is not None
            produce_blob(sink, self.blobs[c.blob])
        elif kind == "end_txn":
            assert c.transactional_id is not None
            why = end_txn(
                sink.client_settings().bootstrap_servers,
                sink.client_settings().producer_config,
                c.transactional_id,
                int(c.producer_id or 0),
                int(c.producer_epoch or 0),
                timeout_s=sink.client_settings().commit_timeout_s,
                clients=self.end_txn_clients,
            )
            return Event.end_txn(why)
        return Event.ack()

    def _records(self, c: Command) -> Event:
        conn = self.connect()
        kind = c.kind
        idle = _idle(conn)
        if kind == "read_sink_epochs":
            event = Event.progress(_records.read_sink_epochs(conn, c.sink_ids or []))
        elif kind == "read_decisions":
            rows = _records.read_decisions(conn, c.sink_ids, group_id=c.group_id)
            for row in rows:
                sink = self.kafka_by_id.get(row.transactional_id)
                if sink is not None:
                    # a decision row proves the sink has written: lost marker and identity
                    # groups must not make it look new (docs/protocol.md §1)
                    sink.recorded_history = (
                        f"laminar.txn_state records its decided epoch {row.epoch}"
                    )
            event = Event.decisions([r.event_row() for r in rows])
        elif kind == "redo_exists":
            assert c.transactional_id is not None
            assert c.epoch is not None
            event = Event.found(_records.redo_exists(conn, c.transactional_id, c.epoch))
        elif kind == "read_redo":
            assert c.transactional_id is not None
            assert c.epoch is not None
            self.blobs = _records.read_redo(conn, c.transactional_id, c.epoch)
            event = Event.redo_read(len(self.blobs))
        elif kind == "delete_redo":
            assert c.transactional_id is not None
            assert c.up_to is not None
            _records.delete_redo(conn, c.transactional_id, c.up_to)
            event = Event.ack()
        else:
            raise FatalError(f"protocol driver: {self.what()} cannot perform {kind!r}")
        if idle:
            conn.commit()  # a read or delete on its own: no transaction left open
        return event


_KAFKA_COMMANDS = frozenset(
    {
        "init_sink",
        "known_epoch",
        "read_marker",
        "sink_begin",
        "sink_commit",
        "sink_abort",
        "produce_redo",
        "end_txn",
    }
)
