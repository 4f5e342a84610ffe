"""Keeping secrets out of messages and logs: DSN passwords, SASL/TLS secrets, tokens."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["SECRET", "is_secret_key", "redact_config", "redact_dsn", "redact_text"]

#: What a redacted value is replaced with.
SECRET = "***"  # noqa: S105 (the mask, not a password)

_SECRET_KEY = re.compile(
    r"(password|passwd|secret|token|credential|sasl\.jaas|sasl\.oauthbearer\.config|"
    r"ssl\.key\.pem|ssl\.keystore\.password|private)",
    re.IGNORECASE,
)
# postgresql://user:password@host/db  (password up to the last '@' before the host part)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@\s]*)@")
# key=value DSN: password=secret or password='se cret'
_KV_PASSWORD = re.compile(
    r"(?P<key>\b(?:password|sslpassword)\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|\S+)"
)


def is_secret_key(key: str) -> bool:
    """Whether a configuration key names a secret (``sasl.password``, ``ssl.key.password``, …)."""
    return bool(_SECRET_KEY.search(key))


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client configuration with every secret value replaced by ``***``."""
    return {k: (SECRET if is_secret_key(str(k)) else v) for k, v in config.items()}


def redact_dsn(dsn: str) -> str:
    """A Postgres DSN (URL or key=value form) with its password replaced by ``***``."""
    out = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{SECRET}@", dsn)
    return _KV_PASSWORD.sub(lambda m: f"{m['key']}{SECRET}", out)


def redact_text(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """Redact DSN passwords in free text, plus any known secret values given explicitly."""
    out = redact_dsn(text)
    for value in secrets:
        if value and len(value) >= 3:
            out = out.replace(value, SECRET)
    return out
