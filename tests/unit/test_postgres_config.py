"""PostgresSink as configuration: validation, defaults, pickling and secret-free reprs (no
server: nothing connects until an epoch begins)."""

from __future__ import annotations

import pickle

import pytest

import laminar
from laminar import ConfigError, PostgresSink, TransactionalSink, TransactionState
from laminar.postgres._names import TableName

DSN = "postgresql://app:S3cr3t-pw@db.example:5432/shop"


def test_it_is_exported_and_a_transactional_sink() -> None:
    assert laminar.PostgresSink is PostgresSink
    assert "PostgresSink" in laminar.__all__
    assert issubclass(PostgresSink, TransactionalSink)
    assert PostgresSink.kind == "postgres"


def test_positional_parameters_in_the_documented_order() -> None:
    sink = PostgresSink(DSN, "public.orders", ["a", "b"], "orders-sink")
    assert sink.dsn == DSN
    assert sink.table == TableName("public", "orders")
    assert sink.columns == ["a", "b"]
    assert sink.sink_id == "orders-sink"


@pytest.mark.parametrize(
    ("table", "sink_id"),
    [
        ("public.orders", "public.orders"),
        ("orders", "public.orders"),
        ("Sales.Orders", "sales.orders"),
        ('"Sales"."Order Items"', '"Sales"."Order Items"'),
        ('"a.b"."c:d"', '"a.b"."c:d"'),
    ],
)
def test_the_default_sink_id_is_the_qualified_table(table: str, sink_id: str) -> None:
    assert PostgresSink(DSN, table).sink_id == sink_id


def test_nothing_connects_at_construction() -> None:
    sink = PostgresSink("postgresql://nobody@127.0.0.1:1/none", "t")
    assert sink.transaction_state == TransactionState.Idle()


def test_repr_and_pickles_have_no_live_resources_and_repr_no_password() -> None:
    sink = PostgresSink(DSN, "public.orders", {"x": "y"}, two_phase_part=2)
    assert "S3cr3t-pw" not in repr(sink)
    assert "***" in repr(sink)
    clone = pickle.loads(pickle.dumps(sink))
    assert clone.sink_id == sink.sink_id
    assert clone.columns == {"x": "y"}
    assert clone.two_phase_part == 2
    assert clone.gid(5) == "laminar:public.orders:5:2"


def test_key_value_dsns_are_redacted_too() -> None:
    sink = PostgresSink("host=db user=app password='p w!' dbname=shop", "t")
    assert "p w!" not in repr(sink)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dsn": ""}, "needs dsn"),
        ({"dsn": "host=x password=secret-value 'unterminated"}, "malformed dsn"),
        ({"table": ""}, "empty name part"),
        ({"table": "a.b.c"}, "3 parts"),
        ({"columns": "abc"}, "columns= must be"),
        ({"columns": ["a", ""]}, "non-empty strings"),
        ({"columns": {"a": 1}}, "non-empty strings"),
        ({"sink_id": ""}, "sink_id must be"),
        ({"two_phase_part": -1}, "two_phase_part"),
        ({"two_phase_part": True}, "two_phase_part"),
        ({"connect_timeout_s": 0}, "connect_timeout_s"),
        ({"slice_bytes": 0}, "slice_bytes"),
    ],
)
def test_invalid_configuration_is_a_config_error(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"dsn": DSN, "table": "t"}
    args.update(kwargs)
    with pytest.raises(ConfigError, match=match) as info:
        PostgresSink(**args)  # type: ignore[arg-type]
    assert "secret-value" not in str(info.value)


def test_two_sinks_on_one_table_need_distinct_ids() -> None:
    with pytest.raises(ConfigError, match="share a sink id"):
        laminar.exactly_once(PostgresSink(DSN, "orders"), PostgresSink(DSN, "public.orders"))
