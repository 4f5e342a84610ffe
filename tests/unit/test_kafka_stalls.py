"""The wire client's rule for stalled servers (`laminar.kafka._stalls`, docs/kafka.md "Budgets" and
"Stalled servers"): the set-up deadline of a new connection and the request time-out (the core's
budget rule), the order bootstrap servers are tried in after one
stalled, `Connection` giving up on a loopback socket that accepts and never answers, and the
brokers librdkafka's statistics show waiting for their first answer. (The real thing, on Apache
Kafka: tests/integration/test_kafka_stalled_server.py.)"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

import laminar
from laminar.errors import AbortableError, ConfigError, LaminarError
from laminar.kafka._config import validate_producer_config
from laminar.kafka._runtime import _Runtime
from laminar.kafka._stalls import StallMemory, request_timeout_s, setup_timeout_s
from laminar.kafka.conn import BrokerUnavailableError, Connection
from laminar.kafka.log import KafkaLogClient

SERVERS = [("a", 9092), ("b", 9092), ("c", 9092)]


def test_the_set_up_deadline_is_a_quarter_of_the_request_time_out() -> None:
    # the request time-out is an eighth of the bound, 2 to 30 s (protocol::retry)
    assert (request_timeout_s(30.0), setup_timeout_s(30.0)) == (3.75, 1.0)
    assert (request_timeout_s(60.0), setup_timeout_s(60.0)) == (7.5, 1.875)
    assert (request_timeout_s(600.0), setup_timeout_s(600.0)) == (30.0, 2.0)
    assert (request_timeout_s(4.0), setup_timeout_s(4.0)) == (2.0, 1.0)
    # never more than the bound
    assert (request_timeout_s(0.4), setup_timeout_s(0.4)) == (0.4, 0.4)


def test_the_users_settings_are_the_deadlines_within_the_bound() -> None:
    assert setup_timeout_s(30.0, {"socket.connection.setup.timeout.ms": 5000}) == 5.0
    assert setup_timeout_s(30.0, {"socket.connection.setup.timeout.ms": "1500"}) == 1.5
    assert setup_timeout_s(3.0, {"socket.connection.setup.timeout.ms": 10000}) == 3.0
    assert request_timeout_s(30.0, {"socket.timeout.ms": 20000}) == 20.0
    assert request_timeout_s(30.0, {"socket.timeout.ms": "7000"}) == 7.0
    assert request_timeout_s(3.0, {"socket.timeout.ms": 20000}) == 3.0


@pytest.mark.parametrize("value", ["soon", 0, -5, None])
def test_a_setup_timeout_that_is_no_duration_is_refused_by_name(value: Any) -> None:
    config = {"socket.connection.setup.timeout.ms": value}
    if value is None:
        assert setup_timeout_s(30.0, config) == 1.0  # not set
        return
    with pytest.raises(ConfigError, match=r"socket\.connection\.setup\.timeout\.ms"):
        validate_producer_config(config, bootstrap_servers="a:9092", transactional_id="t")


def test_stalled_servers_go_last_the_latest_stall_last_until_they_answer() -> None:
    memory = StallMemory()
    assert memory.order(SERVERS) == SERVERS
    memory.stalled("a:9092", now=10.0)
    assert memory.order(SERVERS) == [("b", 9092), ("c", 9092), ("a", 9092)]
    memory.stalled("b:9092", now=11.0)
    assert memory.order(SERVERS) == [("c", 9092), ("a", 9092), ("b", 9092)]
    memory.stalled("a:9092", now=12.0)
    assert memory.order(SERVERS) == [("c", 9092), ("b", 9092), ("a", 9092)]
    memory.answered("b:9092")
    assert memory.order(SERVERS) == [("b", 9092), ("c", 9092), ("a", 9092)]


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """The connections the client opened, as (host, set-up deadline given); hosts whose name
    starts with ``s`` stall, the others answer. No sleeping between retries."""
    log: list[tuple[str, float]] = []

    class FakeConnection:
        def __init__(self, host: str, port: int, *args: Any, setup_timeout: float) -> None:
            log.append((host, setup_timeout))
            self.address = f"{host}:{port}"
            if host.startswith("s"):
                raise BrokerUnavailableError(
                    f"no answer from {self.address}", address=self.address, stalled=True
                )

        def close(self) -> None:
            pass

    monkeypatch.setattr("laminar.kafka.log.Connection", FakeConnection)
    monkeypatch.setattr("laminar.kafka.log.time.sleep", lambda s: None)
    return log


def test_a_later_client_of_the_process_tries_the_stalled_server_last(
    opened: list[tuple[str, float]],
) -> None:
    memory = StallMemory()
    servers = "s1:9092,b:9092,c:9092"
    first = KafkaLogClient(servers, timeout=10.0, retry_for_s=30.0, stalls=memory)
    first.connect()
    assert opened == [("s1", 1.0), ("b", 1.0)]
    opened.clear()
    KafkaLogClient(servers, timeout=10.0, retry_for_s=30.0, stalls=memory).connect()
    assert [host for host, _ in opened] == ["b"]


def test_when_every_server_stalls_the_deadline_doubles_and_the_error_names_them(
    opened: list[tuple[str, float]],
) -> None:
    servers = "s1:9092,s2:9092,s3:9092"
    client = KafkaLogClient(servers, timeout=10.0, retry_for_s=4.0, stalls=StallMemory())
    with pytest.raises(BrokerUnavailableError) as caught:
        client.connect()
    assert caught.value.stalled
    text = str(caught.value)
    assert all(f"s{n}:9092" in text for n in (1, 2, 3)), text
    assert "retry_for_s=4 s" in text
    # 1 s (the shortest set-up deadline), doubled after each pass where all stalled, never more
    # than what is left of the bound
    deadlines = [setup for host, setup in opened if host == "s1"]
    assert deadlines[0] == pytest.approx(1.0, abs=0.02)
    assert deadlines[1] == pytest.approx(2.0, abs=0.02)
    assert all(d <= 4.0 for d in deadlines)


class Stall:
    """A loopback socket that accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()


