"""The wire client's security settings as librdkafka reads them (`laminar.kafka._security`,
`laminar.kafka._oauth`): which settings mean what, what is refused by name, how tokens are
obtained and kept, and that no secret shows in a repr or an error. The servers that enforce
them are tests/integration/test_secured_kafka.py's."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from laminar import _core
from laminar._redact import is_secret_key, redact_config
from laminar.errors import AuthorizationError, ConfigError
from laminar.kafka import _oauth
from laminar.kafka._oauth import OAuthSettings, jwt_claims
from laminar.kafka._security import (
    ClientSecurity,
    SecurityConfigError,
    UnsupportedSecurityError,
)
from laminar.kafka.conn import authorization_error
from laminar.protocol.driver import end_txn
from laminar.protocol.kafka_sinks import _callable

SECRET = "Very-S3cret-value"


def oauth(**settings: Any) -> dict[str, Any]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", **settings}


def test_the_settings_librdkafka_takes_for_tls_and_sasl() -> None:
    security = ClientSecurity.from_config(
        {
            "security.protocol": "SSL",
            "ssl.ca.pem": "CA",
            "ssl.certificate.pem": "CERT",
            "ssl.key.pem": SECRET,
            "ssl.key.password": SECRET,
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert (security.uses_tls, security.uses_sasl, security.check_hostname) == (True, False, False)
    assert (security.ca_pem, security.certificate_pem, security.key_pem) == ("CA", "CERT", SECRET)
    assert SECRET not in repr(security)
    security.check()  # nothing to refuse


def test_oauthbearer_settings_and_their_secrets() -> None:
    def provider(config: str | None) -> tuple[str, float]:
        return "t", 0.0

    security = ClientSecurity.from_config(
        oauth(oauth_cb=provider, **{"sasl.oauthbearer.config": f"key={SECRET}"})
    )
    assert security.oauth is not None
    assert security.oauth.oauth_cb is provider
    oidc = ClientSecurity.from_config(
        oauth(
            **{
                "sasl.oauthbearer.method": "OIDC",
                "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
                "sasl.oauthbearer.client.id": "me",
                "sasl.oauthbearer.client.secret": SECRET,
                "sasl.oauthbearer.scope": "kafka",
                "sasl.oauthbearer.extensions": "logicalCluster=lkc-1, identityPoolId=pool-2",
            }
        )
    )
    assert oidc.oauth is not None
    assert (oidc.oauth.method, oidc.oauth.client_id, oidc.oauth.scope) == ("oidc", "me", "kafka")
    assert oidc.oauth.extensions == (("logicalCluster", "lkc-1"), ("identityPoolId", "pool-2"))
    for shown in (repr(security), repr(oidc), oidc.oauth.source()):
        assert SECRET not in shown, shown
    # a provider object that compares by value, or is unhashable, is keyed by identity
    assert hash(security) == hash(security)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (oauth(), "oauth_cb"),
        (oauth(**{"sasl.oauthbearer.method": "oidc"}), "sasl.oauthbearer.token.endpoint.url"),
        (oauth(**{"sasl.oauthbearer.method": "saml"}), "sasl.oauthbearer.method"),
        (oauth(oauth_cb="not callable"), "oauth_cb must be a callable"),
        (
            oauth(**{"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.grant.type": "urn:x"}),
            "sasl.oauthbearer.grant.type",
        ),
        (oauth(**{"sasl.oauthbearer.extensions": f"novalue{SECRET}"}), "key=value"),
    ],
)
def test_what_librdkafka_would_refuse_is_a_config_error_naming_the_setting(
    config: dict[str, Any], named: str
) -> None:
    with pytest.raises(SecurityConfigError) as refused:
        ClientSecurity.from_config(config).check()
    assert named in str(refused.value)
    assert SECRET not in str(refused.value)
    assert isinstance(refused.value, ConfigError)


def test_gssapi_is_not_spoken_and_callers_fall_back() -> None:
    for config in (
        {"security.protocol": "SASL_SSL"},  # librdkafka's default mechanism
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"},
    ):
        with pytest.raises(UnsupportedSecurityError, match="GSSAPI"):
            ClientSecurity.from_config(config).check()


def test_recovery_without_the_wire_client_falls_back_to_the_redo_log_or_the_replay() -> None:
    """On a GSSAPI cluster, EndTxn is not tried: recovery is told why and goes on (the redo
    log, Spark's replay: docs/kafka.md, "Secured clusters"), it does not fail."""
    why = end_txn("127.0.0.1:9", {"security.protocol": "SASL_SSL"}, "tid", 1, 0, timeout_s=1)
    assert why is not None
    assert "GSSAPI" in why


def _jwt(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def test_an_oauth_cb_token_is_kept_until_four_fifths_of_its_life() -> None:
    calls: list[str | None] = []
    life = [3600.0]

    def provider(config: str | None) -> tuple[str, float, str, dict[str, str]]:
        calls.append(config)
        return f"tok{len(calls)}", time.time() + life[0], "me", {"traceId": "1"}

    settings = OAuthSettings.from_config(
        {"oauth_cb": provider, "sasl.oauthbearer.config": "client=a"}
    )
    first = settings.token(timeout_s=1)
    assert (first.value, first.principal, first.extensions) == ("tok1", "me", (("traceId", "1"),))
    assert settings.token(timeout_s=1) is first
    assert calls == ["client=a"]
    settings.forget()  # the broker refused it
    life[0] = 0.0  # an expired token is asked again at once
    assert settings.token(timeout_s=1).value == "tok2"
    assert settings.token(timeout_s=1).value == "tok3"
    assert "tok" not in repr(first)


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (RuntimeError(f"signer failed with {SECRET}"), AuthorizationError),
        (("tok",), ConfigError),
        (("", 1.0), ConfigError),
        (("tok", "soon"), ConfigError),
        (("tok", 1.0, "me", ["not", "a", "dict"]), ConfigError),
    ],
)
def test_a_failing_or_malformed_oauth_cb_is_named_without_its_secrets(
    answer: Any, error: type[Exception]
) -> None:
    def provider(config: str | None) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    settings = OAuthSettings.from_config(
        {"oauth_cb": provider, "sasl.oauthbearer.config": f"secret={SECRET}"}
    )
    with pytest.raises(error) as refused:
        settings.token(timeout_s=1)
    assert "oauth_cb" in str(refused.value)
    assert SECRET not in str(refused.value)


