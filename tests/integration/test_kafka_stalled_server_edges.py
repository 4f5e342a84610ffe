"""Stalled bootstrap servers at their edges (`laminar.kafka._stalls`, docs/kafka.md "Stalled
servers"): servers that answer the set-up and hang later, servers that recover, the user's
``socket.connection.setup.timeout.ms`` in odd forms, many sinks sharing `STALLS` from threads,
secrets kept out of the errors. On the session's real Apache Kafka broker, reached through a
loopback proxy that forwards the broker's answers — all of them late, or only the first N."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import laminar
from laminar.errors import AbortableError, ConfigError, LaminarError
from laminar.kafka._stalls import STALLS, request_timeout_s, setup_timeout_s
from laminar.kafka.conn import BrokerUnavailableError
from laminar.kafka.log import KafkaLogClient
from tests.integration.kafka_helpers import (
    ROWS_PER_EPOCH,
    assert_exactly_once,
    committed,
    epoch_table,
    make_sink,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


class Proxy:
    """A loopback TCP proxy to ``upstream`` that forwards each Kafka response frame after
    ``delay_s`` — and, with ``answers``, only the first ``answers`` frames of each connection
    (then it keeps the connection open and forwards nothing: a broker that answered the set-up
    and hangs)."""

    def __init__(self, upstream: str, *, delay_s: float = 0.0, answers: int | None = None) -> None:
        host, port = upstream.split(",")[0].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.delay_s, self.answers = delay_s, answers
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self._open += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _requests(client: socket.socket, upstream: socket.socket) -> None:
        try:
            while chunk := client.recv(65536):
                upstream.sendall(chunk)
        except OSError:
            pass

    def _responses(self, upstream: socket.socket, client: socket.socket) -> None:
        sent = 0
        try:
            while True:
                head = self._exactly(upstream, 4)
                body = self._exactly(upstream, struct.unpack(">i", head)[0])
                if self.answers is not None and sent >= self.answers:
                    continue  # black-holed
                if self.delay_s:
                    time.sleep(self.delay_s)
                client.sendall(head + body)
                sent += 1
        except OSError:
            pass

    @staticmethod
    def _exactly(sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise OSError("closed")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()
        for s in self._open:
            with contextlib.suppress(OSError):
                s.close()


@pytest.fixture
def topic(kafka_broker: Any, topic_name: str) -> str:
    kafka_broker.create_topic(topic_name, partitions=1)
    return topic_name


@pytest.fixture(autouse=True)
def clean_stalls() -> Iterator[None]:
    STALLS.clear()
    yield
    STALLS.clear()


def _wire_client(servers: str, init_timeout_s: float) -> KafkaLogClient:
    """The wire client exactly as a sink makes it (`Witness.log_client`)."""
    return KafkaLogClient(
        servers,
        timeout=request_timeout_s(init_timeout_s),
        retry_for_s=init_timeout_s,
        setup_timeout=setup_timeout_s(init_timeout_s),
    )


def test_a_server_that_answers_the_set_up_then_hangs_is_tried_last_by_the_next_clients(
    kafka_bootstrap: str, topic: str
) -> None:
    """A bootstrap server that answers ApiVersions and then hangs (Metadata, OffsetFetch never
    answered: a broker wedged after accept, a proxy that half-dies): the first wire client waits
    its request time-out (the core's: an eighth of its bound, at least 2 s), then asks the next
    server; the request time-out marks the server stalled for the process, so the next client
    (the next sink start-up, marker read, EndTxn) tries it last and answers at once."""
    proxy = Proxy(kafka_bootstrap, answers=1)  # ApiVersions answered, nothing after
    servers = f"{proxy.address},{kafka_bootstrap}"
    took = []
    try:
        for _ in range(2):
            client = _wire_client(servers, init_timeout_s=8.0)
            started = time.monotonic()
            try:
                assert client.committed_offset(f"laminar.{topic}", topic, 0) is None
            finally:
                client.close()
            took.append(time.monotonic() - started)
    finally:
        proxy.close()
    print(f"wire client calls past a server that hangs after ApiVersions: {took}")
    assert took[0] < 8.0, f"first client: {took[0]:.1f} s (its request time-out is 2 s)"
    assert took[1] < 1.0, f"second client: {took[1]:.1f} s — the process did not remember"


def test_a_sink_past_a_server_that_hangs_after_the_set_up_gets_a_retriable_error(
    kafka_bootstrap: str, topic: str
) -> None:
    """librdkafka's connection to a server that answers ApiVersions and then hangs is ``UP``, so
    its Metadata request may wait on it (librdkafka's ``socket.timeout.ms``) past
    ``init_timeout_s``: the start-up then ends in a retriable `AbortableError` naming the server
    (the cluster was reached: a hung broker, not an address to fix — docs/kafka.md, "Stalled
    servers"), never a FatalError, and nothing is written."""
    proxy = Proxy(kafka_bootstrap, answers=1)
    servers = f"{proxy.address},{kafka_bootstrap}"
    tid = f"tid-{topic}"
    try:
        for _ in range(2):  # librdkafka picks the broker it asks: either way it is no FatalError
            writer = laminar.exactly_once(
                make_sink(servers, topic, tid, init_timeout_s=4.0), retries=0
            )
            failed: LaminarError | None = None
            try:
                writer.write_epoch(0, epoch_table(0))
            except LaminarError as e:
                failed = e
            finally:
                writer.close()
            if failed is None:
                break
            assert type(failed) is AbortableError, repr(failed)
            assert failed.retriable, repr(failed)
            assert proxy.address in str(failed), str(failed)
    finally:
        proxy.close()
    records = committed(kafka_bootstrap, topic, tid)
    assert records == [] or sorted(int(r.key) for r in records) == list(range(ROWS_PER_EPOCH))


def test_a_stalled_server_that_recovers_is_tried_again_and_forgotten(
    kafka_bootstrap: str, topic: str
) -> None:
    """a proxy listed alone that answers nothing (answers=0) is remembered as stalled;
    when it recovers (now forwarding), the next client reaches it and `STALLS` forgets it."""
    proxy = Proxy(kafka_bootstrap, answers=0)
    try:
        client = _wire_client(proxy.address, init_timeout_s=2.0)
        with pytest.raises(BrokerUnavailableError) as caught:
            client.committed_offset(f"laminar.{topic}", topic, 0)
        client.close()
        assert proxy.address in str(caught.value)
        assert proxy.address in STALLS._stalled
        proxy.answers = None  # it recovers
        client = _wire_client(proxy.address, init_timeout_s=10.0)
        try:
            assert client.committed_offset(f"laminar.{topic}", topic, 0) is None
        finally:
            client.close()
        assert proxy.address not in STALLS._stalled
    finally:
        proxy.close()


def test_many_sinks_in_threads_share_stalls_and_all_write_exactly_once(
    kafka_bootstrap: str, kafka_broker: Any, unique_name: Any
) -> None:
    """6 sinks in threads, each with a stalled server listed first (the same one), write
    2 epochs each at once; every record is exact and no sink waits its whole bound."""
    stalled = Proxy(kafka_bootstrap, answers=0)
    servers = f"{stalled.address},{kafka_bootstrap}"
    topics = [unique_name("topic") for _ in range(6)]
    for t in topics:
        kafka_broker.create_topic(t, partitions=1)
    errors: list[BaseException] = []
    took: list[float] = []

    def run(t: str) -> None:
        try:
            started = time.monotonic()
            writer = laminar.exactly_once(make_sink(servers, t, f"tid-{t}", init_timeout_s=20.0))
            writer.write_epoch(0, epoch_table(0))
            writer.write_epoch(1, epoch_table(1))
            writer.close()
            took.append(time.monotonic() - started)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in topics]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
    finally:
        stalled.close()
    assert not errors, errors
    print(f"6 sinks past a shared stalled server: {sorted(round(t, 1) for t in took)} s")
    assert max(took) < 20.0
    ids = {e * 1000 + i for e in range(2) for i in range(ROWS_PER_EPOCH)}
    for t in topics:
        assert_exactly_once(committed(kafka_bootstrap, t, f"tid-{t}"), ids)


# -- socket.connection.setup.timeout.ms in odd forms (no broker needed) ------------------------


@pytest.mark.parametrize(
    "value", [1, 500, 999, True, "inf", "1e3"], ids=["1ms", "500ms", "999ms", "bool", "inf", "1e3"]
)
def test_setup_timeouts_librdkafka_refuses_are_refused_when_the_sink_is_made(
    value: Any,
) -> None:
    """``socket.connection.setup.timeout.ms`` values librdkafka refuses (1..999, ``True``,
    ``"inf"``, ``"1e3"``: 1 s to the wire client but 1 ms to librdkafka) are refused by the sink
    when it is made, with a ConfigError naming the setting — not later, at start-up."""
    config = {"socket.connection.setup.timeout.ms": value}
    with pytest.raises(ConfigError, match=r"socket\.connection\.setup\.timeout\.ms"):
        laminar.KafkaSink("127.0.0.1:1", "t", "tid", producer_config=config)


def test_a_huge_setup_timeout_is_capped_by_the_bound() -> None:
    assert setup_timeout_s(5.0, {"socket.connection.setup.timeout.ms": 2**31 - 1}) == 5.0
    assert setup_timeout_s(5.0, {"socket.connection.setup.timeout.ms": "2000"}) == 2.0
    with pytest.raises(ConfigError):
        setup_timeout_s(5.0, {"socket.connection.setup.timeout.ms": "nan"})


def test_the_stalled_error_names_servers_never_a_secret() -> None:
    """with SASL settings and a stalled server, the wire client's error names the server
    and not the password."""
    stall = socket.socket()
    stall.bind(("127.0.0.1", 0))
    stall.listen(8)
    address = f"127.0.0.1:{stall.getsockname()[1]}"
    try:
        sink = laminar.KafkaSink(
            address,
            "t",
            "tid-secret-check",
            init_timeout_s=2.0,
            producer_config={
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN",
                "sasl.username": "u",
                "sasl.password": "hunter2-very-secret",
            },
        )
        with pytest.raises(LaminarError) as caught:
            sink.last_committed_epoch()
        sink.close()
    finally:
        stall.close()
    text = str(caught.value) + repr(caught.value)
    assert address in text, text
    assert "hunter2" not in text, text


def test_tls_to_a_stalled_server_is_a_retriable_error_naming_it_not_the_key_password() -> None:
    """TLS settings (with a key password) and only a server that accepts and never
    answers (the TLS handshake stalls): a retriable AbortableError within the bound, naming the
    server, never the password."""
    stall = socket.socket()
    stall.bind(("127.0.0.1", 0))
    stall.listen(8)
    address = f"127.0.0.1:{stall.getsockname()[1]}"
    bound = 3.0
    try:
        sink = laminar.KafkaSink(
            address,
            "t",
            "tid-tls-check",
            init_timeout_s=bound,
            producer_config={
                "security.protocol": "SSL",
                "ssl.key.password": "tls-very-secret-pw",
            },
        )
        started = time.monotonic()
        with pytest.raises(LaminarError) as caught:
            sink.last_committed_epoch()
        took = time.monotonic() - started
        sink.close()
    finally:
        stall.close()
    text = str(caught.value) + repr(caught.value)
    print(type(caught.value).__name__, f"{took:.1f} s", text[:300])
    assert address in text, text
    assert "tls-very-secret-pw" not in text, text
    assert caught.value.retriable, text
    assert took < bound + 2.0
