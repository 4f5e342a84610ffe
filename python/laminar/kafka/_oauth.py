"""OAUTHBEARER tokens for the wire client (`laminar.kafka.conn`), obtained the ways librdkafka
obtains them from the same configuration dict: the user's ``oauth_cb`` (confluent-kafka's
callable: ``oauth_cb(sasl.oauthbearer.config) -> (token, expiry_epoch_s[, principal[,
extensions]])``, e.g. an Amazon MSK IAM signer), the OIDC client-credentials method
(``sasl.oauthbearer.method=oidc``: a POST to ``sasl.oauthbearer.token.endpoint.url``), or the
unsecured JWT handler for development (``enable.sasl.oauthbearer.unsecure.jwt``).

A token is kept per process and settings until 80 % of its lifetime (the core's
``oauth_token_refresh_due``, librdkafka's rule), so the connections of one client — and the
clients of one process — ask once. Errors never carry the token, the client secret or the
callable's arguments: docs/kafka.md, "Secured clusters".
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from laminar import _core
from laminar._redact import redact_text
from laminar.errors import AuthorizationError, ConfigError, LaminarError

__all__ = ["OAuthSettings", "Token", "TokenEndpointUnavailable"]


class TokenEndpointUnavailable(LaminarError):  # noqa: N818 (reads as a state, like the others)
    """The OIDC token endpoint did not answer (refused, reset, timed out, a 5xx): worth retrying
    like a broker that did not answer."""


@dataclass(frozen=True)
class Token:
    """A bearer token and what came with it; ``value`` never shows in a repr."""

    value: str = field(repr=False)
    #: When it expires and when it was obtained, in ms since the epoch.
    expiry_ms: int
    obtained_ms: int
    principal: str | None = None
    #: The SASL extensions sent with it (RFC 7628: ``key=value`` items after the token).
    extensions: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class OAuthSettings:
    """How OAUTHBEARER tokens are obtained (`from_config`); hashable, the key of the process's
    token cache."""

    method: str = "default"
    #: The user's callable: compared and hashed by identity (`callback_id`), as a user's
    #: provider object may be unhashable or compare by value.
    oauth_cb: Callable[[str | None], Any] | None = field(default=None, repr=False, compare=False)
    callback_id: int = field(default=0, repr=False)
    #: ``sasl.oauthbearer.config``: handed to ``oauth_cb``; the unsecured JWT's claims.
    config: str | None = field(default=None, repr=False)
    unsecure_jwt: bool = False
    token_endpoint_url: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    scope: str | None = None
    extensions: tuple[tuple[str, str], ...] = ()
    https_ca_location: str | None = None
    https_ca_pem: str | None = field(default=None, repr=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> OAuthSettings:
        """The ``sasl.oauthbearer.*`` settings, ``oauth_cb``, ``https.ca.*`` and
        ``enable.sasl.oauthbearer.unsecure.jwt`` of a librdkafka configuration."""

        def text(*keys: str) -> str | None:
            for key in keys:
                value = config.get(key)
                if value is not None and str(value) != "":
                    return str(value)
            return None

        method = (text("sasl.oauthbearer.method") or "default").lower()
        if method not in ("default", "oidc"):
            raise ConfigError(
                f"sasl.oauthbearer.method={method!r}: librdkafka takes 'default' or 'oidc'"
            )
        callback = config.get("oauth_cb")
        if callback is not None and not callable(callback):
            raise ConfigError(
                "oauth_cb must be a callable: oauth_cb(sasl.oauthbearer.config) -> (token, "
                "expiry_epoch_seconds[, principal[, extensions]]), as confluent-kafka takes it"
            )
        grant = (text("sasl.oauthbearer.grant.type") or "client_credentials").lower()
        if method == "oidc" and grant != "client_credentials":
            raise ConfigError(
                f"sasl.oauthbearer.grant.type={grant!r} is not spoken by laminar's wire client "
                "(client_credentials is); use oauth_cb to supply the tokens"
            )
        unsecure = str(config.get("enable.sasl.oauthbearer.unsecure.jwt", "false")).lower()
        return cls(
            method=method,
            oauth_cb=callback,
            callback_id=0 if callback is None else id(callback),
            config=text("sasl.oauthbearer.config"),
            unsecure_jwt=unsecure in ("true", "1", "yes"),
            token_endpoint_url=text("sasl.oauthbearer.token.endpoint.url"),
            client_id=text(
                "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.credentials.client.id"
            ),
            client_secret=text(
                "sasl.oauthbearer.client.secret",
                "sasl.oauthbearer.client.credentials.client.secret",
            ),
            scope=text("sasl.oauthbearer.scope"),
            extensions=_pairs(
                text("sasl.oauthbearer.extensions"), ",", "sasl.oauthbearer.extensions"
            ),
            https_ca_location=text("https.ca.location"),
            https_ca_pem=text("https.ca.pem"),
        )

    def source(self) -> str:
        """Where tokens come from, for messages (never a secret)."""
        if self.method == "oidc":
            return f"the OIDC token endpoint {self.token_endpoint_url}"
        if self.oauth_cb is not None:
            return (
                f"oauth_cb ({getattr(self.oauth_cb, '__qualname__', type(self.oauth_cb).__name__)})"
            )
        return "the unsecured JWT handler (enable.sasl.oauthbearer.unsecure.jwt)"

    def check(self) -> None:
        """`ConfigError` naming the setting when no token can be obtained with these settings
        (what librdkafka refuses when the client is created)."""
        if self.method == "oidc":
            missing = [
                name
                for name, value in (
                    ("sasl.oauthbearer.token.endpoint.url", self.token_endpoint_url),
                    ("sasl.oauthbearer.client.id", self.client_id),
                    ("sasl.oauthbearer.client.secret", self.client_secret),
                )
                if not value
            ]
            if missing:
                raise ConfigError(
                    f"sasl.oauthbearer.method=oidc needs {', '.join(missing)} (librdkafka's "
                    "client-credentials method)"
                )
        elif self.oauth_cb is None and not self.unsecure_jwt:
            raise ConfigError(
                "sasl.mechanism=OAUTHBEARER needs a token source: oauth_cb (a callable, e.g. "
                "an MSK IAM token provider), sasl.oauthbearer.method=oidc with its endpoint and "
                "client credentials, or enable.sasl.oauthbearer.unsecure.jwt=true for "
                "development"
            )

    def token(self, *, timeout_s: float) -> Token:
        """A token that is not due for a refresh: the process's cached one, else a new one
        (``timeout_s`` bounds the token endpoint's HTTP request)."""
        now = _now_ms()
        with _LOCK:
            cached = _TOKENS.get(self)
        if cached is not None and not _core.oauth_token_refresh_due(
            now, cached.obtained_ms, cached.expiry_ms
        ):
            return cached
        token = self._obtain(timeout_s)
        with _LOCK:
            _TOKENS[self] = token
        return token

    def forget(self) -> None:
        """Drop the cached token (the broker refused it): the next `token` obtains a new one."""
        with _LOCK:
            _TOKENS.pop(self, None)

    def _obtain(self, timeout_s: float) -> Token:
        if self.method == "oidc":
            return self._client_credentials(timeout_s)
        if self.oauth_cb is not None:
            return self._callback()
        return self._unsecured()

    # -- the user's callable ----------------------------------------------------------------

    def _callback(self) -> Token:
        assert self.oauth_cb is not None
        what = self.source()
        try:
            answer = self.oauth_cb(self.config)
        except Exception as e:
            # its message is the user's: scrubbed of the secrets this configuration holds
            text = redact_text(f"{type(e).__name__}: {e}", self._secrets())
            raise AuthorizationError(f"{what} raised {text}: no OAUTHBEARER token") from None
        if not isinstance(answer, (tuple, list)) or not 2 <= len(answer) <= 4:
            raise ConfigError(
                f"{what} returned a {type(answer).__name__}; it must return (token, "
                "expiry_epoch_seconds[, principal[, extensions]]), as confluent-kafka expects"
            )
        value, expiry = answer[0], answer[1]
        principal = answer[2] if len(answer) > 2 else None
        extensions = answer[3] if len(answer) > 3 else None
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{what} returned a token that is not a non-empty str")
        if not isinstance(expiry, (int, float)) or isinstance(expiry, bool):
            raise ConfigError(
                f"{what} returned an expiry that is not a number (seconds since the epoch)"
            )
        if extensions is not None and not isinstance(extensions, Mapping):
            raise ConfigError(f"{what} returned extensions that are not a dict")
        return Token(
            value,
            expiry_ms=int(float(expiry) * 1000),
            obtained_ms=_now_ms(),
            principal=None if principal is None else str(principal),
            extensions=tuple((str(k), str(v)) for k, v in (extensions or {}).items()),
        )

    # -- OIDC client credentials --------------------------------------------------------------

    def _client_credentials(self, timeout_s: float) -> Token:
        """librdkafka's ``oidc`` method: a POST of ``grant_type=client_credentials`` (and the
        scope) with the client id and secret as HTTP Basic credentials; the answer's
        ``access_token`` is a JWT whose ``exp`` and ``sub`` claims are its expiry and
        principal."""
        assert self.token_endpoint_url is not None
        url = self.token_endpoint_url
        form = {"grant_type": "client_credentials"}
        if self.scope:
            form["scope"] = self.scope
        basic = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        request = urllib.request.Request(  # noqa: S310 (the user's configured endpoint)
            url,
            data=urllib.parse.urlencode(form).encode(),
            headers={
                "Authorization": f"Basic {basic}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
            method="POST",
        )
        context = None
        if url.lower().startswith("https:"):
            context = ssl.create_default_context(
                cafile=self.https_ca_location, cadata=self.https_ca_pem
            )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=context) as answer:  # noqa: S310
                body = answer.read()
        except urllib.error.HTTPError as e:
            if e.code >= 500 or e.code == 429:
                raise TokenEndpointUnavailable(
                    f"the OIDC token endpoint {url} answered HTTP {e.code}"
                ) from None
            raise AuthorizationError(
                f"the OIDC token endpoint {url} refused the client credentials (HTTP {e.code}); "
                "check sasl.oauthbearer.client.id, sasl.oauthbearer.client.secret and "
                "sasl.oauthbearer.scope"
            ) from None
        except (OSError, urllib.error.URLError) as e:
            reason = getattr(e, "reason", e)
            raise TokenEndpointUnavailable(
                f"the OIDC token endpoint {url} did not answer: {reason}"
            ) from None
        try:
            value = json.loads(body)["access_token"]
        except (ValueError, KeyError, TypeError):
            raise AuthorizationError(
                f"the OIDC token endpoint {url} answered without an access_token"
            ) from None
        claims = jwt_claims(value)
        expiry = claims.get("exp")
        if not isinstance(expiry, (int, float)):
            raise AuthorizationError(
                f"the token from {url} is not a JWT with an 'exp' claim (librdkafka's oidc "
                "method needs one)"
            )
        subject = claims.get("sub")
        return Token(
            str(value),
            expiry_ms=int(expiry * 1000),
            obtained_ms=_now_ms(),
            principal=None if subject is None else str(subject),
            extensions=self.extensions,
        )

    # -- the unsecured JWT (development only, as librdkafka's builtin handler) ----------------

    def _unsecured(self) -> Token:
        """librdkafka's unsecured JWT: ``{"alg":"none"}``, the claims of
        ``sasl.oauthbearer.config`` (``principal``, ``principalClaimName``, ``scope``,
        ``scopeClaimName``, ``lifeSeconds``, ``extension_<name>``), no signature."""
        items = dict(_pairs(self.config, " ", "sasl.oauthbearer.config"))
        principal = items.get("principal")
        if not principal:
            raise ConfigError(
                "enable.sasl.oauthbearer.unsecure.jwt needs principal=<name> in "
                "sasl.oauthbearer.config"
            )
        try:
            life = int(items.get("lifeSeconds", "3600"))
        except ValueError:
            raise ConfigError("sasl.oauthbearer.config: lifeSeconds is not a number") from None
        now = _now_ms()
        claims: dict[str, Any] = {
            items.get("principalClaimName", "sub"): principal,
            "iat": now / 1000,
            "exp": now / 1000 + life,
        }
        if items.get("scope"):
            claims[items.get("scopeClaimName", "scope")] = items["scope"].split(",")
        value = ".".join(
            [
                _b64url(json.dumps({"alg": "none"}).encode()),
                _b64url(json.dumps(claims).encode()),
                "",
            ]
        )
        extensions = tuple(
            (k.removeprefix("extension_"), v)
            for k, v in items.items()
            if k.startswith("extension_")
        )
        return Token(value, now + life * 1000, now, principal, extensions)

    def _secrets(self) -> tuple[str, ...]:
        """The values to scrub from a message: the client secret, ``sasl.oauthbearer.config``
        and each of its values."""
        values = [self.client_secret, self.config]
        values += [item.partition("=")[2] for item in (self.config or "").split()]
        return tuple(v for v in values if v)


def jwt_claims(token: str) -> dict[str, Any]:
    """The claims (payload) of a JWT, unverified (the broker verifies it); {} if it is not one."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, binascii.Error):
        return {}
    return claims if isinstance(claims, dict) else {}


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _pairs(text: str | None, separator: str, setting: str) -> tuple[tuple[str, str], ...]:
    """``key=value`` items of a setting (``k=v,k2=v2`` or ``k=v k2=v2``); never echoes a
    value in its error (the setting may hold secrets)."""
    out: list[tuple[str, str]] = []
    for item in (text or "").split(separator):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{setting} takes key=value items; an item has no '='")
        out.append((key.strip(), value.strip()))
    return tuple(out)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_LOCK = threading.Lock()
#: The process's tokens, per settings (librdkafka keeps one per client instance).
_TOKENS: dict[OAuthSettings, Token] = {}
