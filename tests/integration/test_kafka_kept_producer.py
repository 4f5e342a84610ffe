"""A scale-out participant's producer kept by the process for its next task (docs/protocol.md §4,
"A kept producer"), on a real broker and PostgreSQL: reused when the marker proves its prepared
epoch committed (the commit only brings the producer along) or when it aborts an undecided one
(as a new producer's InitProducerId would); replaced when anything else answers; every record
committed once with its exact value, read back with the control batches replayed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import laminar
from laminar import _faults
from laminar.errors import AbortableError
from laminar.kafka import _clients, _kept
from laminar.kafka.log import KafkaLogClient
from laminar.protocol.distributed import kafka_participant
from tests.integration.atomic_helpers import assert_exactly_once as assert_both_exactly_once
from tests.integration.kafka_helpers import committed, epoch_table, make_sink
from tests.integration.test_scaleout_protocol import PARTS, leftovers, threads, writer_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The transactional id of every producer opened in this process from here on."""
    names: list[str] = []
    real = _clients.TransactionalProducer

    def counting(config: dict[str, Any]) -> Any:
        names.append(str(config["transactional.id"]))
        return real(config)

    monkeypatch.setattr(_clients, "TransactionalProducer", counting)
    return names


def participant(bootstrap: str, topic: str, tid: str) -> laminar.KafkaSink:
    return kafka_participant(make_sink(bootstrap, topic, tid), 0)


def prepared_and_released(sink: laminar.KafkaSink, epoch: int, rows: int) -> Any:
    """A task's part: ``sink`` prepares ``epoch`` (its rows) and releases its producer, which
    this process keeps; the `PreparedTxnState`."""
    sink.init_transactions()
    assert sink.begin_transaction(epoch)
    sink.write(epoch_table(epoch, rows))
    state = sink.prepare_transaction()
    sink.release_prepared()
    return state


def written(sink: laminar.KafkaSink, epoch: int, rows: int) -> None:
    """``sink`` (started) writes ``epoch`` alone, one phase, and closes."""
    assert sink.begin_transaction(epoch)
    sink.write(epoch_table(epoch, rows))
    sink.prepare_transaction()
    sink.commit_transaction(epoch)
    sink.close()


def assert_exact(bootstrap: str, topic: str, tid: str, epochs: dict[int, int]) -> None:
    """Each epoch's rows (``{epoch: rows}``) committed once by ``tid``, with their values."""
    records = committed(bootstrap, topic, tid)
    expected = {
        epoch * 1000 + i: {
            "id": epoch * 1000 + i,
            "name": f"row-{epoch * 1000 + i}",
            "epoch": epoch,
        }
        for epoch, rows in epochs.items()
        for i in range(rows)
    }
    got = [json.loads(r.value or b"null") for r in records]
    ids = [row["id"] for row in got]
    assert len(ids) == len(set(ids)), "a record committed twice"
    assert {row["id"]: row for row in got} == expected


def markers_read(bootstrap: str, topic: str, sink_ids: list[str], epoch: int) -> None:
    """Wait until each sink's marker reads ``epoch`` (the coordinator wrote its commit)."""
    deadline = time.monotonic() + 10
    with KafkaLogClient(bootstrap) as client:
        for sink_id in sink_ids:
            while (client.committed_offset(f"laminar.{sink_id}", topic, 0) or (None,))[0] != epoch:
                assert time.monotonic() < deadline, f"{sink_id}'s marker never read {epoch}"
                time.sleep(0.01)


def test_a_scale_out_writers_tasks_reuse_their_producers(
    world: dict[str, str], opened: list[str]
) -> None:
    writer = writer_for(world)
    participants = sorted(f"{world['tid']}.p{p}" for p in range(PARTS))
    try:
        for epoch in range(3):
            assert writer.write_epoch_scaled(epoch, threads()).committed
            # Spark plans the next batch after the commit returns, by when the coordinator has
            # written the commit's markers; without a Spark here, wait for them as the next
            # batch would (one right away is refused and opens a new producer: test below)
            markers_read(world["bootstrap"], world["topic"], participants, epoch)
    finally:
        writer.close()
    assert_both_exactly_once(world["bootstrap"], world["topic"], world["dsn"], world["table"], 3)
    assert leftovers(world) == {"prepared": [], "dt_state": []}
    # one producer per participant, opened by the first epoch's tasks; the next epochs' tasks
    # took them back (the coordinator completes with the wire client: no producer of its own)
    assert sorted(opened) == participants


