"""Laminar's clients on a Kafka broker secured as production ones are (`SecuredKafkaBroker`):
SASL_SSL with SCRAM-SHA-512, SSL with client certificates (files, or librdkafka's PEM strings
with a password-protected key), SASL_SSL with OAUTHBEARER (a user's ``oauth_cb``, or the OIDC
client-credentials method) validated against a JWKS — ACLs enforced.

The wire client (`laminar.kafka.log`: EndTxn, the identity, the witness, ``laminar status``)
authenticates on each; refused credentials are an `AuthorizationError` at once, never a retry
loop; an OAUTHBEARER session is re-authenticated before the broker's session lifetime ends
(KIP-368); and a `KafkaSink` whose marker is gone finds its last epoch with the witness.
"""

from __future__ import annotations

import time

import pytest

from laminar import KafkaSink
from laminar.embedded.kafka_secure import Acl, SecuredKafkaBroker
from laminar.embedded.postgres_secure import SecuredPostgres
from laminar.errors import AuthorizationError
from laminar.kafka._security import ClientSecurity
from laminar.kafka.log import KafkaAuthorizationError, KafkaLogClient
from tests.integration.atomic_helpers import ROWS_PER_EPOCH, epoch_table
from tests.integration.kafka_fill import settled_committed
from tests.integration.secured_helpers import World, documented_rights

#: The wire client's ways in: (listener, ``oidc``).
WAYS = [("SCRAM", False), ("MTLS", False), ("MTLS_PEM", False), ("OAUTH", False), ("OAUTH", True)]


def world_of(kafka: SecuredKafkaBroker, postgres: SecuredPostgres, listener: str) -> World:
    world = World(kafka, postgres, listener)
    world.grant([r for r in documented_rights() if r.store == "kafka"])
    return world


def client(world: World, who: str = "writer", *, oidc: bool = False, **kw: float) -> KafkaLogClient:
    security = ClientSecurity.from_config(world.settings(who, oidc=oidc))
    return KafkaLogClient(world.bootstrap, security=security, timeout=5.0, **kw)


@pytest.mark.parametrize(("listener", "oidc"), WAYS, ids=[f"{w}{'-oidc' * o}" for w, o in WAYS])
def test_the_wire_client_authenticates_and_is_authorized_as_its_principal(
    secured_kafka: SecuredKafkaBroker, secured_postgres: SecuredPostgres, listener: str, oidc: bool
) -> None:
    world = world_of(secured_kafka, secured_postgres, listener)
    with client(world, oidc=oidc) as wire:
        assert sorted(wire.partition_leaders(world.topic)) == [0, 1]
        identity = f"laminar.{world.tid}.identity"
        assert wire.commit_offset(identity, world.topic, 0, 0, "{}", 60_000)
        assert wire.committed_offset(identity, world.topic, 0) == (0, "{}")
        # a group its ACLs do not cover is refused by name
        with pytest.raises(KafkaAuthorizationError) as refused:
            wire.committed_offset(f"other.{world.tid}", world.topic, 0)
    assert refused.value.acl == f"DESCRIBE on group 'other.{world.tid}'"
    assert world.leaked(str(refused.value)) == []


def _bad_scram(world: World) -> dict[str, object]:
    return {**world.settings("writer"), "sasl.password": "not-the-password"}


def _bad_audience(world: World) -> dict[str, object]:
    issuer = world.kafka.issuer
    token, expiry = issuer.mint(world.principal("writer"), audience="someone-else")
    return {**world.settings("writer"), "oauth_cb": lambda _: (token, expiry)}


def _bad_client_secret(world: World) -> dict[str, object]:
    return {**world.settings("writer", oidc=True), "sasl.oauthbearer.client.secret": "wrong"}


def _no_certificate(world: World) -> dict[str, object]:
    config = world.settings("writer")
    for key in ("ssl.certificate.location", "ssl.key.location", "ssl.key.password"):
        config.pop(key)
    return config


REFUSALS = {
    "SCRAM": [_bad_scram],
    "OAUTH": [_bad_audience, _bad_client_secret],
    "MTLS": [_no_certificate],
}


