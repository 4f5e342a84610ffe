"""A local OAuth 2.0 issuer for the embedded secured Kafka broker: a JWKS endpoint the broker's
``OAuthBearerValidatorCallbackHandler`` validates tokens against, and an OIDC client-credentials
token endpoint (what librdkafka's and the wire client's ``sasl.oauthbearer.method=oidc`` call).

Tokens are RS256 JWTs signed by a key made at start (``iss``, ``aud``, ``sub``, ``iat``,
``exp``, ``scope``). `mint` makes one directly (what a test's ``oauth_cb`` returns); clients
registered with `register_client` get one from ``POST /token`` with HTTP Basic credentials.
It serves from a thread of this process on a free loopback port (``cryptography``, the ``dev``
extra, is imported on first use).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OAuthIssuer"]


@dataclass
class _Client:
    secret: str
    subject: str
    lifetime_s: float
    scope: str | None


class OAuthIssuer:
    """The issuer; ``with OAuthIssuer() as issuer:`` starts and stops it."""

    audience = "laminar-tests"

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._key: Any = None
        self._kid = uuid.uuid4().hex[:12]
        self._clients: dict[str, _Client] = {}
        self._lock = threading.Lock()
        #: Tokens issued by ``POST /token``, per client id.
        self.issued: dict[str, int] = {}
        #: Every token minted (tests check that none shows in a log, an error or a repr).
        self.tokens: list[str] = []

    # -- addresses ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The issuer (the tokens' ``iss``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    # -- tokens ---------------------------------------------------------------------------

    def register_client(
        self, client_id: str, secret: str, *, subject: str, lifetime_s: float = 300.0,
        scope: str | None = None,
    ) -> None:  # fmt: skip
        """Let ``client_id``/``secret`` obtain tokens for ``subject`` from the token endpoint."""
        with self._lock:
            self._clients[client_id] = _Client(secret, subject, lifetime_s, scope)

    def mint(
        self,
        subject: str,
        *,
        lifetime_s: float = 300.0,
        scope: str | None = None,
        audience: str | None = None,
        key: Any = None,
    ) -> tuple[str, float]:
        """A signed token for ``subject`` and its expiry (seconds since the epoch): what an
        ``oauth_cb`` returns. ``audience`` and ``key`` (another RSA key) make tokens the broker
        must refuse."""
        # the dev extra, imported on first use (module docstring)
        from cryptography.hazmat.primitives import hashes

        # the dev extra, imported on first use (module docstring)
        from cryptography.hazmat.primitives.asymmetric import padding

        now = time.time()
        claims: dict[str, Any] = {
            "iss": self.url,
            "aud": audience or self.audience,
            "sub": subject,
            "iat": int(now),
            "exp": int(now + lifetime_s),
            "jti": uuid.uuid4().hex,
        }
        if scope:
            claims["scope"] = scope
        header = {"alg": "RS256", "typ": "JWT", "kid": self._kid}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = (key or self._key).sign(
            signing_input.encode(), padding.PKCS1v15(), hashes.SHA256()
        )
        token = f"{signing_input}.{_b64(signature)}"
        with self._lock:
            self.tokens.append(token)
        return token, float(claims["exp"])

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()

        def integer(value: int) -> str:
            return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))

        return {
            "keys": [
                {
                    "kty": "RSA",
                    "use": "sig",
                    "alg": "RS256",
                    "kid": self._kid,
                    "n": integer(numbers.n),
                    "e": integer(numbers.e),
                }
            ]
        }

    def _token_answer(
        self, authorization: str | None, form: dict[str, list[str]]
    ) -> tuple[int, dict[str, Any]]:
        if form.get("grant_type") != ["client_credentials"]:
            return 400, {"error": "unsupported_grant_type"}
        try:
            scheme, _, encoded = (authorization or "").partition(" ")
            client_id, _, secret = base64.b64decode(encoded).decode().partition(":")
        except ValueError:
            return 401, {"error": "invalid_client"}
        with self._lock:
            client = self._clients.get(client_id)
        if scheme.lower() != "basic" or client is None or client.secret != secret:
            return 401, {"error": "invalid_client"}
        scope = (form.get("scope") or [client.scope or ""])[0] or None
        token, _ = self.mint(client.subject, lifetime_s=client.lifetime_s, scope=scope)
        with self._lock:
            self.issued[client_id] = self.issued.get(client_id, 0) + 1
        return 200, {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": int(client.lifetime_s),
        }

    # -- serving --------------------------------------------------------------------------

    def start(self) -> OAuthIssuer:
        # the dev extra, imported on first use (module docstring)
        from cryptography.hazmat.primitives.asymmetric import rsa

        if self._server is not None:
            return self
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/jwks":
                    self._send(404, {"error": "not_found"})
                    return
                self._send(200, issuer.jwks())

            def do_POST(self) -> None:
                if self.path.split("?")[0] != "/token":
                    self._send(404, {"error": "not_found"})
                    return
                size = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(size).decode())
                self._send(*issuer._token_answer(self.headers.get("Authorization"), form))

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="laminar-oauth-issuer", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> OAuthIssuer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"OAuthIssuer({self.url if self.port else 'not started'})"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")
