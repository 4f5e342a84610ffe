"""One connection to one Kafka broker, for `laminar.kafka.log`: sockets, TLS and SASL here; every
request frame is encoded, and every answer decoded, by the core (``laminar._core``, module
``kafka``, on the ``kafka-protocol`` crate).

On connect: TCP, TLS (``security.protocol=ssl``/``sasl_ssl``: the CA, the client certificate and
key as files or PEM strings, hostname verification), ApiVersions (the version of each request is
the highest both sides speak), then SASL over SaslHandshake v1 + SaslAuthenticate for
``sasl_plaintext``/``sasl_ssl``: PLAIN, SCRAM-SHA-256/512 (RFC 5802) or OAUTHBEARER (RFC 7628,
the token from `laminar.kafka._oauth`, the initial response encoded by the core). A session the
broker limits (KIP-368's ``session_lifetime_ms``) is re-authenticated on the same connection
before it ends, or connected again once it has. GSSAPI raises `UnsupportedSecurityError` and the
callers fall back (docs/kafka.md, "Secured clusters"). Refused credentials and missing ACLs
raise `KafkaAuthorizationError` (an `AuthorizationError`) naming what to grant.

Over 500 lines: a connection's set-up (TCP, TLS, ApiVersions and each SASL mechanism with its
re-authentication) and its one request path are one concern, split it would be read in pieces.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any

from laminar import _core
from laminar._faults import fail_point
from laminar.errors import AuthorizationError, ConfigError
from laminar.kafka._oauth import OAuthSettings, TokenEndpointUnavailable
from laminar.kafka._security import (
    ClientSecurity,
    KafkaAuthorizationError,
    KafkaLogError,
    SecurityConfigError,
    UnsupportedSecurityError,
    credentials_hint,
)

__all__ = [
    "BrokerUnavailableError",
    "ClientSecurity",
    "Connection",
    "EndTxnError",
    "KafkaAuthorizationError",
    "KafkaLogError",
    "SecurityConfigError",
    "UnsupportedSecurityError",
    "authorization_error",
    "error_name",
    "parse_bootstrap",
    "scram_exchange",
]

# API keys (Kafka protocol numbering).
FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH = 1, 2, 3, 8, 9
FIND_COORDINATOR, SASL_HANDSHAKE, API_VERSIONS, END_TXN, SASL_AUTHENTICATE = 10, 17, 18, 26, 36
#: The requests the failover tests can fail (`laminar._faults.fail_point`: ``wire.<name>``).
_FAILABLE = {
    METADATA: "wire.Metadata",
    LIST_OFFSETS: "wire.ListOffsets",
    FETCH: "wire.Fetch",
    FIND_COORDINATOR: "wire.FindCoordinator",
    OFFSET_FETCH: "wire.OffsetFetch",
    OFFSET_COMMIT: "wire.OffsetCommit",
    END_TXN: "wire.EndTxn",
}


class BrokerUnavailableError(KafkaLogError):
    """A broker did not answer — the connection was refused, reset or timed out — or no longer
    holds the role it was asked for (the leader of a partition, the coordinator of a group or a
    transactional id, still loading it): what a failover looks like from a client. Looking the
    role up again and retrying can help (`laminar.kafka.log.KafkaLogClient` does, within its
    bound); when the bound passes the client raises it with what it tried. ``address`` is the
    broker's ``host:port`` when one was involved; ``code`` the Kafka error code, if any.

    Its failure kind is ``abortable`` and retriable: nothing was written, the call can be
    retried once the cluster has a holder for the role again."""

    failure_kind = "abortable"
    retriable = True

    def __init__(
        self, message: str, *, address: str | None = None, code: int = 0, stalled: bool = False
    ) -> None:
        super().__init__(message)
        self.address = address
        self.code = code
        #: The broker accepted (or black-holed) the connection but did not answer its set-up
        #: within the deadline (`laminar.kafka._stalls`): tried after the others next time.
        self.stalled = stalled


class EndTxnError(KafkaLogError):
    """The broker refused ``EndTxn`` (or the FindCoordinator before it): ``code`` is the Kafka
    error code, ``name`` its name.

    ``definitive`` errors mean the prepared transaction cannot be completed this way any more
    (the producer was fenced or its epoch bumped, the transaction was already aborted or timed
    out); the others (coordinator moving, loading, concurrent transactions) are worth retrying.
    """

    def __init__(self, message: str, *, code: int, name: str) -> None:
        super().__init__(message)
        self.code = code
        self.name = name

    @property
    def definitive(self) -> bool:
        """Whether retrying cannot help."""
        return self.code not in RETRIABLE_TXN_CODES


# Error codes this client explains (Kafka protocol numbering).
_ERRORS = {
    1: "OFFSET_OUT_OF_RANGE",
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_OR_FOLLOWER",
    7: "REQUEST_TIMED_OUT",
    13: "NETWORK_EXCEPTION",
    14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR",
    25: "UNKNOWN_MEMBER_ID",
    29: "TOPIC_AUTHORIZATION_FAILED",
    30: "GROUP_AUTHORIZATION_FAILED",
    33: "UNSUPPORTED_SASL_MECHANISM",
    35: "UNSUPPORTED_VERSION",
    47: "INVALID_PRODUCER_EPOCH",
    48: "INVALID_TXN_STATE",
    49: "INVALID_PRODUCER_ID_MAPPING",
    51: "CONCURRENT_TRANSACTIONS",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    56: "KAFKA_STORAGE_ERROR",
    58: "SASL_AUTHENTICATION_FAILED",
    74: "FENCED_LEADER_EPOCH",
    75: "UNKNOWN_LEADER_EPOCH",
    78: "OFFSET_NOT_AVAILABLE",
    90: "PRODUCER_FENCED",
    31: "CLUSTER_AUTHORIZATION_FAILED",
}
#: Authorization failures (Kafka protocol numbering) → the kind of resource the ACL is on.
AUTHORIZATION_CODES = {29: "topic", 30: "group", 31: "cluster", 53: "transactional id"}
#: EndTxn/FindCoordinator errors worth retrying (the coordinator moves, loads, or is busy).
RETRIABLE_TXN_CODES = frozenset({7, 13, 14, 15, 16, 51})
#: Group coordinator errors worth retrying (OffsetFetch/OffsetCommit).
RETRIABLE_GROUP_CODES = frozenset({7, 13, 14, 15, 16})
#: Partition errors of Metadata, ListOffsets and Fetch that a leader change causes: the leader is
#: looked up again and the request retried.
RETRIABLE_LEADER_CODES = frozenset({5, 6, 7, 13, 56, 74, 75, 78})

_SCRAM = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def error_name(code: int) -> str:
    """Kafka's name of an error code."""
    return _ERRORS.get(code, f"error code {code}")


