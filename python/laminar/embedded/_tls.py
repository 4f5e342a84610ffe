"""A local certificate authority for the embedded secured servers (`laminar.embedded.
kafka_secure`, `laminar.embedded.postgres_secure`): made at run time, never stored, its files in
a private directory (0700; keys 0600).

`LocalCA` signs server certificates (for ``127.0.0.1`` and ``localhost``) and client
certificates (the subject's CN is the principal Kafka maps an mTLS client to). Needs the
``cryptography`` package (the ``dev`` extra), imported on first use so that ``import
laminar.embedded`` does not.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Issued", "LocalCA"]


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as files and as PEM text (the key unencrypted unless a
    ``password`` was given)."""

    certificate: Path
    key: Path
    certificate_pem: str
    key_pem: str
    password: str | None = None


class LocalCA:
    """A throw-away CA: ``ca.pem`` in `directory`, certificates signed on demand."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        # the dev extra, imported on first use (module docstring)
        from cryptography import x509

        # the dev extra, imported on first use (module docstring)
        from cryptography.hazmat.primitives import hashes, serialization

        # the dev extra, imported on first use (module docstring)
        from cryptography.hazmat.primitives.asymmetric import ec

        # the dev extra, imported on first use (module docstring)
        from cryptography.x509.oid import NameOID

        self.directory = Path(directory or tempfile.mkdtemp(prefix="laminar-ca-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "laminar test CA")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self._name = name
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.pem = self._cert.public_bytes(serialization.Encoding.PEM).decode()
        self.path = self.directory / "ca.pem"
        self.path.write_text(self.pem)

    def server(self, name: str) -> Issued:
        """A server certificate for ``127.0.0.1`` and ``localhost`` (files ``<name>.crt`` and
        ``<name>.key``)."""
        # the dev extra, imported on first use (module docstring)
        from cryptography import x509

        # the dev extra, imported on first use (module docstring)
        from cryptography.x509.oid import ExtendedKeyUsageOID

        sans = x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        )
        return self._issue(name, "localhost", [sans], ExtendedKeyUsageOID.SERVER_AUTH)

    def client(self, common_name: str, *, password: str | None = None) -> Issued:
        """A client certificate whose subject is ``CN=<common_name>`` (the principal a broker
        maps it to with ``ssl.principal.mapping.rules``); its key encrypted with ``password``
        if given."""
        # the dev extra, imported on first use (module docstring)
        from cryptography.x509.oid import ExtendedKeyUsageOID

        return self._issue(
            f"client-{common_name}",
            common_name,
            [],
            ExtendedKeyUsageOID.CLIENT_AUTH,
            password=password,
        )

    def _issue(
        self,
        file_name: str,
        common_name: str,
        extensions: list[Any],
        usage: Any,
        *,
        password: str | None = None,
    ) -> Issued:
        # the dev extra, imported on first use (module docstring)
        from cryptography import x509

        # the dev extra, imported on first use (module docstring)
        from cryptography.hazmat.primitives import hashes, serialization

        # the dev extra, imported on first use (module docstring)
        from cryptography.hazmat.primitives.asymmetric import ec

        # the dev extra, imported on first use (module docstring)
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        for extension in extensions:
            builder = builder.add_extension(extension, critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        encryption: Any = (
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption()
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        ).decode()
        cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
        cert_path = self.directory / f"{file_name}.crt"
        key_path = self.directory / f"{file_name}.key"
        cert_path.write_text(cert_pem)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key_pem)
        return Issued(cert_path, key_path, cert_pem, key_pem, password)
