"""A bootstrap server that accepts connections and never answers (a hung broker, a black-holed
load balancer), on a real Apache Kafka broker: listed first, it costs a sink's start-up a
set-up deadline (`laminar.kafka._stalls`), not its whole ``init_timeout_s``, and the records are
exact; listed alone, the start-up ends within the bound with a retriable error naming it
(docs/kafka.md, "Failover")."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import laminar
from laminar.errors import AbortableError
from laminar.kafka._stalls import STALLS
from laminar.kafka.conn import parse_bootstrap
from tests.integration.kafka_helpers import (
    ROWS_PER_EPOCH,
    assert_exactly_once,
    committed,
    epoch_table,
    make_sink,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

#: The sink's bound, and what a start-up past a stalled server may take on a loaded machine
#: (before the fix: the bound itself, plus the rest of the start-up).
INIT_TIMEOUT_S = 20.0
WITHIN_S = 10.0


class Stall:
    """A loopback server that accepts TCP connections and never answers them."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def stall() -> Iterator[Stall]:
    STALLS.clear()
    server = Stall()
    yield server
    server.close()
    STALLS.clear()


@pytest.fixture
def topic(kafka_broker: Any, topic_name: str) -> str:
    kafka_broker.create_topic(topic_name, partitions=2)
    return topic_name


def expected_ids(epochs: range) -> set[int]:
    return {e * 1000 + i for e in epochs for i in range(ROWS_PER_EPOCH)}


def test_a_stalled_server_listed_first_costs_the_start_up_seconds_not_its_bound(
    kafka_bootstrap: str, topic: str, stall: Stall
) -> None:
    servers = f"{stall.address},{kafka_bootstrap}"
    tid = f"tid-{topic}"
    writer = laminar.exactly_once(make_sink(servers, topic, tid, init_timeout_s=INIT_TIMEOUT_S))
    started = time.monotonic()
    writer.write_epoch(0, epoch_table(0))
    first = time.monotonic() - started
    writer.write_epoch(1, epoch_table(1))
    writer.close()
    assert first < WITHIN_S, f"the first epoch took {first:.1f} s past a stalled server"
    # the wire client met the stall and tries the server last from now on
    assert STALLS.order(parse_bootstrap(servers))[-1] == tuple(parse_bootstrap(stall.address)[0])

    # a new process knows nothing of the stall: a reader's start-up pays the deadline once
    STALLS.clear()
    reader = make_sink(servers, topic, tid, init_timeout_s=INIT_TIMEOUT_S)
    started = time.monotonic()
    assert reader.last_committed_epoch() == 1
    took = time.monotonic() - started
    reader.close()
    assert took < WITHIN_S, f"last_committed_epoch() took {took:.1f} s past a stalled server"
    assert stall.accepted, "the stalled server was never tried"
    assert_exactly_once(committed(kafka_bootstrap, topic, tid), expected_ids(range(2)))


def test_only_stalled_servers_end_the_start_up_within_its_bound_with_a_retriable_error(
    topic: str, stall: Stall
) -> None:
    other = Stall()
    servers = f"{stall.address},{other.address}"
    bound = 3.0
    try:
        sink = make_sink(servers, topic, f"tid-{topic}", init_timeout_s=bound)
        started = time.monotonic()
        with pytest.raises(AbortableError) as caught:
            sink.last_committed_epoch()
        read_took = time.monotonic() - started
        writer = laminar.exactly_once(sink, retries=0)
        started = time.monotonic()
        with pytest.raises(AbortableError) as caught_writing:
            writer.write_epoch(0, epoch_table(0))
        write_took = time.monotonic() - started
        writer.close()
    finally:
        other.close()
    for error, took in ((caught.value, read_took), (caught_writing.value, write_took)):
        assert error.retriable, error
        assert took < bound + 2.0, f"{took:.1f} s for a bound of {bound:g} s: {error}"
        assert stall.address in str(error), error
        assert other.address in str(error), error
