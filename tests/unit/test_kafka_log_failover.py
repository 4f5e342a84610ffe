"""The wire client's failover rule (`laminar.kafka.log.KafkaLogClient`, docs/kafka.md "Failover"),
on fake brokers: a refused connection, a broker that stops answering, NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS make it look the role up again and retry within ``retry_for_s``;
past the bound a `BrokerUnavailableError` says what it tried; a refusal that is not a move is
not retried. (The real thing: tests/integration/test_kafka_cluster_failover.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from laminar.kafka.conn import FIND_COORDINATOR, OFFSET_FETCH, BrokerUnavailableError
from laminar.kafka.log import KafkaLogClient, KafkaLogError

NOT_COORDINATOR, LOAD_IN_PROGRESS, GROUP_AUTHORIZATION_FAILED = 16, 14, 30


class Broker:
    """A fake broker: answers FindCoordinator and OffsetFetch as the cluster says now."""

    def __init__(self, cluster: Cluster, node: int) -> None:
        self.cluster, self.node = cluster, node
        self.address = f"b{node}:9092"

    def call(
        self, api_key: int, encode: Callable[..., Any], decode: Callable[..., Any], **_: Any
    ) -> Any:
        c = self.cluster
        c.log.append((self.node, api_key))
        if self.node in c.down:
            raise BrokerUnavailableError(
                f"broker {self.address} did not answer", address=self.address
            )
        if api_key == FIND_COORDINATOR:
            node = c.stale.pop(0) if c.stale else c.coordinator
            return (c.find_error, None, node, f"b{node}", 9092)
        if api_key == OFFSET_FETCH:
            if c.answers:
                return (c.answers.pop(0), -1, None)
            if self.node != c.coordinator:
                return (NOT_COORDINATOR, -1, None)
            return (0, 42, "meta")
        raise AssertionError(api_key)

    def offers(self, api_key: int, version: int) -> bool:
        return True

    def close(self) -> None:
        pass


class Cluster:
    def __init__(self) -> None:
        self.coordinator = 1
        self.down: set[int] = set()
        self.find_error = 0
        self.answers: list[int] = []
        #: What FindCoordinator answers before the move reached the broker asked.
        self.stale: list[int] = []
        self.log: list[tuple[int, int]] = []

    def client(self, retry_for_s: float = 2.0) -> KafkaLogClient:
        client = KafkaLogClient("b1:9092,b2:9092,b3:9092", timeout=1.0, retry_for_s=retry_for_s)

        def open_(host: str, port: int) -> Broker:
            node = int(host[1:])
            if node in self.down:
                raise BrokerUnavailableError(f"could not connect to {host}", address=f"{host}:9092")
            return Broker(self, node)

        client._open = open_  # type: ignore[assignment,method-assign]
        return client


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("laminar.kafka.log.time.sleep", lambda s: None)


def test_a_coordinator_that_moved_is_found_again() -> None:
    cluster = Cluster()
    client = cluster.client()
    assert client.committed_offset("g", "t", 0) == (42, "meta")
    cluster.coordinator = 3  # node 1 answers NOT_COORDINATOR from now on...
    cluster.stale = [1]  # ...but the broker asked first still names it
    assert client.committed_offset("g", "t", 0) == (42, "meta")
    assert (3, OFFSET_FETCH) in cluster.log
    assert client.failovers == 1


def test_a_dead_coordinator_and_a_dead_bootstrap_server_are_passed_over() -> None:
    cluster = Cluster()
    client = cluster.client()
    assert client.committed_offset("g", "t", 0) == (42, "meta")
    cluster.down = {1}  # the coordinator and the first bootstrap server: killed
    cluster.coordinator = 2  # ... and the controller moved the role
    assert client.committed_offset("g", "t", 0) == (42, "meta")
    assert cluster.log[-1] == (2, OFFSET_FETCH)


def test_loading_is_waited_out() -> None:
    cluster = Cluster()
    cluster.answers = [LOAD_IN_PROGRESS, LOAD_IN_PROGRESS]
    assert cluster.client().committed_offset("g", "t", 0) == (42, "meta")
    assert [k for _, k in cluster.log].count(OFFSET_FETCH) == 3


def test_past_the_bound_the_error_is_retriable_and_says_what_it_tried() -> None:
    cluster = Cluster()
    cluster.down = {1, 2, 3}
    with pytest.raises(BrokerUnavailableError, match=r"retry_for_s=0\.2 s \(\d+ tries") as e:
        cluster.client(retry_for_s=0.2).committed_offset("g", "t", 0)
    assert "no broker of bootstrap.servers" in str(e.value)


def test_a_refusal_that_is_no_move_is_not_retried() -> None:
    cluster = Cluster()
    cluster.answers = [GROUP_AUTHORIZATION_FAILED]
    with pytest.raises(KafkaLogError, match="GROUP_AUTHORIZATION_FAILED") as e:
        cluster.client().committed_offset("g", "t", 0)
    assert not isinstance(e.value, BrokerUnavailableError)
    assert [k for _, k in cluster.log].count(OFFSET_FETCH) == 1