def test_an_undecided_epoch_is_aborted_and_written_again_by_the_kept_producer(
    kafka_bootstrap: str, topic_name: str, kafka_broker: Any, opened: list[str]
) -> None:
    kafka_broker.create_topic(topic_name, 2)
    tid = f"tid-{topic_name}"
    first = participant(kafka_bootstrap, topic_name, tid)
    prepared_and_released(first, 1, 7)  # a first attempt's rows: never committed
    retry = participant(kafka_bootstrap, topic_name, tid)
    retry.init_transactions()  # the kept producer aborts epoch 1's open transaction
    assert retry.last_committed_epoch() is None
    written(retry, 1, 5)
    assert opened == [f"{tid}.p0"]  # one producer for both attempts
    assert_exact(kafka_bootstrap, topic_name, f"{tid}.p0", {1: 5})


def test_an_epoch_the_coordinator_committed_is_skipped_and_the_next_written(
    kafka_bootstrap: str, topic_name: str, kafka_broker: Any, opened: list[str]
) -> None:
    kafka_broker.create_topic(topic_name, 2)
    tid = f"tid-{topic_name}"
    first = participant(kafka_bootstrap, topic_name, tid)
    state = prepared_and_released(first, 1, 6)
    # the coordinator's completion (scale-out commit): EndTxn with the prepared identity
    with KafkaLogClient(kafka_bootstrap) as client:
        client.end_txn(f"{tid}.p0", state.producer_id, state.producer_epoch, commit=True)
        # the next task starts once the commit's markers are written, as the next batch does
        # (right after EndTxn the coordinator is still completing it: the kept producer's abort
        # is then refused and a new producer opened, which waits for it — test below)
        deadline = time.monotonic() + 10
        while client.committed_offset(first.marker_group, topic_name, 0) is None:
            assert time.monotonic() < deadline, "the marker never became visible"
            time.sleep(0.01)
    second = participant(kafka_bootstrap, topic_name, tid)
    second.init_transactions()  # the kept producer's commit changes nothing on the brokers
    assert second.last_committed_epoch() == 1
    assert not second.begin_transaction(1)  # a replay of the committed epoch is skipped
    assert second.begin_transaction(2)
    second.write(epoch_table(2, 4))
    assert second.prepare_transaction().producer_id == state.producer_id
    second.commit_transaction(2)
    second.close()
    assert opened == [f"{tid}.p0"]
    assert_exact(kafka_bootstrap, topic_name, f"{tid}.p0", {1: 6, 2: 4})


def test_a_commit_still_completing_is_waited_for_by_a_new_producer(
    kafka_bootstrap: str, topic_name: str, kafka_broker: Any, opened: list[str]
) -> None:
    """The next start-up right after the coordinator's EndTxn: the marker may not read back
    yet, the kept producer's abort is refused (the transaction is committing), and a new
    producer's InitProducerId waits for the commit — nothing is aborted or written twice."""
    kafka_broker.create_topic(topic_name, 2)
    tid = f"tid-{topic_name}"
    for epoch in (1, 2):
        sink = participant(kafka_bootstrap, topic_name, tid)
        sink.init_transactions()
        assert sink.last_committed_epoch() == (None if epoch == 1 else 1)
        assert sink.begin_transaction(epoch)
        sink.write(epoch_table(epoch, 5))
        state = sink.prepare_transaction()
        sink.release_prepared()
        with KafkaLogClient(kafka_bootstrap) as client:
            client.end_txn(f"{tid}.p0", state.producer_id, state.producer_epoch, commit=True)
    last = participant(kafka_bootstrap, topic_name, tid)
    last.init_transactions()
    assert last.last_committed_epoch() == 2
    last.close()
    assert 1 <= len(opened) <= 3
    assert_exact(kafka_bootstrap, topic_name, f"{tid}.p0", {1: 5, 2: 5})


def test_a_kept_producer_fenced_elsewhere_is_replaced(
    kafka_bootstrap: str, topic_name: str, kafka_broker: Any, opened: list[str]
) -> None:
    kafka_broker.create_topic(topic_name, 2)
    tid = f"tid-{topic_name}"
    first = participant(kafka_bootstrap, topic_name, tid)
    prepared_and_released(first, 1, 3)
    # another worker's task for the same participant (settings of its own here: this process
    # keeps the first's for it) opens its own producer, whose InitProducerId fences the kept
    # one and aborts epoch 1
    other = kafka_participant(
        make_sink(kafka_bootstrap, topic_name, tid, producer_config={"linger.ms": 1}), 0
    )
    other.init_transactions()
    written(other, 1, 4)
    again = participant(kafka_bootstrap, topic_name, tid)
    again.init_transactions()  # the kept producer is fenced: a new one is opened
    assert again.last_committed_epoch() == 1
    written(again, 2, 2)
    assert opened == [f"{tid}.p0"] * 3
    assert_exact(kafka_bootstrap, topic_name, f"{tid}.p0", {1: 4, 2: 2})


