"""laminar.errors: the one error tree, its flags, its pickling, and the Rust bridge into it."""

from __future__ import annotations

import pickle

import pytest

import laminar
from laminar import errors
from laminar._core import retry_delay
from laminar.engine.loop import failed_event
from laminar.errors import (
    AbortableError,
    AuthorizationError,
    ConfigError,
    DataError,
    FatalError,
    FencedError,
    IllegalStateError,
    InDoubtError,
    InvalidStateEncoding,
    LaminarError,
)
from laminar.kafka._security import KafkaLogError
from laminar.kafka.conn import BrokerUnavailableError

ALL = [
    AbortableError,
    AuthorizationError,
    ConfigError,
    DataError,
    FatalError,
    FencedError,
    IllegalStateError,
    InDoubtError,
    InvalidStateEncoding,
    LaminarError,
]


def test_tree() -> None:
    for cls in ALL:
        assert issubclass(cls, LaminarError)
        assert issubclass(cls, Exception)
    for cls in (FencedError, AuthorizationError, ConfigError, DataError):
        assert issubclass(cls, FatalError)
    for cls in (AbortableError, InDoubtError, IllegalStateError, InvalidStateEncoding):
        assert not issubclass(cls, FatalError)
    assert not issubclass(InDoubtError, AbortableError)
    assert not issubclass(IllegalStateError, AbortableError)


def test_value_errors() -> None:
    assert issubclass(InvalidStateEncoding, ValueError)
    assert issubclass(DataError, ValueError)
    assert not issubclass(IllegalStateError, ValueError)


@pytest.mark.parametrize(
    ("cls", "retriable", "requires_abort", "fatal"),
    [
        (LaminarError, False, False, False),
        (AbortableError, True, True, False),
        (FatalError, False, False, True),
        (FencedError, False, False, True),
        (AuthorizationError, False, False, True),
        (ConfigError, False, False, True),
        (DataError, False, False, True),
        (InDoubtError, False, False, False),
        (IllegalStateError, False, False, False),
        (InvalidStateEncoding, False, False, False),
    ],
)
def test_flags(cls: type[LaminarError], retriable: bool, requires_abort: bool, fatal: bool) -> None:
    err = cls("boom")
    assert (err.retriable, err.requires_abort, err.fatal) == (retriable, requires_abort, fatal)


@pytest.mark.parametrize("cls", ALL)
def test_pickle_keeps_class_message_sink_and_epoch(cls: type[LaminarError]) -> None:
    err = cls("it broke", sink_id="orders", epoch=12)
    err.extra = "kept"  # type: ignore[attr-defined]
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is cls
    assert (copy.message, copy.sink_id, copy.epoch) == ("it broke", "orders", 12)
    assert copy.extra == "kept"  # type: ignore[attr-defined]
    assert str(copy) == str(err) == "it broke (sink 'orders', epoch 12)"


def test_str_without_context() -> None:
    assert str(LaminarError("plain")) == "plain"
    assert str(LaminarError("only epoch", epoch=0)) == "only epoch (epoch 0)"


def _produce_and_wrap(root: OSError) -> None:
    try:
        raise root
    except OSError as e:
        raise AbortableError("produce failed", sink_id="s") from e


def test_cause_is_kept() -> None:
    root = OSError("connection reset")
    with pytest.raises(AbortableError) as info:
        _produce_and_wrap(root)
    assert info.value.__cause__ is root


def test_exported() -> None:
    for cls in ALL:
        assert cls.__name__ in errors.__all__
        assert getattr(laminar, cls.__name__) is cls


def test_the_rust_bridge_raises_classes_of_this_tree() -> None:
    with pytest.raises(IllegalStateError):
        laminar.EpochTracker().commit_ok(now_us=0)
    with pytest.raises(InvalidStateEncoding):
        laminar.PreparedTxnState.parse("garbage")
    with pytest.raises(ValueError, match="bad_prefix"):
        laminar.PreparedTxnState.parse("garbage")


@pytest.mark.parametrize(
    ("error", "kind", "retriable"),
    [
        (errors.AbortableError("x"), "abortable", True),
        (errors.RecordTooLargeError("x"), "abortable", False),
        (errors.InDoubtError("x"), "in_doubt", False),
        (errors.FencedError("x"), "fenced", False),
        (errors.FatalError("x"), "fatal", False),
        (errors.ConfigError("x"), "fatal", False),
        (errors.AuthorizationError("x"), "fatal", False),
        (errors.DataError("x"), "fatal", False),
        (errors.IllegalStateError("x"), "fatal", False),
        (BrokerUnavailableError("x"), "abortable", True),
        (KafkaLogError("x"), "fatal", False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_each_error_class_is_one_failure_kind_the_engine_hands_the_core(
    error: errors.LaminarError, kind: str, retriable: bool
) -> None:
    """The class raised is the classification (docs/engine.md §1): `failed_event` reads it, and
    the core's retry rule takes it as it is — an abortable error that is not retriable (a record
    too large) is given up, an in-doubt one retried."""
    assert (error.failure_kind, error.retriable) == (kind, retriable)
    assert failed_event(error).kind == "failed"
    delay = retry_delay(1, 3, 0.1, error.failure_kind, retriable=error.retriable)
    assert (delay is not None) == (kind == "in_doubt" or (kind == "abortable" and retriable))