def authorization_error(
    what: str, code: int, operation: str, resource: str
) -> KafkaAuthorizationError | None:
    """The error for a request the broker refused with an authorization code: names the ACL to
    grant (``operation`` on the ``code``'s kind of resource called ``resource``; a group's or
    transactional id's READ/WRITE include DESCRIBE). None for any other code."""
    kind = AUTHORIZATION_CODES.get(code)
    if kind is None:
        return None
    acl = (
        "IDEMPOTENT_WRITE on the cluster"
        if kind == "cluster"
        else f"{operation} on {kind} {resource!r}"
    )
    implied = {"DESCRIBE": " (or an ACL that includes it: READ, WRITE)", "READ": "", "WRITE": ""}
    return KafkaAuthorizationError(
        f"{what} refused: {error_name(code)}. Grant the client's principal {acl}"
        f'{implied.get(operation, "")} (docs/operations.md, "Least privilege")',
        code=code,
        acl=acl,
    )


class Connection:
    """One blocking connection to a broker; requests are sent and answered one at a time.

    ``call(api_key, encode, decode)``: ``encode(version, correlation_id)`` returns the frame the
    core encoded, ``decode(answer, version, correlation_id)`` what the core decoded from it.

    ``setup_timeout`` (default: ``timeout``) bounds each step of the set-up — connecting, TLS,
    ApiVersions, SASL — and ``timeout`` each socket operation after it: a broker that accepts
    connections but never answers is given up on after ``setup_timeout`` with a
    `BrokerUnavailableError` whose ``stalled`` is true (docs/kafka.md, "Failover").
    """

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float,
        client_id: str,
        security: ClientSecurity | None = None,
        *,
        setup_timeout: float | None = None,
    ) -> None:
        self.address = f"{host}:{port}"
        self.timeout = timeout
        self.client_id = client_id
        self.requests = 0
        #: Re-authentications of this connection (KIP-368) and reconnections after a session
        #: expired.
        self.reauthentications = 0
        self.reconnections = 0
        self._correlation = 0
        self._versions: dict[int, tuple[int, int]] = {}
        self._host, self._port = host, port
        self._security = security or ClientSecurity()
        self._setup = timeout if setup_timeout is None else setup_timeout
        #: When the SASL session began (monotonic ms) and how long the broker lets it last
        #: (0: no limit).
        self._session_start_ms = 0
        self._session_lifetime_ms = 0
        self._sock = self._connect()

    def _connect(self) -> socket.socket:
        """TCP, TLS, ApiVersions and SASL: the connection's set-up (module docstring)."""
        host, setup, security = self._host, self._setup, self._security
        try:
            if fail_point("wire.connect"):
                raise ConnectionRefusedError("injected (LAMINAR_FAIL_AT)")
            sock = socket.create_connection((host, self._port), timeout=setup)
        except OSError as e:
            raise self._setup_failed("could not connect to the broker", e, setup) from e
        if security.uses_tls:
            try:
                sock = security.ssl_context().wrap_socket(sock, server_hostname=host)
            except TimeoutError as e:
                sock.close()
                raise self._setup_failed("no TLS handshake with the broker", e, setup) from e
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise KafkaLogError(f"TLS handshake with {self.address} failed: {e}") from e
            except BaseException:
                sock.close()
                raise
        self._sock = sock
        try:
            try:
                self._negotiate()
                if security.uses_sasl:
                    self._authenticate(security)
            except BrokerUnavailableError as e:
                if isinstance(e.__cause__, TimeoutError):
                    raise self._setup_failed("no answer from the broker", e.__cause__, setup) from e
                raise
            sock.settimeout(self.timeout)
        except BaseException:
            sock.close()
            raise
        return sock

    def _setup_failed(self, what: str, error: OSError, setup: float) -> BrokerUnavailableError:
        """The error for a set-up step that failed; a time-out says the deadline it passed."""
        stalled = isinstance(error, TimeoutError)
        where = f"{what} at {self.address}"
        text = (
            f"{where} within the set-up deadline of {setup:g} s" if stalled else f"{where}: {error}"
        )
        return BrokerUnavailableError(text, address=self.address, stalled=stalled)

    # -- requests -----------------------------------------------------------------------------

    def version(self, api_key: int) -> int:
        """The version of ``api_key`` this connection uses (`KafkaLogError` if none)."""
        offered = self._versions.get(api_key)
        if offered is None:
            chosen = None if self._versions else _core.kafka_api_version(api_key)
        else:
            chosen = _core.kafka_api_version(api_key, *offered)
        if chosen is None:
            raise KafkaLogError(
                f"broker {self.address} offers no version of request {api_key} that laminar "
                f"speaks (it offers {offered or 'none'})"
            )
        return chosen

    def offers(self, api_key: int, version: int) -> bool:
        """Whether the broker offers ``version`` of ``api_key``."""
        low, high = self._versions.get(api_key, (0, -1))
        return low <= version <= high

    def call(
        self,
        api_key: int,
        encode: Callable[[int, int], bytes],
        decode: Callable[[bytes, int, int], Any],
        *,
        version: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One request and its answer, decoded; ``timeout``: a shorter wait for this answer
        than the connection's (what is left of the caller's operation)."""
        if timeout is None or timeout >= self.timeout:
            return self._call(api_key, encode, decode, version)
        self._sock.settimeout(max(timeout, 0.001))
        try:
            return self._call(api_key, encode, decode, version)
        finally:
            if self._sock.fileno() >= 0:
                self._sock.settimeout(self.timeout)

    def _call(
        self,
        api_key: int,
        encode: Callable[[int, int], bytes],
        decode: Callable[[bytes, int, int], Any],
        version: int | None,
    ) -> Any:
        if self._session_lifetime_ms and api_key not in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            self._keep_session()
        chosen = self.version(api_key) if version is None else version
        self._correlation += 1
        correlation = self._correlation
        frame = encode(chosen, correlation)
        self.requests += 1
        failable = _FAILABLE.get(api_key)
        if failable is not None and fail_point(failable):
            raise BrokerUnavailableError(
                f"broker {self.address}: {failable} injected (LAMINAR_FAIL_AT)",
                address=self.address,
            )
        try:
            self._sock.sendall(frame)
            (size,) = struct.unpack(">i", self._recv(4))
            answer = self._recv(size)
        except ssl.SSLError as e:
            self.close()
            if "CERTIFICATE" not in str(e.reason or ""):
                raise BrokerUnavailableError(
                    f"broker {self.address} ended the TLS session: {e}", address=self.address
                ) from e
            # TLS 1.3 sends the server's verdict on the client certificate after the handshake
            raise KafkaAuthorizationError(
                f"broker {self.address} refused the client certificate ({e.reason}); check "
                "ssl.certificate.location/.pem and ssl.key.location/.pem (a certificate its "
                "truststore trusts)"
            ) from None
        except OSError as e:
            self.close()
            # a time-out: the broker took the request and never answered (a hung broker)
            raise BrokerUnavailableError(
                f"broker {self.address} did not answer: {e}",
                address=self.address,
                stalled=isinstance(e, TimeoutError),
            ) from e
        return decode(answer, chosen, correlation)

    def _recv(self, n: int) -> bytes:
        buffer = bytearray(n)
        view = memoryview(buffer)
        got = 0
        while got < n:
            count = self._sock.recv_into(view[got:], min(n - got, 1 << 22))
            if not count:
                raise ConnectionError("connection closed by the broker")
            got += count
        return bytes(buffer)

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()

    # -- connecting ---------------------------------------------------------------------------

    def _negotiate(self) -> None:
        cid = self.client_id
        code, ranges = self.call(
            API_VERSIONS,
            lambda v, c: _core.encode_api_versions(c, cid),
            lambda data, v, c: _core.decode_api_versions(data, c),
            version=0,
        )
        if code != 0:
            raise KafkaLogError(f"broker {self.address} refused ApiVersions: {error_name(code)}")
        self._versions = {key: (low, high) for key, low, high in ranges}

    def _keep_session(self) -> None:
        """Before a request on a session the broker limits (KIP-368): re-authenticate past 85 %
        of its lifetime, connect again once it expired (the broker would close the connection
        on any request) — the core's ``sasl_session_step``."""
        step = _core.sasl_session_step(
            _monotonic_ms(), self._session_start_ms, self._session_lifetime_ms
        )
        if step == "reauthenticate":
            self.reauthentications += 1
            self._sock.settimeout(self._setup)
            self._authenticate(self._security)
            self._sock.settimeout(self.timeout)
        elif step == "reconnect":
            self.reconnections += 1
            self._sock.close()
            self._session_lifetime_ms = 0
            self._sock = self._connect()

    def _authenticate(self, security: ClientSecurity) -> None:
        security.check()
        mechanism = security.sasl_mechanism or "PLAIN"
        cid = self.client_id
        code, enabled = self.call(
            SASL_HANDSHAKE,
            lambda v, c: _core.encode_sasl_handshake(mechanism, v, c, cid),
            _core.decode_sasl_handshake,
        )
        if code != 0:
            raise KafkaLogError(
                f"broker {self.address} refused SASL mechanism {mechanism} "
                f"({error_name(code)}; it enables {', '.join(enabled) or 'none'})"
            )
        started = _monotonic_ms()
        user = security.sasl_username or ""
        password = security.sasl_password or ""
        if mechanism == "PLAIN":
            self._sasl_step(b"\0" + user.encode() + b"\0" + password.encode(), mechanism)
        elif mechanism == "OAUTHBEARER":
            assert security.oauth is not None
            self._oauthbearer(security.oauth)
        else:
            self._scram(mechanism, user, password)
        self._session_start_ms = started

    def _sasl_step(self, message: bytes, mechanism: str) -> bytes:
        """One SaslAuthenticate; records the session lifetime the broker answers (KIP-368)."""
        cid = self.client_id
        code, detail, answer, lifetime = self.call(
            SASL_AUTHENTICATE,
            lambda v, c: _core.encode_sasl_authenticate(message, v, c, cid),
            _core.decode_sasl_authenticate,
        )
        if code != 0:
            hint = credentials_hint(mechanism)
            raise KafkaAuthorizationError(
                f"SASL {mechanism} authentication with {self.address} failed "
                f"({error_name(code)}: {detail or 'no detail'}); check {hint}",
                code=code,
            )
        self._session_lifetime_ms = max(int(lifetime), 0)
        return bytes(answer)

    def _oauthbearer(self, oauth: OAuthSettings) -> None:
        """RFC 7628's exchange: the initial response with the token (the core encodes it); an
        error challenge is acknowledged and the broker's reason raised. A refused token is
        dropped from the cache, so the next connection asks for a new one."""
        try:
            token = oauth.token(timeout_s=self._setup)
        except TokenEndpointUnavailable as e:
            raise BrokerUnavailableError(f"no OAUTHBEARER token: {e}") from None
        except AuthorizationError as e:
            raise KafkaAuthorizationError(e.message) from None
        except ConfigError as e:
            raise SecurityConfigError(e.message) from None
        try:
            message = _core.oauthbearer_initial_response(token.value, list(token.extensions))
        except ValueError as e:
            raise SecurityConfigError(f"the token from {oauth.source()}: {e}") from None
        refusal = _core.oauthbearer_refusal(self._sasl_step(message, "OAUTHBEARER"))
        if refusal is None:
            return
        oauth.forget()
        try:
            self._sasl_step(_core.OAUTHBEARER_FAILURE_ACK, "OAUTHBEARER")
        except KafkaAuthorizationError as e:
            raise KafkaAuthorizationError(f"{e.message} ({refusal})", code=e.code) from None
        raise KafkaAuthorizationError(
            f"SASL OAUTHBEARER authentication with {self.address} failed ({refusal}); check "
            f"{credentials_hint('OAUTHBEARER')}"
        )

    def _scram(self, mechanism: str, user: str, password: str) -> None:
        nonce = base64.b64encode(os.urandom(24)).decode()
        try:
            scram_exchange(
                mechanism, user, password, lambda m: self._sasl_step(m, mechanism), nonce
            )
        except ValueError as e:
            raise KafkaLogError(f"SASL {mechanism} with {self.address}: {e}") from e


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def scram_exchange(
    mechanism: str, user: str, password: str, step: Callable[[bytes], bytes], nonce: str
) -> None:
    """RFC 5802's client side (SCRAM-SHA-256/512, no channel binding): client-first, then the
    client-final message with the proof; ``step`` sends one message and returns the server's
    answer. `ValueError` when the server's nonce or signature does not verify."""
    digest = _SCRAM[mechanism]
    name = user.replace("=", "=3D").replace(",", "=2C")
    first_bare = f"n={name},r={nonce}"
    server_first = step(f"n,,{first_bare}".encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    if not fields.get("r", "").startswith(nonce):
        raise ValueError("the server's nonce does not extend the client's")
    salted = hashlib.pbkdf2_hmac(
        digest, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    final_bare = f"c=biws,r={fields['r']}"
    auth = f"{first_bare},{server_first},{final_bare}".encode()
    signature = hmac.new(stored_key, auth, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_final = step(f"{final_bare},p={base64.b64encode(proof).decode()}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    expected = base64.b64encode(hmac.new(server_key, auth, digest).digest()).decode()
    if server_final != f"v={expected}":
        raise ValueError("the server's signature does not verify")


def parse_bootstrap(bootstrap_servers: str) -> list[tuple[str, int]]:
    """``host:port`` pairs of a ``bootstrap.servers`` list (``PROTOCOL://`` prefixes allowed)."""
    out: list[tuple[str, int]] = []
    for item in bootstrap_servers.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise KafkaLogError(f"bootstrap.servers entry {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise KafkaLogError("bootstrap.servers is empty")
    return out
