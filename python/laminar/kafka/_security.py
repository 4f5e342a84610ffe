"""How the wire client (`laminar.kafka.conn`) connects securely, read from the producer's
librdkafka configuration (`ClientSecurity.from_config`: TLS with the CA, the client certificate
and key as files or PEM strings and hostname verification; the SASL mechanism and its
credentials, OAUTHBEARER's through `laminar.kafka._oauth`), the TLS context it wraps sockets
in, and the errors of connecting: `KafkaLogError` (the wire client's base, here because every
module of the client stands on this one), `UnsupportedSecurityError` (GSSAPI: callers fall
back), `SecurityConfigError` (settings that cannot be used, named) and
`KafkaAuthorizationError` (credentials refused, an ACL missing, named). docs/kafka.md,
"Secured clusters".
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from laminar.errors import AuthorizationError, ConfigError, LaminarError
from laminar.kafka._oauth import OAuthSettings

__all__ = [
    "MECHANISMS",
    "ClientSecurity",
    "KafkaAuthorizationError",
    "KafkaLogError",
    "SecurityConfigError",
    "UnsupportedSecurityError",
    "credentials_hint",
]

#: The SASL mechanisms the wire client speaks.
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: What to check when a mechanism's credentials are refused.
_CREDENTIALS = {
    "PLAIN": "sasl.username and sasl.password",
    "SCRAM": "sasl.username and sasl.password (and that the user has SCRAM credentials for "
    "this mechanism)",
    "OAUTHBEARER": "the token source (oauth_cb, or sasl.oauthbearer.method=oidc and its "
    "endpoint and client credentials) and the token's audience, issuer, scope and expiry",
}


def credentials_hint(mechanism: str) -> str:
    """The settings to check when the broker refused ``mechanism``'s credentials."""
    return _CREDENTIALS.get(mechanism, _CREDENTIALS["SCRAM"])


class KafkaLogError(LaminarError):
    """The log could not be read: unreachable broker, a broker error, or data this reader does
    not decode (an unsupported message format, a corrupt batch)."""


class UnsupportedSecurityError(KafkaLogError):
    """The connection needs a security setting this client does not speak (SASL GSSAPI): the
    caller falls back to another way (docs/kafka.md, "Secured clusters")."""


