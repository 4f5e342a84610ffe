"""Shared helpers of the secured-cluster tests (not a test module): the rights docs/operations.md
("Least privilege") lists, read from its tables so that what is documented is what is proven;
a world of names, principals and roles on the session's secured servers; a user's token
provider (the ``oauth_cb`` a writer, ``laminar status`` and the exporter are given)."""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from laminar.embedded._tls import Issued
from laminar.embedded.kafka_secure import Acl, SecuredKafkaBroker
from laminar.embedded.postgres_secure import SecuredPostgres
from laminar.metadata import ensure_schema

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
WRITER_SCRIPT = Path(__file__).with_name("secured_writer.py")

#: The sections of docs/operations.md that list the rights, by (store, who).
SECTIONS = {
    ("kafka", "writer"): "### Kafka ACLs of the writer",
    ("kafka", "reader"): "### Kafka ACLs of `laminar status` and the exporter",
    ("postgres", "writer"): "### PostgreSQL grants of the writer",
    ("postgres", "reader"): "### PostgreSQL grants of `laminar status` and the exporter",
}


@dataclass(frozen=True)
class Right:
    """One documented right: an ACL (``kafka``) or a grant (``postgres``) of the writer or the
    reader (``laminar status``, the exporter). ``obj`` keeps the docs' placeholders
    (``<topic>``, ``<transactional_id>``, ``<table>``); ``best_effort``: the docs say the writer
    goes on without it (and says so)."""

    store: str
    who: str
    kind: str  # Kafka: TOPIC, GROUP, TRANSACTIONAL_ID; PostgreSQL: SCHEMA, TABLE
    obj: str
    operation: str
    best_effort: bool = False

    @property
    def id(self) -> str:
        """A test id: ``kafka-writer-READ-GROUP-laminar.<transactional_id>``."""
        name = self.obj.replace("<", "").replace(">", "")
        return f"{self.store}-{self.who}-{self.operation}-{self.kind}-{name}"


def documented_rights() -> list[Right]:
    """Every right the four tables of docs/operations.md's "Least privilege" list, one per
    operation (a cell ``SELECT, INSERT`` is two)."""
    text = DOCS.read_text()
    rights: list[Right] = []
    for (store, who), heading in SECTIONS.items():
        start = text.index(heading)
        rows = []
        for line in text[start:].splitlines()[1:]:
            if line.startswith("#"):
                break
            if line.startswith("| ") and not line.startswith("| ---"):
                rows.append([c.strip() for c in line.strip("|").split("|")])
        for cells in rows[1:]:  # the header row first
            kind, obj, operations, used_by = cells[0], cells[1], cells[2], cells[3]
            for operation in re.findall(r"[A-Z_]+", operations):
                rights.append(
                    Right(
                        store,
                        who,
                        kind.strip("`"),
                        obj.strip("`"),
                        operation,
                        best_effort="best effort" in used_by,
                    )
                )
    return rights


