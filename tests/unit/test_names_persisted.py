"""The persisted names the core makes (protocol/gid.rs, protocol/names.rs) on adversarial ids:
the gid, the default group id and the Kafka marker/identity groups must be byte-for-byte what the
previous Python made (2c0d9ad: postgres/_names.py, protocol/atomic.py default_group_id,
kafka/_config.py marker_group) — a difference orphans existing prepared transactions and groups.

The previous implementation is copied here verbatim as the oracle (it is a persisted format, not
product code)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import quote, unquote

import pytest

from laminar import _core
from laminar.errors import ConfigError
from laminar.postgres import _names

# -- the oracle: 2c0d9ad's Python, verbatim ---------------------------------------------------

_OLD_GID_MAX_BYTES = 199
_OLD_PREFIX = "laminar:"
_OLD_DIGITS = re.compile(r"[0-9]+")
_OLD_TAIL_RESERVE = len(":9223372036854775807:2147483647")


@dataclass(frozen=True)
class _OldParsed:
    sink_part: str
    sink_id: str | None
    epoch: int
    part: int


def _old_encode_sink(sink_id: str) -> str:
    return quote(sink_id.encode("utf-8"), safe="._-").replace("~", "%7E")


def _old_sink_part(sink_id: str, budget: int) -> str:
    encoded = _old_encode_sink(sink_id)
    if len(encoded) <= budget:
        return encoded
    digest = hashlib.sha256(sink_id.encode("utf-8")).hexdigest()[:16]
    keep = max(0, budget - 1 - len(digest))
    head = encoded[:keep]
    cut = head.rfind("%")
    if cut != -1 and cut > len(head) - 3:
        head = head[:cut]
    return f"{head}~{digest}"


def old_gid_prefix(sink_id: str) -> str:
    budget = _OLD_GID_MAX_BYTES - len(_OLD_PREFIX) - _OLD_TAIL_RESERVE
    return f"{_OLD_PREFIX}{_old_sink_part(sink_id, budget)}:"


def old_make_gid(sink_id: str, epoch: int, part: int = 0) -> str:
    if epoch < 0 or part < 0:
        raise ConfigError(f"gid needs a non-negative epoch and part, got {epoch} and {part}")
    gid = f"{old_gid_prefix(sink_id)}{epoch}:{part}"
    if len(gid.encode("utf-8")) > _OLD_GID_MAX_BYTES:
        raise ConfigError(f"gid for epoch {epoch}, part {part} exceeds 199 bytes")
    return gid


def old_parse_gid(gid: str) -> _OldParsed | None:
    if not gid.startswith(_OLD_PREFIX):
        return None
    fields = gid[len(_OLD_PREFIX) :].split(":")
    if len(fields) != 3 or not _OLD_DIGITS.fullmatch(fields[1]):
        return None
    if not _OLD_DIGITS.fullmatch(fields[2]) or not fields[0]:
        return None
    try:
        sink_id = None if "~" in fields[0] else unquote(fields[0], errors="strict")
    except UnicodeDecodeError:
        return None
    return _OldParsed(fields[0], sink_id, int(fields[1]), int(fields[2]))


def old_default_group_id(sink_ids: list[str]) -> str:
    joined = "+".join(sorted(sink_ids))
    if len(joined) <= 200:
        return joined
    digest = hashlib.sha256(joined.encode()).hexdigest()[:16]
    return f"{joined[:180]}~{digest}"


# -- adversarial ids ----------------------------------------------------------------------------

ADVERSARIAL_IDS = [
    "s",
    "\x00",
    "a\x00b",
    "~",
    "%",
    "~%~%7E%25",
    "%" * 300,
    "~" * 300,
    "é",  # precomposed
    "e\u0301",  # the same text, decomposed (NFD)
    "e" + "\u0301" * 500,  # a pile of combining marks
    "x" * 10_000,
    "ü" * 5_000,
    "\U0001f600" * 100,
    ":" * 60,
    "a:b:c",
    " ",
    "\n\t",
    "+",
    "\ufeff",
    "x" * 133,
    "x" * 134,
    "%" * 44 + "x",
    "ü" * 22 + "x",
]
EPOCHS = [0, 1, 2**31, 2**63 - 1]
PARTS = [0, 1, 2**31 - 1, 2**31, 2**32 - 1]


@pytest.mark.parametrize("sink_id", ADVERSARIAL_IDS, ids=range(len(ADVERSARIAL_IDS)))
def test_gid_equals_the_previous_python_on_adversarial_ids(sink_id: str) -> None:
    """the gid and its prefix are byte-equal to 2c0d9ad's for every in-range epoch/part,
    parse back the same, and stay within PostgreSQL's 199 bytes."""
    assert _names.gid_prefix(sink_id) == old_gid_prefix(sink_id)
    for epoch in EPOCHS:
        for part in PARTS:
            gid = _names.make_gid(sink_id, epoch, part)
            assert gid == old_make_gid(sink_id, epoch, part)
            assert len(gid.encode()) <= 199
            new, old = _names.parse_gid(gid), old_parse_gid(gid)
            assert new is not None
            assert old is not None
            assert (new.sink_part, new.sink_id, new.epoch, new.part) == (
                old.sink_part,
                old.sink_id,
                old.epoch,
                old.part,
            )


