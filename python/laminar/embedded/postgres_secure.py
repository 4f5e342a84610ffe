"""An ephemeral PostgreSQL cluster secured as production servers are: TLS only (``ssl=on``, a
server certificate of a local CA), and ``pg_hba.conf`` with one line, ``hostssl all all
127.0.0.1/32 scram-sha-256`` — no Unix-socket or plaintext connection, no trust, every role
by password. Roles with only the grants a test gives them are made with `create_role`.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from laminar.embedded._tls import LocalCA
from laminar.embedded.postgres import EphemeralPostgres

__all__ = ["SecuredPostgres"]

#: The whole of the cluster's pg_hba.conf.
HBA = "hostssl all all 127.0.0.1/32 scram-sha-256\n"


class SecuredPostgres(EphemeralPostgres):
    """An `EphemeralPostgres` that accepts TLS connections with SCRAM passwords only; its DSNs
    verify the server (``sslmode=verify-full`` against ``ca``)."""

    def __init__(self, ca: LocalCA, *, password: str, **kwargs: Any) -> None:
        self.ca = ca
        settings = {
            "ssl": "on",
            "ssl_cert_file": "server.crt",
            "ssl_key_file": "server.key",
            "password_encryption": "scram-sha-256",
            **kwargs.pop("settings", {}),
        }
        super().__init__(password=password, settings=settings, **kwargs)

    def dsn_for(self, database: str) -> str:
        """The superuser's URI for ``database``, TLS verified (``verify-full``)."""
        return self._verified(super().dsn_for(database))

    def role_dsn(self, role: str, password: str, database: str | None = None) -> str:
        """The URI of ``role`` for ``database`` (default: the cluster's), TLS verified."""
        self._require_started()
        auth = f"{quote(role, safe='')}:{quote(password, safe='')}"
        name = quote(database or self.database, safe="")
        return self._verified(f"postgresql://{auth}@{self.host}:{self.port}/{name}")

    def create_role(self, role: str, password: str) -> str:
        """A login role with no privilege beyond PUBLIC's; its DSN."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
        return self.role_dsn(role, password)

    def _verified(self, uri: str) -> str:
        return f"{uri}?sslmode=verify-full&sslrootcert={quote(str(self.ca.path), safe='/')}"

    def _create_cluster(self) -> None:
        """initdb, then the server certificate in the data directory (the key 0600, owned by
        the account the server runs as) and the one-line pg_hba.conf."""
        super()._create_cluster()
        data = self.data_dir
        issued = self.ca.server("postgres")
        (data / "server.crt").write_text(issued.certificate_pem)
        key = data / "server.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(issued.key_pem)
        (data / "pg_hba.conf").write_text(HBA)
        if self._os_user is not None:
            for name in ("server.crt", "server.key", "pg_hba.conf"):
                os.chown(data / name, self._os_user.uid, self._os_user.gid)

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"SecuredPostgres({self.host}:{self.port}, TLS + SCRAM only, {state})"
