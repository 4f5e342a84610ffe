"""The commands every Kafka-facing protocol shares: :class:`KafkaDriver` performs the commands of
the Kafka sinks, the decision records and the clock that the atomic group and Kafka recovery
(the writer's start-up, the watcher, ``laminar recover``) have in common, and `end_txn` completes
a prepared transaction over the wire client. The loop that runs a machine is `laminar.engine.
loop.drive` (docs/engine.md §1); the driver decides nothing.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from typing_extensions import assert_never

from laminar._core import Command, Event
from laminar.engine import records as _records
from laminar.engine.loop import now_ms, perform_driver_side
from laminar.errors import LaminarError
from laminar.kafka._redo import produce_blob
from laminar.kafka._stalls import request_timeout_s, setup_timeout_s
from laminar.kafka.log import (
    ClientSecurity,
    KafkaAuthorizationError,
    KafkaLogClient,
    KafkaLogError,
)
from laminar.postgres._errors import map_pg_error

if TYPE_CHECKING:
    from laminar._core import _DriverSideCommand, _KafkaSinkCommand, _RecordsCommand

#: What `KafkaDriver` performs: every command of `KafkaRecoveryMachine`, and those of the other
#: Kafka-facing machines that its subclasses share.
KafkaDriverCommand: TypeAlias = (
    "_DriverSideCommand | Command.Commit | Command.Rollback | _KafkaSinkCommand | _RecordsCommand"
)

__all__ = ["KafkaDriver", "KafkaDriverCommand", "end_txn", "pg_mapped"]

_D = TypeVar("_D", bound="KafkaDriver")
_C = TypeVar("_C", bound=Command)


def pg_mapped(perform: Callable[[_D, _C], Event]) -> Callable[[_D, _C], Event]:
    """A driver's ``perform`` whose psycopg errors become `laminar.errors` (`map_pg_error`),
    named after the command and the driver."""

    @functools.wraps(perform)
    def mapped(driver: _D, command: _C) -> Event:
        try:
            return perform(driver, command)
        except psycopg.Error as e:
            epoch = getattr(command, "epoch", None)
            what = f"{command.kind.replace('_', ' ')} ({driver.what()})"
            raise map_pg_error(e, what, epoch=epoch) from e

    return mapped


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

    @pg_mapped
    def perform(self, c: KafkaDriverCommand) -> Event:
        """Perform ``c``; psycopg errors become `laminar.errors` (`map_pg_error`). Subclasses
        perform their own commands and hand the rest here."""
        match c:
            case Command.Reached() | Command.Log() | Command.Sleep():
                return perform_driver_side(c, self.log)
            case Command.Commit():
                return self._end_transaction(commit=True)
            case Command.Rollback():
                return self._end_transaction(commit=False)
            case (
                Command.InitSink()
                | Command.KnownEpoch()
                | Command.ReadMarker()
                | Command.SinkBegin()
                | Command.SinkCommit()
                | Command.SinkAbort()
                | Command.ProduceRedo()
                | Command.EndTxn()
            ):
                return self._kafka(c)
            case (
                Command.ReadSinkEpochs()
                | Command.ReadDecisions()
                | Command.RedoExists()
                | Command.ReadRedo()
                | Command.DeleteRedo()
            ):
                return self._records(c)
            case _:
                assert_never(c)

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

    def _end_transaction(self, *, commit: bool) -> Event:
        conn = self.connect()
        with contextlib.suppress(psycopg.Error):
            conn.commit() if commit else conn.rollback()
        return Event.ack()

    def _kafka(self, c: _KafkaSinkCommand) -> Event:
        sink = self.kafka_sink(c.transactional_id if isinstance(c, Command.EndTxn) else c.sink_id)
        if sink is None:
            return Event.missing()
        match c:
            case Command.InitSink():
                if self.init is not None:
                    self.init(sink)
                else:
                    sink.init_transactions()
            case Command.KnownEpoch():
                return Event.marker(sink.tracker.last_committed_epoch, now_ms())
            case Command.ReadMarker():
                return Event.marker(sink.last_committed_epoch(), now_ms())
            case Command.SinkBegin(_, epoch):
                return Event.began(bool(sink.begin_transaction(epoch)))
            case Command.SinkCommit(_, epoch):
                sink.commit_transaction(epoch)
            case Command.SinkAbort(sink_id, epoch):
                # best effort: an abort that fails is cleaned up by the next fencing
                if sink.transaction_state.holds_transaction():
                    try:
                        sink.abort_transaction(epoch)
                    except LaminarError as err:
                        self.log.warning(
                            "sink %s: abort of epoch %s failed: %s", sink_id, epoch, err
                        )
            case Command.ProduceRedo(blob=blob):
                produce_blob(sink, self.blobs[blob])
            case Command.EndTxn(transactional_id, producer_id, producer_epoch):
                settings = sink.client_settings()
                why = end_txn(
                    settings.bootstrap_servers,
                    settings.producer_config,
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    timeout_s=settings.commit_timeout_s,
                    clients=self.end_txn_clients,
                )
                return Event.end_txn(why)
            case _:
                assert_never(c)
        return Event.ack()

    def _records(self, c: _RecordsCommand) -> Event:
        conn = self.connect()
        idle = _idle(conn)
        match c:
            case Command.ReadSinkEpochs(sink_ids):
                event = Event.progress(_records.read_sink_epochs(conn, sink_ids))
            case Command.ReadDecisions(sink_ids, group_id):
                rows = _records.read_decisions(conn, sink_ids, group_id=group_id)
                for row in rows:
                    sink = self.kafka_by_id.get(row.transactional_id)
                    if sink is not None:
                        # a decision row proves the sink has written: lost marker and identity
                        # groups must not make it look new (docs/protocol.md §1)
                        sink.recorded_history = (
                            f"laminar.txn_state records its decided epoch {row.epoch}"
                        )
                event = Event.decisions([r.event_row() for r in rows])
            case Command.RedoExists(transactional_id, epoch):
                event = Event.found(_records.redo_exists(conn, transactional_id, epoch))
            case Command.ReadRedo(transactional_id, epoch):
                self.blobs = _records.read_redo(conn, transactional_id, epoch)
                event = Event.redo_read(len(self.blobs))
            case Command.DeleteRedo(transactional_id, up_to):
                _records.delete_redo(conn, transactional_id, up_to)
                event = Event.ack()
            case _:
                assert_never(c)
        if idle:
            conn.commit()  # a read or delete on its own: no transaction left open
        return event