def test_ids_differing_only_in_normalisation_get_distinct_gids() -> None:
    """no normalisation happens (NFC and NFD ids are different sinks, as before)."""
    nfc, nfd = unicodedata.normalize("NFC", "é"), unicodedata.normalize("NFD", "é")
    assert _names.make_gid(nfc, 1) != _names.make_gid(nfd, 1)
    assert _names.make_gid(nfd, 1) == old_make_gid(nfd, 1)


@pytest.mark.parametrize(
    "ids",
    [
        ["b", "a"],
        ["", ""],
        ["\x00", "a"],
        ["~", "%"],
        ["é", "e\u0301"],
        ["x" * 199],
        ["x" * 200],
        ["x" * 201],
        ["ü" * 150, "x" * 60],
        ["\U0001f600" * 150, "\uffff" * 60],
        ["a+b", "a", "b"],
        ["x" * 10_000, "y"],
    ],
    ids=range(12),
)
def test_default_group_id_equals_the_previous_python(ids: list[str]) -> None:
    """sorted by code point (astral vs BMP too), hashed past 200 code points, the lone
    scale-out mark appended after the hash — as 2c0d9ad did."""
    assert _core.default_group_id(ids) == old_default_group_id(ids)
    old_scale_out = old_default_group_id(ids) + ("+scale-out" if len(ids) == 1 else "")
    assert _core.default_group_id(ids, scale_out=True) == old_scale_out


def test_marker_and_identity_groups_equal_the_previous_python() -> None:
    for tid in ["t", "a.b-c_d", "x" * 200]:
        assert _core.marker_group(tid) == f"laminar.{tid}"
        assert _core.identity_group(tid) == f"laminar.{tid}.identity"


def test_a_sink_id_with_a_lone_surrogate_or_a_nul_is_refused_when_the_sink_is_made() -> None:
    """The previous Python made a group id of a lone surrogate (the core's binding cannot take
    one); such an id never reaches it: PostgreSQL cannot store it, so the sink refuses it with a
    ConfigError naming it."""
    from laminar import PostgresSink

    assert old_default_group_id(["\ud800"]) == "\ud800"
    for bad in ("\ud800", "a\x00b"):
        with pytest.raises(ConfigError, match="sink_id"):
            PostgresSink("postgresql://u@h/db", "t", sink_id=bad)


def test_a_lone_surrogate_sink_id_gives_a_config_error_not_a_unicode_error() -> None:
    """A sink id with a lone surrogate (e.g. from os.fsdecode of a non-UTF-8 name) that reaches
    make_gid is a ConfigError naming it, not the binding's UnicodeEncodeError."""
    with pytest.raises(ConfigError):
        _names.make_gid("\ud800", 1)


def test_an_empty_sink_id_never_reaches_the_gid() -> None:
    """At the public boundary: make_gid('') gives 'laminar::1:0', which parse_gid
    refuses (as 2c0d9ad did) — recovery could never see such a transaction — but PostgresSink
    refuses an empty sink_id before any gid is made."""
    from laminar import PostgresSink

    assert _names.parse_gid(_names.make_gid("", 1)) is None
    assert old_parse_gid(old_make_gid("", 1)) is None
    with pytest.raises(ConfigError, match="sink_id"):
        PostgresSink("postgresql://u@h/db", "t", sink_id="")


def test_out_of_range_epoch_and_part_are_refused_as_out_of_range() -> None:
    """Not a format break (Spark's batch ids are Longs, partitions Ints): epoch 2**63 and part
    2**32 made gids before and are refused now, with a ConfigError that says they are out of
    range (not that the gid is too long: it is 33 bytes)."""
    assert old_make_gid("s", 2**63, 0) == "laminar:s:9223372036854775808:0"
    assert old_make_gid("s", 0, 2**32) == "laminar:s:0:4294967296"
    for epoch, part in ((2**63, 0), (0, 2**32)):
        with pytest.raises(ConfigError) as caught:
            _names.make_gid("s", epoch, part)
        assert "exceeds" not in str(caught.value), caught.value
        assert "out of range" in str(caught.value), caught.value


def test_parse_gid_of_out_of_range_numbers_is_none_not_an_error() -> None:
    """For the live path (no gid past i64/u32 is ever made), a documented narrowing: the
    previous Python parsed them."""
    assert old_parse_gid("laminar:s:9223372036854775808:0") is not None
    assert _names.parse_gid("laminar:s:9223372036854775808:0") is None
    assert _names.parse_gid("laminar:s:0:4294967296") is None
    assert _names.parse_gid("laminar:s:\u0661:0") is None  # Arabic-Indic digit: not [0-9]
    assert old_parse_gid("laminar:s:\u0661:0") is None