def test_a_connection_to_a_server_that_never_answers_ends_at_its_set_up_deadline() -> None:
    stall = Stall()
    try:
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError) as caught:
            Connection("127.0.0.1", stall.port, 30.0, "test", setup_timeout=0.3)
        took = time.monotonic() - started
    finally:
        stall.close()
    assert took < 5.0
    assert caught.value.stalled
    assert caught.value.address == f"127.0.0.1:{stall.port}"
    assert "within the set-up deadline of 0.3 s" in str(caught.value)


def test_librdkafkas_statistics_name_the_brokers_waiting_for_their_first_answer() -> None:
    rt = _Runtime()
    assert rt.stalled_brokers() == []
    brokers = {
        "s:1/bootstrap": {"nodename": "s:1", "state": "APIVERSION_QUERY"},
        "r:2/bootstrap": {"nodename": "r:2", "state": "DOWN"},
        "c:3/bootstrap": {"nodename": "c:3", "state": "CONNECT"},
        "u:4/4": {"nodename": "u:4", "state": "UP"},
        "t:5/bootstrap": {"nodename": "t:5", "state": "SSL_HANDSHAKE"},
    }
    rt.on_stats(json.dumps({"brokers": brokers}))
    assert rt.stalled_brokers() == ["s:1", "t:5"]
    rt.on_stats("not json")
    assert rt.stalled_brokers() == []


def _report(**states: tuple[str, int]) -> str:
    """librdkafka statistics with these brokers' (state, stateage in microseconds)."""
    brokers = {
        f"{name}/bootstrap": {"nodename": name, "state": state, "stateage": age}
        for name, (state, age) in states.items()
    }
    return json.dumps({"brokers": brokers})


