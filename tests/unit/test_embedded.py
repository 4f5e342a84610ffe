"""Pure parts of laminar.embedded: no server is started here."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path
from types import MappingProxyType

import pytest

from laminar.embedded import (
    BrokerCapabilities,
    EmbeddedServerError,
    EphemeralPostgres,
    SparkConnectServer,
    TansuBroker,
    find_pg_bindir,
    find_tansu_binary,
    free_port,
)
from laminar.embedded._process import log_tail, wait_until
from laminar.errors import LaminarError


def capabilities(**overrides: bool) -> BrokerCapabilities:
    flags = {name: True for name in BrokerCapabilities.CHECKS}
    flags.update(overrides)
    reasons = {name: f"reason for {name}" for name in BrokerCapabilities.CHECKS}
    return BrokerCapabilities(
        bootstrap_servers="127.0.0.1:9092", reasons=MappingProxyType(reasons), **flags
    )


def test_capabilities_missing_and_summary() -> None:
    caps = capabilities(hides_aborted_records=False, offset_metadata=False)

    assert caps.missing() == ("hides_aborted_records", "offset_metadata")
    assert "hides_aborted_records" not in caps.supported()
    assert not caps.full_exactly_once
    lines = caps.summary().splitlines()
    assert lines[0].startswith("broker 127.0.0.1:9092")
    assert len(lines) == 1 + len(BrokerCapabilities.CHECKS)
    assert any(
        "hides_aborted_records" in line and "NO" in line and "reason for" in line for line in lines
    )


def test_capabilities_are_frozen_hashable_and_compare_by_flags() -> None:
    a, b = capabilities(), capabilities()
    assert a == b
    assert hash(a) == hash(b)
    assert a.full_exactly_once
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.transactions = False  # type: ignore[misc]


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_wait_until_times_out_with_what() -> None:
    with pytest.raises(EmbeddedServerError, match="the thing: not ready after 0 s"):
        wait_until(lambda: False, timeout=0.05, what="the thing", interval=0.01)


def test_wait_until_stops_at_once_on_abort() -> None:
    with pytest.raises(EmbeddedServerError, match="the thing: it died"):
        wait_until(lambda: False, timeout=60, what="the thing", abort=lambda: "it died")


def test_embedded_server_error_is_a_laminar_error() -> None:
    assert issubclass(EmbeddedServerError, LaminarError)


def test_log_tail_masks_url_passwords(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(50)) + "storage: postgres://u:pa55@h/db\n")
    tail = log_tail(log, lines=3)
    assert tail.splitlines() == ["line 48", "line 49", "storage: postgres://u:***@h/db"]


def test_bad_tansu_override_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMINAR_TANSU_BIN", str(tmp_path / "no-such-tansu"))
    with pytest.raises(EmbeddedServerError, match="LAMINAR_TANSU_BIN"):
        find_tansu_binary()


def test_bad_pg_bindir_override_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMINAR_PG_BINDIR", str(tmp_path))
    with pytest.raises(EmbeddedServerError, match="LAMINAR_PG_BINDIR"):
        find_pg_bindir()


def test_servers_have_no_address_before_start() -> None:
    with pytest.raises(EmbeddedServerError, match="not been started"):
        _ = EphemeralPostgres().dsn
    with pytest.raises(EmbeddedServerError, match="not been started"):
        _ = TansuBroker().bootstrap_servers
    with pytest.raises(EmbeddedServerError, match="not been started"):
        _ = SparkConnectServer().remote_url


def test_broker_storage_description_hides_credentials() -> None:
    broker = TansuBroker(storage="postgres://tansu:secret@127.0.0.1:5432/tansu")
    assert broker.storage_description() == "postgres://127.0.0.1:5432/tansu"
    assert broker.durable
    assert not TansuBroker().durable