KILLED_AFTER_THE_KEPT_END = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from laminar.protocol.distributed import kafka_participant
    from tests.integration.kafka_helpers import epoch_table, make_sink

    def participant():
        return kafka_participant(make_sink({bootstrap!r}, {topic!r}, {tid!r}), 0)

    first = participant()
    first.init_transactions()
    first.begin_transaction(1)
    first.write(epoch_table(1, 9))
    first.prepare_transaction()
    first.release_prepared()
    second = participant()
    second.init_transactions()  # the kept producer aborts epoch 1 ...
    os.kill(os.getpid(), signal.SIGKILL)  # ... and the process dies before it writes again
    """
)


def test_a_process_killed_after_the_kept_producer_ended_its_epoch_loses_nothing(
    kafka_bootstrap: str, topic_name: str, kafka_broker: Any, tmp_path: Path
) -> None:
    kafka_broker.create_topic(topic_name, 2)
    tid = f"tid-{topic_name}"
    script = tmp_path / "killed.py"
    script.write_text(
        KILLED_AFTER_THE_KEPT_END.format(
            root=str(ROOT), bootstrap=kafka_bootstrap, topic=topic_name, tid=tid
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("LAMINAR_CRASH")},
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    restarted = participant(kafka_bootstrap, topic_name, tid)
    restarted.init_transactions()
    assert restarted.last_committed_epoch() is None
    written(restarted, 1, 8)
    assert_exact(kafka_bootstrap, topic_name, f"{tid}.p0", {1: 8})


def test_a_kept_producer_no_task_takes_is_released(
    kafka_bootstrap: str, topic_name: str, kafka_broker: Any, opened: list[str]
) -> None:
    kafka_broker.create_topic(topic_name, 2)
    tid = f"tid-{topic_name}"
    first = participant(kafka_bootstrap, topic_name, tid)
    prepared_and_released(first, 1, 3)
    kept = _kept.take(_kept.key_of(first._parts()))
    assert kept is not None
    assert kept.rt.producer is not None
    _kept.keep(_kept.key_of(first._parts()), kept.rt, kept.epoch)
    assert _kept.expire(time.monotonic()) == 0  # not idle long enough
    assert _kept.expire(time.monotonic() + _kept.MAX_IDLE_S + 1) == 1
    assert kept.rt.producer is None
    assert kept.rt.consumer is None
    again = participant(kafka_bootstrap, topic_name, tid)
    again.init_transactions()  # a new producer: its InitProducerId aborts epoch 1
    assert again.last_committed_epoch() is None
    again.close()
    assert opened == [f"{tid}.p0"] * 2
    assert committed(kafka_bootstrap, topic_name, f"{tid}.p0") == []


def test_a_start_up_ending_a_kept_producer_keeps_to_one_budget(
    kafka_bootstrap: str, topic_name: str, kafka_broker: Any, opened: list[str]
) -> None:
    """The marker unreadable all along (the group coordinator moving at every read): the kept
    producer's end gives up and the new producer's start-up too, within one ``init_timeout_s``
    for both — not one each. Once the failover is over the sink starts and writes once."""
    kafka_broker.create_topic(topic_name, 2)
    tid = f"tid-{topic_name}"

    def budgeted() -> laminar.KafkaSink:
        sink = make_sink(kafka_bootstrap, topic_name, tid, init_timeout_s=3.0)
        return kafka_participant(sink, 0)

    first = budgeted()
    prepared_and_released(first, 1, 4)
    again = budgeted()
    _faults.rearm_failures("kafka.committed@1:100000")
    try:
        started = time.monotonic()
        with pytest.raises(AbortableError):
            again.init_transactions()
        elapsed = time.monotonic() - started
        injected = list(_faults.injected)
    finally:
        _faults.rearm_failures("")
    assert injected.count("kafka.committed") >= 2, injected  # the kept end's read, then the new
    # one budget: 3.0 s measured; a budget each for the kept end and the new start-up: 4.7 s
    assert elapsed <= 3.0 + 1.0, elapsed
    again.init_transactions()
    assert again.last_committed_epoch() is None
    written(again, 1, 6)
    assert_exact(kafka_bootstrap, topic_name, f"{tid}.p0", {1: 6})