class KafkaAuthorizationError(KafkaLogError, AuthorizationError):
    """The broker refused the credentials (``code`` 58, SASL_AUTHENTICATION_FAILED; a token
    source that failed) or an operation for want of an ACL (``code`` 29, 30, 31 or 53): ``acl``
    names the one to grant, e.g. ``READ on group 'laminar.orders'`` (docs/operations.md,
    "Least privilege"); None for credentials."""

    def __init__(self, message: str, *, code: int = 0, acl: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.acl = acl


class SecurityConfigError(KafkaLogError, ConfigError):
    """The security settings cannot be used as given (a file that does not load, an
    OAUTHBEARER setting librdkafka would refuse): the message names the setting."""


@dataclass(frozen=True)
class ClientSecurity:
    """How to connect: TLS and SASL settings, read from a librdkafka-style configuration."""

    protocol: str = "plaintext"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    verify_certificate: bool = True
    check_hostname: bool = True
    #: The PEM-string forms (``ssl.ca.pem``, ``ssl.certificate.pem``, ``ssl.key.pem``).
    ca_pem: str | None = field(default=None, repr=False)
    certificate_pem: str | None = field(default=None, repr=False)
    key_pem: str | None = field(default=None, repr=False)
    #: How OAUTHBEARER tokens are obtained (None unless ``sasl.mechanism=OAUTHBEARER``).
    oauth: OAuthSettings | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> ClientSecurity:
        """The settings of a producer/consumer configuration (``security.protocol``,
        ``sasl.mechanism(s)``, ``sasl.username``/``password``, ``ssl.ca.location``/``.pem``,
        ``ssl.certificate.location``/``.pem``, ``ssl.key.location``/``.pem``,
        ``ssl.key.password``, ``enable.ssl.certificate.verification``,
        ``ssl.endpoint.identification.algorithm``; for OAUTHBEARER ``oauth_cb`` and the
        ``sasl.oauthbearer.*`` settings: `laminar.kafka._oauth.OAuthSettings`)."""
        config = dict(config or {})

        def text(key: str) -> str | None:
            value = config.get(key)
            return None if value is None or str(value) == "" else str(value)

        protocol = (text("security.protocol") or "plaintext").lower()
        if protocol not in ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"):
            raise UnsupportedSecurityError(f"security.protocol={protocol!r} is not supported here")
        mechanism = (text("sasl.mechanism") or text("sasl.mechanisms") or "").upper() or None
        verify = str(config.get("enable.ssl.certificate.verification", "true")).lower()
        algorithm = (text("ssl.endpoint.identification.algorithm") or "https").lower()
        oauth = None
        if mechanism == "OAUTHBEARER" and protocol in ("sasl_plaintext", "sasl_ssl"):
            try:
                oauth = OAuthSettings.from_config(config)
            except ConfigError as e:
                raise SecurityConfigError(e.message) from None
        return cls(
            protocol=protocol,
            sasl_mechanism=mechanism,
            sasl_username=text("sasl.username"),
            sasl_password=text("sasl.password"),
            ca_location=text("ssl.ca.location"),
            certificate_location=text("ssl.certificate.location"),
            key_location=text("ssl.key.location"),
            key_password=text("ssl.key.password"),
            verify_certificate=verify not in ("false", "0", "no"),
            check_hostname=algorithm == "https",
            ca_pem=text("ssl.ca.pem"),
            certificate_pem=text("ssl.certificate.pem"),
            key_pem=text("ssl.key.pem"),
            oauth=oauth,
        )

    @property
    def uses_tls(self) -> bool:
        """Whether connections are wrapped in TLS."""
        return self.protocol in ("ssl", "sasl_ssl")

    @property
    def uses_sasl(self) -> bool:
        """Whether connections authenticate with SASL."""
        return self.protocol in ("sasl_plaintext", "sasl_ssl")

    def check(self) -> None:
        """Raise `UnsupportedSecurityError` if this client cannot connect with these settings
        (GSSAPI: librdkafka's default mechanism, which it does not speak), a
        `SecurityConfigError` naming the setting if they are incomplete."""
        if not self.uses_sasl:
            return
        mechanism = self.sasl_mechanism or "GSSAPI"
        if mechanism not in MECHANISMS:
            raise UnsupportedSecurityError(
                f"SASL mechanism {mechanism} (sasl.mechanism) is not supported by laminar's wire "
                f"client ({', '.join(MECHANISMS)} are)"
            )
        if self.oauth is not None:
            try:
                self.oauth.check()
            except ConfigError as e:
                raise SecurityConfigError(e.message) from None

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS client context from the ``ssl.*`` settings (files or PEM strings); a
        `SecurityConfigError` naming the setting whose file or text does not load."""
        try:
            context = ssl.create_default_context(cafile=self.ca_location, cadata=self.ca_pem)
        except (OSError, ssl.SSLError) as e:
            which = "ssl.ca.location" if self.ca_location else "ssl.ca.pem"
            raise SecurityConfigError(f"{which} does not load as CA certificates: {e}") from None
        if not self.verify_certificate:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context.check_hostname = self.check_hostname
        if self.certificate_location or self.certificate_pem:
            self._load_client_certificate(context)
        return context

    def _load_client_certificate(self, context: ssl.SSLContext) -> None:
        """The client certificate and key (mTLS). Python's ``ssl`` loads them from files only:
        PEM strings go through a private temporary directory (mode 0700, the key file 0600),
        removed once loaded."""
        with tempfile.TemporaryDirectory(prefix="laminar-tls-") as folder:
            certificate = self.certificate_location
            key = self.key_location
            if self.certificate_pem:
                certificate = _private_file(folder, "certificate.pem", self.certificate_pem)
            if self.key_pem:
                key = _private_file(folder, "key.pem", self.key_pem)
            assert certificate is not None
            try:
                context.load_cert_chain(certificate, key, password=self.key_password)
            except (OSError, ssl.SSLError) as e:
                # the key's password is never part of the reason ssl gives
                raise SecurityConfigError(
                    "the client certificate and key (ssl.certificate.location/.pem, "
                    f"ssl.key.location/.pem, ssl.key.password) do not load: {e}"
                ) from None


def _private_file(folder: str, name: str, text: str) -> str:
    """``text`` in a new file readable by this user only."""
    path = os.path.join(folder, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