def test_a_metadata_wait_remembers_the_brokers_it_saw_stalled_until_they_answer() -> None:
    # a stalled server's connection is dropped at each set-up deadline: the wait's bound may
    # end while it reconnects, and the last report alone then reads an unreachable address
    rt = _Runtime()
    rt.stalls_seen = set()  # a new producer's first metadata wait (Clients.check_topic)
    rt.on_stats(_report(**{"s:1": ("APIVERSION_QUERY", 900_000), "t:2": ("APIVERSION_QUERY", 400)}))
    rt.on_stats(_report(**{"s:1": ("TRY_CONNECT", 5_000), "t:2": ("DOWN", 100)}))
    # t:2 closed the connection at once (no Kafka broker there): not a stall
    assert rt.stalled_brokers() == ["s:1"]
    rt.on_stats(_report(**{"s:1": ("UP", 10), "t:2": ("DOWN", 100)}))
    assert rt.stalled_brokers() == []  # it answered after all
    rt.on_stats(_report(**{"s:1": ("DOWN", 10), "t:2": ("DOWN", 100)}))
    assert rt.stalled_brokers() == ["s:1"]
    # outside the wait nothing is remembered (the reports are not parsed), nor kept from it
    rt.stalls_seen = None
    assert rt.stalled_brokers() == []
    rt.on_stats(_report(**{"s:1": ("APIVERSION_QUERY", 900_000)}))
    rt.on_stats(_report(**{"s:1": ("DOWN", 10)}))
    assert rt.stalled_brokers() == []


class _Metadata:
    """A producer whose metadata answers only to a wait of ``answers_after`` seconds or more,
    and whose statistics report ``reports`` in turn each time its callbacks are served."""

    def __init__(self, rt: _Runtime, answers_after: float, reports: list[str]) -> None:
        self.rt, self.answers_after, self.reports = rt, answers_after, reports
        self.waits: list[float] = []

    def list_topics(self, timeout: float) -> dict[str, tuple[int, Any]]:
        self.waits.append(timeout)
        if timeout < self.answers_after:
            time.sleep(timeout)
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out"))
        return {"t": (1, None)}

    def poll(self, timeout: float) -> int:
        if self.reports:
            self.rt.on_stats(self.reports.pop(0))
        return 0


def _checking(init_timeout_s: float, answers_after: float, reports: list[str]) -> Any:
    sink = laminar.KafkaSink("s:1,r:2", "t", "tid", init_timeout_s=init_timeout_s)
    rt = _Runtime()
    rt.begin_startup(init_timeout_s)
    rt.producer = _Metadata(rt, answers_after, reports)
    return sink._clients(rt)


def test_the_start_ups_metadata_wait_reads_every_report_and_names_a_stall_the_last_missed() -> None:
    stalled = _report(**{"s:1": ("APIVERSION_QUERY", 240_000), "r:2": ("CONNECT", 10)})
    dropped = _report(**{"s:1": ("TRY_CONNECT", 3_000), "r:2": ("CONNECT", 10)})
    clients = _checking(1.0, answers_after=60.0, reports=[stalled, dropped, dropped])
    with pytest.raises(AbortableError) as caught:
        clients.check_topic()
    assert "s:1 accepted the connection but never answered" in str(caught.value)
    assert clients.rt.producer.waits[:2] == [0.25, 0.5]  # each twice the last, to the bound
    assert sum(clients.rt.producer.waits) == pytest.approx(1.0, abs=0.1)


def test_a_slow_answer_is_still_waited_for() -> None:
    clients = _checking(5.0, answers_after=0.6, reports=[])
    clients.check_topic()  # a set-up longer than the first slices
    assert clients.rt.producer.waits == [0.25, 0.5, 1.0]
    assert clients.rt.stalls_seen is None  # remembered for the wait only


def test_once_a_broker_is_set_up_the_rest_of_the_bound_is_one_wait() -> None:
    # a request asked again would queue behind the one given up on, on a slow broker
    up = _report(**{"s:1": ("UP", 10), "r:2": ("CONNECT", 10)})
    clients = _checking(5.0, answers_after=3.0, reports=[up, up])
    clients.check_topic()
    waits = clients.rt.producer.waits
    assert waits[0] == 0.25
    assert len(waits) == 2
    assert waits[1] == pytest.approx(4.75, abs=0.1)


def test_refused_credentials_end_the_wait_at_once() -> None:
    clients = _checking(30.0, answers_after=60.0, reports=[])
    clients.rt.on_error(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication failed"))
    with pytest.raises(LaminarError) as caught:
        clients.check_topic()
    assert clients.rt.producer.waits == [0.25]
    assert not caught.value.retriable
