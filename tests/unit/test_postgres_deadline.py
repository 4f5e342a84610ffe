"""The watchdog behind PostgreSQL's answer deadline (`laminar.postgres._deadline`, docs/postgres.md
"A hung server"), on a local socket pair standing for a server that never answers: an armed wait
is cut by shutting the socket down once its deadline passed — the blocked reader then sees the end
of the connection at once — and a disarmed one never is. (The deadline on a real, SIGSTOPped
backend: tests/integration/test_postgres_hung_backend.py.)"""

from __future__ import annotations

import socket
import time

from laminar.postgres._deadline import _WATCHDOG, Lingering


def test_a_wait_past_its_deadline_is_cut_and_the_reader_sees_the_end() -> None:
    client, server = socket.socketpair()
    try:
        started = time.monotonic()
        armed = _WATCHDOG.arm(client.fileno(), 0.3)
        client.settimeout(10.0)
        assert client.recv(1) == b""  # the server never answered: the watchdog cut the wait
        took = time.monotonic() - started
        _WATCHDOG.disarm(armed)
    finally:
        client.close()
        server.close()
    assert armed.fired
    assert 0.25 <= took < 2.0, took


def test_a_disarmed_wait_is_never_cut() -> None:
    client, server = socket.socketpair()
    try:
        armed = _WATCHDOG.arm(client.fileno(), 0.2)
        _WATCHDOG.disarm(armed)
        time.sleep(0.6)
        server.sendall(b"x")
        client.settimeout(5.0)
        assert client.recv(1) == b"x"  # still connected
    finally:
        client.close()
        server.close()
    assert not armed.fired


def test_given_up_backends_are_remembered_per_server_until_cleared() -> None:
    lingering = Lingering()
    lingering.add("dsn-a", 101, 1000.0)
    lingering.add("dsn-a", 102, 1001.0)
    lingering.add("dsn-b", 201, 1002.0)
    assert lingering._by_server == {"dsn-a": {101: 1000.0, 102: 1001.0}, "dsn-b": {201: 1002.0}}
    lingering.clear()
    assert lingering._by_server == {}
