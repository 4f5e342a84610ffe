"""A bootstrap server that accepts connections and never answers (a hung broker, a black-holed
load balancer), on a real Apache Kafka broker: listed first, it costs a sink's start-up a
connection set-up deadline — at most 2 s (the core's budget rule: docs/kafka.md "Budgets"), not
its whole ``init_timeout_s`` — and the records are exact; listed alone, the start-up ends within
the bound with a retriable error naming it (docs/kafka.md, "Stalled servers")."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
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

#: The sink's bound (its set-up deadline: 1 s, as its request time-out is 2 s).
INIT_TIMEOUT_S = 20.0
#: What a stalled server listed first may add to a start-up: one set-up deadline, which the
#: core never derives above 2 s (SETUP_MAX_MS). Measured when written: 1.0-1.2 s; before the
#: budgets, 2.2 s (a 2 s deadline), and before the set-up deadline, the whole bound.
STALL_COSTS_AT_MOST_S = 2.0


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


def timed(call: Callable[[], Any]) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


def test_a_stalled_server_listed_first_costs_the_start_up_one_set_up_deadline(
    kafka_bootstrap: str, topic: str, stall: Stall
) -> None:
    """Each start-up (a writer's first epoch, a reader's last committed epoch) is timed with and
    without the stalled server listed first, in a new process's state (`STALLS` cleared): the
    difference is what the stall costs."""
    stalled_servers = f"{stall.address},{kafka_bootstrap}"
    took: dict[str, float] = {}
    for name, servers in (("plain", kafka_bootstrap), ("stalled", stalled_servers)):
        tid = f"tid-{name}-{topic}"
        STALLS.clear()
        writer = laminar.exactly_once(make_sink(servers, topic, tid, init_timeout_s=INIT_TIMEOUT_S))
        took[f"{name} first epoch"] = timed(partial(writer.write_epoch, 0, epoch_table(0)))
        writer.write_epoch(1, epoch_table(1))
        writer.close()
        STALLS.clear()
        reader = make_sink(servers, topic, tid, init_timeout_s=INIT_TIMEOUT_S)
        took[f"{name} read"] = timed(reader.last_committed_epoch)
        reader.close()
        assert_exactly_once(committed(kafka_bootstrap, topic, tid), expected_ids(range(2)))
    print("start-ups: " + ", ".join(f"{k} {v:.2f} s" for k, v in took.items()))
    assert stall.accepted, "the stalled server was never tried"
    for what in ("first epoch", "read"):
        cost = took[f"stalled {what}"] - took[f"plain {what}"]
        assert cost <= STALL_COSTS_AT_MOST_S, f"the stalled server cost the {what} {cost:.1f} s"
    # the wire client met the stall and tries the server last from now on
    assert STALLS.order(parse_bootstrap(stalled_servers))[-1] == tuple(
        parse_bootstrap(stall.address)[0]
    )


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


def test_servers_that_stalled_then_went_away_end_the_start_up_with_a_retriable_error(
    topic: str, stall: Stall
) -> None:
    """Both servers take connections and never answer, then stop listening halfway through
    the start-up (brokers going down for a restart): at the end of the bound librdkafka is
    being refused, and its last report alone reads an unreachable address — the start-up's
    earlier reports name the stalls, so the error is retriable. (A CI run met the same race
    at the set-up deadline that drops each stalled connection, on the test above.)"""
    other = Stall()
    servers = f"{stall.address},{other.address}"
    bound = 3.0
    gone = [threading.Timer(1.5, s.close) for s in (stall, other)]
    try:
        sink = make_sink(servers, topic, f"tid-{topic}", init_timeout_s=bound)
        writer = laminar.exactly_once(sink, retries=0)
        started = time.monotonic()
        for timer in gone:
            timer.start()
        with pytest.raises(AbortableError) as caught:
            writer.write_epoch(0, epoch_table(0))
        took = time.monotonic() - started
        writer.close()
    finally:
        for timer in gone:
            timer.cancel()
        other.close()
    assert caught.value.retriable, caught.value
    assert took < bound + 2.0, f"{took:.1f} s for a bound of {bound:g} s: {caught.value}"
    assert stall.address in str(caught.value), caught.value
    assert other.address in str(caught.value), caught.value