def test_the_unsecured_jwt_is_librdkafkas() -> None:
    settings = OAuthSettings.from_config(
        {
            "enable.sasl.oauthbearer.unsecure.jwt": "true",
            "sasl.oauthbearer.config": "principal=admin scope=a,b lifeSeconds=60 "
            "extension_traceId=7",
        }
    )
    token = settings.token(timeout_s=1)
    header = json.loads(base64.urlsafe_b64decode(token.value.split(".")[0] + "=="))
    assert header == {"alg": "none"}
    assert token.value.endswith(".")
    claims = jwt_claims(token.value)
    assert (claims["sub"], claims["scope"], claims["exp"] - claims["iat"]) == (
        "admin",
        ["a", "b"],
        60,
    )
    assert token.extensions == (("traceId", "7"),)
    # and the core frames it: the trailing '.' is a b64token character
    assert _core.oauthbearer_initial_response(token.value, list(token.extensions)).startswith(
        b"n,,\x01auth=Bearer "
    )


def test_jwt_claims_reads_a_jwt_and_nothing_else() -> None:
    assert jwt_claims(_jwt({"exp": 5, "sub": "x"})) == {"exp": 5, "sub": "x"}
    assert jwt_claims("opaque-token") == {}
    assert jwt_claims("a.!!!.c") == {}


def test_an_authorization_code_names_the_acl_to_grant() -> None:
    denied = authorization_error("OffsetCommit of group 'g'", 30, "READ", "g")
    assert denied is not None
    assert denied.acl == "READ on group 'g'"
    assert isinstance(denied, AuthorizationError)
    described = authorization_error("Metadata of topic 't'", 29, "DESCRIBE", "t")
    assert described is not None
    assert "READ, WRITE" in str(described)  # what includes DESCRIBE
    assert authorization_error("EndTxn('x')", 53, "WRITE", "x").acl == (  # type: ignore[union-attr]
        "WRITE on transactional id 'x'"
    )
    assert authorization_error("Fetch", 3, "READ", "t") is None


def test_the_token_endpoint_is_an_address_not_a_secret() -> None:
    assert not is_secret_key("sasl.oauthbearer.token.endpoint.url")
    for key in (
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "ssl.key.pem",
        "ssl.key.password",
        "sasl.oauthbearer.assertion.private.key.passphrase",
    ):
        assert is_secret_key(key), key
    shown = redact_config({"sasl.oauthbearer.client.secret": SECRET, "oauth_cb": "m:f"})
    assert shown == {"sasl.oauthbearer.client.secret": "***", "oauth_cb": "m:f"}


def test_a_cli_oauth_cb_is_a_module_function_reference() -> None:
    assert _callable("json:dumps") is json.dumps
    for bad in ("json", "json:nope", "no_such_module_x:f", "json:__doc__"):
        with pytest.raises(ConfigError, match="oauth_cb"):
            _callable(bad)


@pytest.fixture(autouse=True)
def _no_cached_tokens() -> None:
    _oauth._TOKENS.clear()
