"""An Apache Kafka broker secured as production clusters are: TLS, authenticated principals and
ACLs, on free loopback ports (the jars of `laminar.embedded.kafka`; nothing downloaded).

Listeners (each advertised on 127.0.0.1):

- ``SCRAM``: SASL_SSL with SCRAM-SHA-512 (users created with `create_scram_user`);
- ``MTLS``: SSL with client certificates required (the principal is the certificate's CN);
- ``OAUTH``: SASL_SSL with OAUTHBEARER, tokens validated by Kafka's own
  ``OAuthBearerValidatorCallbackHandler`` against the JWKS of a local `OAuthIssuer` (its URLs
  allow-listed with the ``org.apache.kafka.sasl.oauthbearer.allowed.urls`` system property, as
  Kafka 4 requires), with KIP-368's session limit (``connections.max.reauth.ms``);
- ``PLAINTEXT``: the fixture's own door (its principal, ``ANONYMOUS``, is the super user the
  controller needs too): it creates topics, users and ACLs and is what the tests never use as
  a client of Laminar.

Authorization is the ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``: a
principal can do only what `grant` allowed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from laminar.embedded._process import EmbeddedServerError, free_port
from laminar.embedded._tls import Issued, LocalCA
from laminar.embedded.kafka import KafkaBroker
from laminar.embedded.oauth import OAuthIssuer

__all__ = ["Acl", "SecuredKafkaBroker"]

#: The secured listeners and their security protocols.
LISTENERS: Mapping[str, str] = {"SCRAM": "SASL_SSL", "MTLS": "SSL", "OAUTH": "SASL_SSL"}


@dataclass(frozen=True)
class Acl:
    """One ALLOW ACL: ``operation`` (``READ``, ``WRITE``, ``DESCRIBE``, …) on a resource
    (``TOPIC``, ``GROUP``, ``TRANSACTIONAL_ID``, ``CLUSTER``) named ``name`` (``LITERAL`` or
    ``PREFIXED``) for ``principal`` (``User:<name>``)."""

    principal: str
    operation: str
    resource: str
    name: str
    pattern: str = "LITERAL"

    def __str__(self) -> str:
        prefix = " (prefixed)" if self.pattern == "PREFIXED" else ""
        return f"{self.operation} on {self.resource.lower()} {self.name!r}{prefix}"

    def binding(self) -> Any:
        from confluent_kafka.admin import (  # type: ignore[attr-defined]  # kept off the import
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        return AclBinding(
            ResourceType[self.resource],
            self.name,
            ResourcePatternType[self.pattern],
            self.principal,
            "*",
            AclOperation[self.operation],
            AclPermissionType.ALLOW,
        )


class SecuredKafkaBroker(KafkaBroker):
    """A single-node Apache Kafka broker with the secured listeners of the module docstring.

    ``ca`` signs the broker's certificate (and the clients'); ``issuer`` validates OAUTHBEARER
    tokens (started here if it is not running). ``reauth_ms`` is the OAUTH listener's
    ``connections.max.reauth.ms`` (KIP-368: sessions last at most this, or the token's
    lifetime if shorter)."""

    _NAME = "the secured broker"

    def __init__(
        self,
        ca: LocalCA,
        issuer: OAuthIssuer,
        *,
        reauth_ms: int = 60_000,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.ca = ca
        self.issuer = issuer
        self.reauth_ms = reauth_ms
        self.ports: dict[str, int] = dict.fromkeys(LISTENERS, 0)
        self._keystore: Path | None = None

    # -- clients ------------------------------------------------------------------------------

    def bootstrap(self, listener: str) -> str:
        """``host:port`` of a secured listener (``SCRAM``, ``MTLS``, ``OAUTH``)."""
        port = self.ports[listener.upper()]
        if not port:
            raise EmbeddedServerError(f"{self._NAME} has not been started")
        return f"{self.host}:{port}"

    def scram_config(self, user: str, password: str) -> dict[str, Any]:
        """A client configuration for the SCRAM listener."""
        return {
            "bootstrap.servers": self.bootstrap("SCRAM"),
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(self.ca.path),
        }

    def mtls_config(self, client: Issued) -> dict[str, Any]:
        """A client configuration for the mTLS listener with ``client``'s certificate."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap("MTLS"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca.path),
            "ssl.certificate.location": str(client.certificate),
            "ssl.key.location": str(client.key),
        }
        if client.password:
            config["ssl.key.password"] = client.password
        return config

    def oauth_config(self, **settings: Any) -> dict[str, Any]:
        """A client configuration for the OAUTHBEARER listener, plus ``settings`` (an
        ``oauth_cb``, or the ``sasl.oauthbearer.*`` settings of the OIDC method)."""
        return {
            "bootstrap.servers": self.bootstrap("OAUTH"),
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "ssl.ca.location": str(self.ca.path),
            **settings,
        }

    # -- administration (through the fixture's PLAINTEXT listener) ---------------------------

    def create_scram_user(self, user: str, password: str) -> None:
        """SCRAM-SHA-512 credentials for ``user``."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]  # kept off the import
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        upsert = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
        )
        admin = self.admin_client()  # kept alive until the futures answer
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(15)

    def grant(self, acls: Iterable[Acl]) -> None:
        """Add ALLOW ACLs (they take effect once the authorizer has them: the broker is its
        own controller, so at once)."""
        bindings = [acl.binding() for acl in acls]
        if bindings:
            admin = self.admin_client()  # kept alive until the futures answer
            for future in admin.create_acls(bindings).values():
                future.result(15)

    def revoke(self, acls: Iterable[Acl]) -> None:
        """Remove ACLs added by `grant`."""
        bindings = [acl.binding() for acl in acls]
        if bindings:
            admin = self.admin_client()  # kept alive until the futures answer
            for future in admin.delete_acls(bindings).values():
                future.result(15)

    # -- the broker's settings ----------------------------------------------------------------

    def settings(self) -> dict[str, str]:
        settings = super().settings()
        for name in LISTENERS:
            if not self.ports[name]:
                self.ports[name] = free_port(self.host)
        extra = ",".join(f"{name}://{self.host}:{port}" for name, port in self.ports.items())
        settings["listeners"] += "," + extra
        settings["advertised.listeners"] += "," + extra
        settings["listener.security.protocol.map"] = ",".join(
            ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
            + [f"{name}:{protocol}" for name, protocol in LISTENERS.items()]
        )
        keystore = self._write_keystore()
        issuer = self.issuer
        settings.update(
            {
                "authorizer.class.name": (
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                ),
                "allow.everyone.if.no.acl.found": "false",
                "super.users": "User:ANONYMOUS",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.ca.path),
                "listener.name.mtls.ssl.client.auth": "required",
                # the principal of a client certificate is its CN (User:<cn>)
                "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",
                "listener.name.scram.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.scram.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                ),
                "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.oauth.oauthbearer.sasl.jaas.config": (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
                ),
                "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": (
                    "org.apache.kafka.common.security.oauthbearer."
                    "OAuthBearerValidatorCallbackHandler"
                ),
                "listener.name.oauth.oauthbearer.connections.max.reauth.ms": str(self.reauth_ms),
                "sasl.oauthbearer.jwks.endpoint.url": issuer.jwks_url,
                "sasl.oauthbearer.expected.audience": issuer.audience,
                "sasl.oauthbearer.expected.issuer": issuer.url,
            }
        )
        return settings

    def _write_keystore(self) -> Path:
        """The broker's key and certificate chain in one PEM file (``ssl.keystore.type=PEM``)."""
        if self._keystore is None:
            issued = self.ca.server("broker")
            path = self.ca.directory / "broker-keystore.pem"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(issued.key_pem + issued.certificate_pem + self.ca.pem)
            self._keystore = path
        return self._keystore

    def _java_argv(self, java: str, libs: Path, heap: str, main: str) -> list[str]:
        argv = super()._java_argv(java, libs, heap, main)
        allowed = f"{self.issuer.jwks_url},{self.issuer.token_url}"
        argv.insert(2, f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={allowed}")
        return argv

    def start(self, *, wait: bool = True) -> SecuredKafkaBroker:
        self.issuer.start()
        super().start(wait=wait)
        return self

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        listeners = ", ".join(f"{k} {v}" for k, v in self.ports.items() if v) or "no ports yet"
        return f"SecuredKafkaBroker({listeners}, {state})"
