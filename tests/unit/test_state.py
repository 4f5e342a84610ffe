"""laminar.TransactionState: an immutable value, equal/hashable by value, picklable."""

from __future__ import annotations

import pickle

import pytest

import laminar
from laminar import TransactionState

NAMES = ["Idle", "Active", "Prepared", "Committing", "Aborting", "Failed"]


def test_idle_has_no_epoch() -> None:
    s = TransactionState.Idle()
    assert s.name == "Idle"
    assert s.epoch is None
    assert repr(s) == "TransactionState.Idle()"
    assert str(s) == "Idle"
    assert s == TransactionState("Idle")


@pytest.mark.parametrize("name", NAMES[1:])
def test_states_with_an_epoch(name: str) -> None:
    s = getattr(TransactionState, name)(3)
    assert s.name == name
    assert s.epoch == 3
    assert repr(s) == f"TransactionState.{name}(epoch=3)"
    assert str(s) == f"{name}(epoch=3)"
    assert s == TransactionState(name, 3)  # type: ignore[arg-type]
    assert s != TransactionState(name, 4)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NAMES)
def test_repr_evaluates_back(name: str) -> None:
    s = TransactionState(name, None if name == "Idle" else 12)  # type: ignore[arg-type]
    assert eval(repr(s), {"TransactionState": TransactionState}) == s


def test_equality_and_hash_by_value() -> None:
    states = {TransactionState.Active(1), TransactionState.Active(1), TransactionState.Failed(1)}
    assert len(states) == 2
    assert TransactionState.Active(1) != TransactionState.Prepared(1)
    assert TransactionState.Idle() != "Idle"
    assert hash(TransactionState.Committing(5)) == hash(TransactionState("Committing", 5))


def test_is_immutable() -> None:
    s = TransactionState.Active(1)
    with pytest.raises(AttributeError):
        s.epoch = 2  # type: ignore[misc]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_round_trip(protocol: int) -> None:
    for s in [TransactionState.Idle(), TransactionState.Aborting(2**40)]:
        assert pickle.loads(pickle.dumps(s, protocol=protocol)) == s


@pytest.mark.parametrize(
    ("name", "epoch", "message"),
    [
        ("Open", 1, "unknown transaction state 'Open'"),
        ("idle", None, "unknown transaction state"),
        ("Idle", 1, "Idle has no epoch"),
        ("Active", None, "needs an epoch"),
        ("Active", -1, "epoch must be >= 0"),
    ],
)
def test_invalid_construction_is_a_value_error(name: str, epoch: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TransactionState(name, epoch)  # type: ignore[arg-type]


def test_exported_from_the_package() -> None:
    assert "TransactionState" in laminar.__all__
    assert laminar.TransactionState is TransactionState