def token_from(url: str, client_id: str, secret: str) -> tuple[str, float, str]:
    """A user's token provider, as an MSK IAM signer or any IdP client is: its own HTTP call
    (client credentials), returning what confluent-kafka's ``oauth_cb`` returns."""
    basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    request = urllib.request.Request(
        url,
        data=urllib.parse.urlencode({"grant_type": "client_credentials"}).encode(),
        headers={"Authorization": f"Basic {basic}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        token = json.loads(answer.read())["access_token"]
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return token, float(claims["exp"]), str(claims["sub"])


def oauth_token(config: str | None) -> tuple[str, float, str]:
    """An ``oauth_cb`` for the CLI and the exporter (``--kafka-config
    oauth_cb=tests.integration.secured_helpers:oauth_token``): ``sasl.oauthbearer.config``
    (what confluent-kafka hands the callable) says ``client=<who>``, and the environment holds
    that client (``LAMINAR_TEST_OAUTH_<WHO>``: url, client id, secret)."""
    who = dict(item.split("=", 1) for item in (config or "").split())["client"]
    url, client_id, secret = json.loads(os.environ[f"LAMINAR_TEST_OAUTH_{who.upper()}"])
    return token_from(url, client_id, secret)


@dataclass
class TokenProvider:
    """A picklable ``oauth_cb`` bound to one client of the issuer."""

    url: str
    client_id: str
    secret: str = field(repr=False)

    def __call__(self, config: str | None) -> tuple[str, float, str]:
        return token_from(self.url, self.client_id, self.secret)


@dataclass
class World:
    """One test's names on the secured servers: a topic, a transactional id and a table (made
    by the admin), the writer's and the reader's principals (Kafka) and roles (PostgreSQL),
    their secrets, and how they connect through ``listener`` (``OAUTH`` or ``MTLS``)."""

    kafka: SecuredKafkaBroker
    postgres: SecuredPostgres
    listener: str
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    certificates: dict[str, Issued] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.topic = f"orders_{self.tag}"
        self.tid = f"orders-{self.tag}"
        self.table = f"public.orders_{self.tag}"
        self.secrets = {who: f"{who}-S3cret-{self.tag}" for who in ("writer", "reader")}
        for who in ("writer", "reader"):
            self.kafka.issuer.register_client(
                self.client_id(who), self.secrets[who], subject=self.principal(who)
            )
        self.kafka.create_topic(self.topic, 2)
        if self.listener == "SCRAM":
            for who in ("writer", "reader"):
                self.kafka.create_scram_user(self.principal(who), self.secrets[who])
        # a database of its own: `laminar recover` and status look at every group in one
        self.admin_dsn = self.postgres.create_database(f"db_{self.tag}")
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            ensure_schema(conn)  # the schema's owner creates it (docs/operations.md)
            conn.execute(f"CREATE TABLE {self.table} (id bigint, name text, epoch bigint)")
        self.dsns = {}
        for who in ("writer", "reader"):
            self.postgres.create_role(self.role(who), self.secrets[who])
            self.dsns[who] = self.postgres.role_dsn(
                self.role(who), self.secrets[who], f"db_{self.tag}"
            )

    # -- names ------------------------------------------------------------------------------

    def principal(self, who: str) -> str:
        """The Kafka principal's name (the token's ``sub``, the certificate's CN)."""
        return f"{who}-{self.tag}"

    def client_id(self, who: str) -> str:
        return f"client-{who}-{self.tag}"

    def role(self, who: str) -> str:
        return f"{who}_{self.tag}"

    def resolve(self, name: str) -> str:
        """A documented name with this world's values for its placeholders."""
        return (
            name.replace("<topic>", self.topic)
            .replace("<transactional_id>", self.tid)
            .replace("<table>", self.table)
        )

    # -- rights -----------------------------------------------------------------------------

    def grant(self, rights: list[Right]) -> None:
        """Give each principal and role its rights (the admin's ACLs and GRANTs)."""
        acls = [
            Acl(f"User:{self.principal(r.who)}", r.operation, r.kind, self.resolve(r.obj))
            for r in rights
            if r.store == "kafka"
        ]
        self.kafka.grant(acls)
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            for r in rights:
                if r.store != "postgres":
                    continue
                target = (
                    sql.SQL(r.kind) + sql.SQL(" ") + sql.Identifier(*self.resolve(r.obj).split("."))
                )
                conn.execute(
                    sql.SQL("GRANT {} ON {} TO {}").format(
                        sql.SQL(r.operation), target, sql.Identifier(self.role(r.who))
                    )
                )

    # -- client settings --------------------------------------------------------------------

    def settings(self, who: str, *, oidc: bool = False) -> dict[str, Any]:
        """``who``'s Kafka client settings through the world's listener, without
        ``bootstrap.servers``: OAUTH with an ``oauth_cb`` (a `TokenProvider`), or librdkafka's
        OIDC method (``oidc``); MTLS with a certificate whose CN is the principal (its key
        encrypted with the secret)."""
        if self.listener in ("MTLS", "MTLS_PEM"):
            if who not in self.certificates:
                self.certificates[who] = self.kafka.ca.client(
                    self.principal(who), password=self.secrets[who]
                )
            config = self.kafka.mtls_config(self.certificates[who])
            if self.listener == "MTLS_PEM":  # librdkafka's PEM-string forms, no files
                issued = self.certificates[who]
                for kind, pem in (
                    ("ca", self.kafka.ca.pem),
                    ("certificate", issued.certificate_pem),
                    ("key", issued.key_pem),
                ):
                    config.pop(f"ssl.{kind}.location")
                    config[f"ssl.{kind}.pem"] = pem
        elif self.listener == "SCRAM":
            config = self.kafka.scram_config(self.principal(who), self.secrets[who])
        elif oidc:
            config = self.kafka.oauth_config(
                **{
                    "sasl.oauthbearer.method": "oidc",
                    "sasl.oauthbearer.token.endpoint.url": self.kafka.issuer.token_url,
                    "sasl.oauthbearer.client.id": self.client_id(who),
                    "sasl.oauthbearer.client.secret": self.secrets[who],
                }
            )
        else:
            issuer = self.kafka.issuer
            config = self.kafka.oauth_config(
                oauth_cb=TokenProvider(issuer.token_url, self.client_id(who), self.secrets[who])
            )
        config.pop("bootstrap.servers")
        return config

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap(self.listener.removesuffix("_PEM"))

    def cli_config(self, who: str) -> dict[str, str]:
        """``who``'s settings as the CLI takes them (strings: an ``oauth_cb`` as
        ``module:function``, its client in `oauth_env`)."""
        config = self.settings(who)
        if "oauth_cb" in config:
            config["oauth_cb"] = "tests.integration.secured_helpers:oauth_token"
            config["sasl.oauthbearer.config"] = f"client={who}"
            config["sasl.oauthbearer.method"] = "default"  # over a registered writer's oidc
        return {k: str(v) for k, v in config.items()}

    def oauth_env(self, who: str) -> dict[str, str]:
        """The environment `oauth_token` reads for ``who``."""
        client = [self.kafka.issuer.token_url, self.client_id(who), self.secrets[who]]
        return {f"LAMINAR_TEST_OAUTH_{who.upper()}": json.dumps(client)}

    def leaked(self, text: str) -> list[str]:
        """Which secrets of this world appear in ``text``: the principals' client secrets, key
        passwords and role passwords, and every token the issuer minted."""
        found = [f"the {who} secret" for who, secret in self.secrets.items() if secret in text]
        found += [f"token {t[:12]}…" for t in self.kafka.issuer.tokens if t in text]
        found += [
            f"the {who} private key" for who, c in self.certificates.items() if c.key_pem in text
        ]
        return found