@pytest.mark.parametrize(
    ("listener", "bad"),
    [(listener, bad) for listener, bads in REFUSALS.items() for bad in bads],
    ids=lambda v: v if isinstance(v, str) else v.__name__.strip("_"),
)
def test_refused_credentials_are_an_authorization_error_at_once(
    secured_kafka: SecuredKafkaBroker, secured_postgres: SecuredPostgres, listener: str, bad: object
) -> None:
    world = world_of(secured_kafka, secured_postgres, listener)
    config = bad(world)  # type: ignore[operator]
    started = time.monotonic()
    security = ClientSecurity.from_config(config)
    wire = KafkaLogClient(world.bootstrap, security=security, timeout=10.0)
    with wire, pytest.raises(AuthorizationError) as refused:
        wire.partition_leaders(world.topic)
    assert time.monotonic() - started < 5, "retried instead of refused"
    message = str(refused.value)
    assert world.leaked(message) == [], message
    assert "not-the-password" not in message, message


def test_an_oauthbearer_session_is_reauthenticated_then_reconnected_when_it_expires(
    secured_kafka: SecuredKafkaBroker, secured_postgres: SecuredPostgres
) -> None:
    """The broker limits the session to the token's life (KIP-368): the wire client
    authenticates again on the same connection past 85 % of it, with a fresh token (80 %), and
    connects again once a session lapsed while idle."""
    world = world_of(secured_kafka, secured_postgres, "OAUTH")
    issuer = world.kafka.issuer
    issuer.register_client(
        world.client_id("writer"), world.secrets["writer"], subject=world.principal("writer"),
        lifetime_s=4.0,
    )  # fmt: skip
    with client(world, oidc=True, retry_for_s=10.0) as wire:
        wire.partition_leaders(world.topic)
        conn = wire._bootstrap_connection()
        lifetime_s = conn._session_lifetime_ms / 1000
        assert 2.0 < lifetime_s <= 4.0, lifetime_s
        time.sleep(lifetime_s * 0.9)
        wire.partition_leaders(world.topic)
        assert (conn.reauthentications, conn.reconnections) == (1, 0)
        time.sleep(conn._session_lifetime_ms / 1000 + 0.5)
        wire.partition_leaders(world.topic)
        assert (conn.reauthentications, conn.reconnections) == (1, 1)
        assert wire.failovers == 0  # never a failed request retried
    assert issuer.issued[world.client_id("writer")] == 3


@pytest.mark.parametrize("listener", ["SCRAM", "MTLS_PEM", "OAUTH"])
def test_a_sink_without_its_marker_finds_its_last_epoch_by_the_identity_and_the_witness(
    secured_kafka: SecuredKafkaBroker, secured_postgres: SecuredPostgres, listener: str
) -> None:
    world = world_of(secured_kafka, secured_postgres, listener)

    def sink() -> KafkaSink:
        return KafkaSink(
            world.bootstrap, world.topic, world.tid, key="id",
            producer_config=world.settings("writer"), init_timeout_s=10.0,
        )  # fmt: skip

    def write(target: KafkaSink, epoch: int) -> bool:
        if not target.begin_transaction(epoch):
            return False  # a replay, skipped
        target.write(epoch_table(epoch))
        target.commit_transaction(epoch)
        return True

    first = sink()
    assert [write(first, epoch) for epoch in range(2)] == [True, True]
    assert first.startup_read is not None
    assert first.startup_read.source == "new"
    first.close()
    # the marker expires (offsets.retention.minutes): deleted by the admin
    admin = world.kafka.admin_client()
    for future in admin.delete_consumer_groups([f"laminar.{world.tid}"]).values():
        future.result(15)
    again = sink()
    assert again.last_committed_epoch() == 1
    found = again.startup_read
    assert found is not None
    assert found.source == "witness", found
    assert [write(again, 1), write(again, 2)] == [False, True]
    again.close()
    assert len(settled_committed(world.kafka.bootstrap_servers, world.topic)) == 3 * ROWS_PER_EPOCH
    assert world.leaked(repr(again) + repr(found)) == []


def test_an_acl_the_admin_grants_later_is_used_at_once(
    secured_kafka: SecuredKafkaBroker, secured_postgres: SecuredPostgres
) -> None:
    """A refusal is not remembered: once the ACL is there, the next call goes through."""
    world = World(secured_kafka, secured_postgres, "OAUTH")
    with client(world) as wire:
        with pytest.raises(KafkaAuthorizationError) as refused:
            wire.partition_leaders(world.topic)
        assert refused.value.acl == f"DESCRIBE on topic {world.topic!r}"
        secured_kafka.grant(
            [Acl(f"User:{world.principal('writer')}", "DESCRIBE", "TOPIC", world.topic)]
        )
        assert sorted(wire.partition_leaders(world.topic)) == [0, 1]
