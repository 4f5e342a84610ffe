"""Names on the PostgreSQL side: table names as users write them, and two-phase-commit gids.

Table names follow SQL: ``schema.table`` or ``table`` (found through ``search_path``); a part in
double quotes is taken literally (``""`` is a quote; dots and spaces are allowed inside), an
unquoted part that is a plain identifier is folded to lower case as PostgreSQL does
(``Orders`` → ``orders``). An unquoted part that is not a plain identifier (``order items``) has
only one possible meaning and is taken verbatim. The parsed parts are only ever used through
``psycopg.sql.Identifier``.

Prepared-transaction ids (gids), ``laminar:<sink>:<epoch>:<part>`` (docs/postgres.md, "gid
format"), are the core's: it makes and parses them (``protocol/gid.rs``), and this module only
puts its answers in the errors and types of the PostgreSQL side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from laminar import _core
from laminar.errors import ConfigError

__all__ = [
    "GID_MAX_BYTES",
    "GID_PREFIX",
    "ParsedGid",
    "TableName",
    "gid_prefix",
    "make_gid",
    "parse_gid",
    "parse_table_name",
    "render_identifier",
]

#: PostgreSQL's limit: a gid "must be less than 200 bytes long".
GID_MAX_BYTES: int = _core.GID_MAX_BYTES
#: Every gid laminar prepares starts with this.
GID_PREFIX: str = _core.GID_PREFIX

_IDENT_CHAR = r"A-Za-z0-9_$\u0080-\U0010ffff"
_PLAIN_IDENTIFIER = re.compile(rf"[A-Za-z_\u0080-\U0010ffff][{_IDENT_CHAR}]*")


@dataclass(frozen=True)
class TableName:
    """A table as named by the user: ``schema`` is None when ``search_path`` decides."""

    schema: str | None
    name: str

    def display(self) -> str:
        """The name in SQL form, quoted where needed (``public.orders``, ``"My"."T.x"``)."""
        if self.schema is None:
            return render_identifier(self.name)
        return f"{render_identifier(self.schema)}.{render_identifier(self.name)}"


def render_identifier(part: str) -> str:
    """One identifier as SQL text: bare when that reads back the same, double-quoted otherwise."""
    if part and _bare_start(part[0]) and all(_bare_start(c) or c in "0123456789$" for c in part):
        return part
    return '"' + part.replace('"', '""') + '"'


def _bare_start(c: str) -> bool:
    return ("a" <= c <= "z") or c == "_" or (c >= "\u0080" and c.isalpha())


def _fold(part: str) -> str:
    # PostgreSQL folds only ASCII letters of unquoted identifiers (UTF-8 databases).
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in part)


def parse_table_name(text: str) -> TableName:
    """Parse ``schema.table`` / ``table`` (quoted parts allowed) into a `TableName`.

    Raises `ConfigError` for an empty name, an unterminated or empty quoted part, a stray quote,
    or more than two parts.
    """
    if not isinstance(text, str):
        raise ConfigError(f"table must be a string like 'schema.table', not {type(text).__name__}")
    parts: list[str] = []
    i, n = 0, len(text)

    def bad(why: str) -> ConfigError:
        return ConfigError(
            f"table name {text!r}: {why}. Write it as schema.table or table; quote a part that "
            'holds dots, quotes or capitals in double quotes, doubling inner quotes: \'"My.Schema"'
            '."Ta""ble"\''
        )

    while True:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == '"':
            i += 1
            chars: list[str] = []
            while True:
                if i >= n:
                    raise bad("unterminated quoted identifier")
                if text[i] == '"':
                    if i + 1 < n and text[i + 1] == '"':
                        chars.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                chars.append(text[i])
                i += 1
            if not chars:
                raise bad("empty quoted identifier")
            parts.append("".join(chars))
            while i < n and text[i].isspace():
                i += 1
        else:
            start = i
            while i < n and text[i] not in '."':
                i += 1
            if i < n and text[i] == '"':
                raise bad("a double quote inside an unquoted part")
            raw = text[start:i].strip()
            if not raw:
                raise bad("empty name part")
            parts.append(_fold(raw) if _PLAIN_IDENTIFIER.fullmatch(raw) else raw)
        if i >= n:
            break
        if text[i] != ".":
            raise bad(f"unexpected character {text[i]!r} after a quoted part")
        i += 1
    if len(parts) > 2:
        raise bad(f"{len(parts)} parts; the database comes from the DSN, the table is schema.table")
    if len(parts) == 2:
        return TableName(parts[0], parts[1])
    return TableName(None, parts[0])


# -- two-phase-commit gids ------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedGid:
    """The fields of a laminar gid; ``sink_id`` is None when the gid holds a hashed sink id."""

    sink_part: str
    sink_id: str | None
    epoch: int
    part: int


def gid_prefix(sink_id: str) -> str:
    """The prefix every gid of ``sink_id`` starts with (``laminar:<sink>:``)."""
    return _core.gid_prefix(sink_id)


def make_gid(sink_id: str, epoch: int, part: int = 0) -> str:
    """The prepared-transaction id of ``sink_id``'s ``epoch``, partition ``part``."""
    if epoch < 0 or part < 0:
        raise ConfigError(f"gid needs a non-negative epoch and part, got {epoch} and {part}")
    try:
        return _core.make_gid(sink_id, epoch, part)
    except OverflowError as e:
        raise ConfigError(
            f"gid for epoch {epoch}, part {part}: out of range (an epoch is at most 2**63-1, a "
            "part at most 2**32-1)"
        ) from e
    except UnicodeEncodeError as e:
        raise ConfigError(
            f"sink id {sink_id!r} is not valid Unicode text (a lone surrogate): it cannot name "
            "a PostgreSQL transaction"
        ) from e


def parse_gid(gid: str) -> ParsedGid | None:
    """The fields of a laminar gid, or None if ``gid`` is not one."""
    fields = _core.parse_gid(gid)
    return None if fields is None else ParsedGid(*fields)
