"""Scale-out mode's pure parts: participant names, result rows, configuration checks, pickling."""

from __future__ import annotations

import pickle

import pytest

import laminar
from laminar import ConfigError
from laminar.protocol.distributed import ParticipantLookup
from laminar.protocol.scaleout import (
    RESULT_DDL,
    ParticipantResult,
    ScaleOutTask,
    dtid_for,
    kafka_participant,
    participant_base,
    postgres_participant,
    result_schema,
    results_batch,
)

DSN = "host=db dbname=app user=u"


def sinks() -> tuple[laminar.KafkaSink, laminar.PostgresSink]:
    return laminar.KafkaSink("b:9092", "orders", "orders-tx", key="id"), laminar.PostgresSink(
        DSN, "orders"
    )


def test_participants_are_the_base_sinks_with_their_partition() -> None:
    kafka, pg = sinks()
    k3 = kafka_participant(kafka, 3)
    assert k3.sink_id == k3.transactional_id == "orders-tx.p3"
    assert k3.marker_group == "laminar.orders-tx.p3"
    assert (k3.topic, k3.key) == ("orders", "id")
    assert kafka.sink_id == "orders-tx"  # the base is untouched
    p3 = postgres_participant(pg, 3)
    assert p3.sink_id == pg.sink_id == "public.orders"
    assert p3.two_phase_part == 3
    assert pg.two_phase_part is None
    assert p3.gid(7) == "laminar:public.orders:7:3"
    assert participant_base("orders-tx.p3") == ("orders-tx", 3)
    assert participant_base("orders-tx") is None
    assert dtid_for("g", 7) == "laminar:g:7"


def test_the_factory_builds_participants_of_known_sinks_only() -> None:
    kafka, _pg = sinks()
    lookup = ParticipantLookup([kafka])
    assert lookup("orders-tx") is kafka
    built = lookup("orders-tx.p12")
    assert built.sink_id == "orders-tx.p12"
    assert lookup("orders-tx.p12") is built
    assert lookup("other.p1") is None
    assert lookup("other") is None


def test_the_lookup_closes_the_participants_it_built_and_only_those(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a participant never closed keeps its clients reconnecting for the life of the process
    kafka, _pg = sinks()
    lookup = ParticipantLookup([kafka])
    closed: list[str] = []
    built = [lookup(f"orders-tx.p{n}") for n in (0, 1)]
    for sink in [*built, kafka]:
        monkeypatch.setattr(sink, "close", lambda s=sink: closed.append(s.sink_id))
    lookup.close()
    assert sorted(closed) == ["orders-tx.p0", "orders-tx.p1"]  # not the sink it was given
    assert lookup("orders-tx.p0") is not built[0]  # built again after a close


def test_result_rows_round_trip_through_arrow() -> None:
    pg = ("pg:public.orders:p0", "postgres", "laminar:x:1:0")
    kafka = ("kafka:orders-tx.p0", "kafka", "orders-tx.p0")
    results = [
        ParticipantResult(0, "0-a", *pg, 5, "s", None, "prepared"),
        ParticipantResult(0, "0-a", *kafka, 5, "lm1.x", 3, "prepared"),
    ]
    batch = results_batch(results)
    assert batch.schema.equals(result_schema())
    assert [ParticipantResult.from_row(r) for r in batch.to_pylist()] == results
    names = [f.split()[0] for f in RESULT_DDL.split(", ")]
    assert names == result_schema().names


def test_the_task_pickles_as_configuration() -> None:
    kafka, pg = sinks()
    task = pickle.loads(pickle.dumps(ScaleOutTask("g", 4, [pg], [kafka])))
    assert (task.dtid, task.epoch) == ("laminar:g:4", 4)
    assert [s.sink_id for s in task.kafka] == ["orders-tx"]
    with pytest.raises(ConfigError, match="PostgresSink"):
        ScaleOutTask("g", 4, [], [kafka])


def test_scale_out_needs_a_postgres_sink_and_keeps_its_option_when_pickled() -> None:
    kafka, pg = sinks()
    with pytest.raises(ConfigError, match="needs a PostgresSink"):
        laminar.exactly_once(kafka, scale_out=True)
    writer = laminar.exactly_once(kafka, pg, scale_out=True)
    assert pickle.loads(pickle.dumps(writer)).scale_out is True
    alone = laminar.exactly_once(pg, scale_out=True)
    assert alone.group_id == "public.orders+scale-out"
    plain = laminar.exactly_once(kafka, pg)
    with pytest.raises(ConfigError, match="scale_out=True"):
        plain.write_epoch_scaled(0, lambda task: [])
