"""Keeping secrets out of messages and logs: DSN passwords, SASL/TLS secrets, tokens."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from laminar.errors import ConfigError

__all__ = ["SECRET", "is_secret_key", "parse_dsn", "redact_config", "redact_dsn", "redact_text"]

#: What a redacted value is replaced with.
SECRET = "***"  # noqa: S105 (the mask, not a password)

# `token` but not `sasl.oauthbearer.token.endpoint.url` (an address, which `laminar status` needs
# back from the registry to reach an OAUTHBEARER cluster)
_SECRET_KEY = re.compile(
    r"(password|passwd|passphrase|secret|token(?!\.endpoint\.url)|credential|sasl\.jaas|"
    r"sasl\.oauthbearer\.config|ssl\.key\.pem|ssl\.keystore\.password|ssl\.keystore\.key|"
    r"private)",
    re.IGNORECASE,
)
# postgresql://user:password@host/db  (password up to the last '@' before the host part)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@\s]*)@")
# postgresql://host/db?password=pw&...: a URL's query parameter (its key percent-decoded: libpq
# reads ``passwor%64`` as ``password``); the value ends at '&', '#', a quote or whitespace
_URL_QUERY_PARAM = re.compile(r"""(?P<lead>[?&])(?P<key>[^=&#\s'"]+)=(?P<value>[^&#\s'"]*)""")
_PASSWORD_KEYS = frozenset({"password", "sslpassword"})
# key=value DSN: the key of a password; its value is found by `_value_end` (libpq's rules)
_KV_PASSWORD = re.compile(r"\b(?:password|sslpassword)\s*=\s*")
# The key=value pairs between an opening quote and a password key: the DSN is quoted in the text
# (a repr, a message), so the quote closes it — it is not part of the password.
_QUOTED_DSN_BEFORE = re.compile(
    r"""(?P<quote>['"])(?:\s*[A-Za-z_][\w.-]*\s*=\s*(?:'(?:[^'\\]|\\.)*'|(?:\\.|[^\s\\'"])+))*\s*$"""
)


# libpq's parse errors quote the rest of the connection string, password included, e.g.
# ``missing "=" after "postgresql//app:pw@db" in connection info string``
_LIBPQ_QUOTED = re.compile(
    r'(?P<lead>(?:missing "=" after|invalid connection option|invalid URI query parameter:?|'
    r"unexpected spaces found in|invalid percent-encoded token:?|"
    r'end of string reached when looking for matching "\]" in IPv6 host address in URI:?) )'
    r'"(?:[^"\\]|\\.)*"',
)


def parse_dsn(dsn: object, what: str) -> dict[str, str]:
    """The parameters of a libpq connection string or URI, or a `ConfigError` naming ``what``
    and the fix that never quotes the text: libpq's own message does, password included."""
    if not isinstance(dsn, str) or not dsn.strip():
        raise ConfigError(f"{what} needs a libpq connection string or URI, got an empty value")
    # psycopg's parser, imported on first use: `laminar.spark.options` checks a DSN in
    # processes that otherwise never touch PostgreSQL
    from psycopg.conninfo import conninfo_to_dict

    try:
        return {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    except Exception:  # psycopg.ProgrammingError; the message quotes the DSN
        raise ConfigError(
            f"{what}: malformed dsn, it is not a libpq connection string or URI (its text is "
            "not shown: it may hold a password); give e.g. 'postgresql://user@host:5432/db' or "
            "'host=... dbname=... user=...'"
        ) from None


def is_secret_key(key: str) -> bool:
    """Whether a configuration key names a secret (``sasl.password``, ``ssl.key.password``, …)."""
    return bool(_SECRET_KEY.search(key))


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client configuration with every secret value replaced by ``***``."""
    return {k: (SECRET if is_secret_key(str(k)) else v) for k, v in config.items()}


def redact_dsn(dsn: str) -> str:
    """A Postgres DSN (URL or key=value form), or text containing one, with its password replaced
    by ``***``.

    A key=value password ends where libpq ends it: a quoted value at its closing quote, an
    unquoted one at whitespace (a backslash escapes the next character, a space too). When the
    DSN is itself quoted in the text (``dsn='host=h password=pw'``), its closing quote ends the
    password as well, and a mask ends itself (text redacted twice is unchanged): only the
    password is masked, never the text after it.
    """
    out = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{SECRET}@", dsn)
    if "://" in out:
        out = _URL_QUERY_PARAM.sub(_mask_query_password, out)
    parts: list[str] = []
    done = 0
    for match in _KV_PASSWORD.finditer(out):
        if match.start() < done:
            continue  # inside a value already masked
        end = _value_end(out, match.end(), _enclosing_quote(out[: match.start()]))
        parts += [out[done : match.end()], SECRET]
        done = end
    parts.append(out[done:])
    return "".join(parts)


def _mask_query_password(match: re.Match[str]) -> str:
    if unquote(match["key"]).strip().lower() not in _PASSWORD_KEYS:
        return match[0]
    return f"{match['lead']}{match['key']}={SECRET}"


def _enclosing_quote(before: str) -> str | None:
    """The quote that opened the DSN a password key belongs to, if the DSN is quoted."""
    found = _QUOTED_DSN_BEFORE.search(before)
    return found["quote"] if found else None


def _value_end(text: str, start: int, closer: str | None) -> int:
    """Where the conninfo value starting at ``start`` ends (libpq's parser, module doc). A value
    already masked ends after the mask: redacting twice changes nothing."""
    if text.startswith(SECRET, start):
        return start + len(SECRET)
    if text.startswith("'", start):
        i = start + 1
        while i < len(text):
            if text[i] == "\\":
                i += 2
            elif text[i] == "'":
                return i + 1
            else:
                i += 1
        return len(text)
    i = start
    while i < len(text) and not text[i].isspace() and text[i] != closer:
        i += 2 if text[i] == "\\" else 1
    return min(i, len(text))


def redact_text(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """Redact DSN passwords in free text, plus any known secret values given explicitly."""
    out = _LIBPQ_QUOTED.sub(lambda m: f'{m["lead"]}"{SECRET}"', redact_dsn(text))
    for value in secrets:
        if value and len(value) >= 3:
            out = out.replace(value, SECRET)
    return out
