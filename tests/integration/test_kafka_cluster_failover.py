"""The atomic pair on a replicated Apache Kafka cluster (3 KRaft nodes, replication factor 3,
``min.insync.replicas=2``) whose brokers are SIGKILLed and restarted: a failover is ridden out
— never a `FatalError`, never a stopped writer — and every row lands once in each store with its
exact value (Kafka judged by its committed records, control batches replayed), with nothing left
prepared in PostgreSQL and no Kafka transaction left open.

- A writer (re)started while the broker holding a role is down — killed, not yet fenced by the
  controller: the transaction coordinator of its transactional id, the coordinator of its marker
  group, the leader of a partition — starts and writes (it failed within a second with
  ``FatalError: could not read the marker …: Connection refused``).
- An acknowledged commit survives the SIGKILL of its transaction coordinator right after the
  commit returned (a single broker was seen to lose it: its transaction state is replicated
  here, min ISR 2).
- Chaos: a writer process writes epochs while brokers of each role are SIGKILLed and restarted
  at random moments and the writer itself is SIGKILLed and restarted (as Spark restarts a
  query), then the stores are judged.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import laminar
from tests.integration.atomic_helpers import (
    WRITER,
    assert_exact_values,
    assert_nothing_open,
    create_table,
    epoch_table,
    make_group,
)
from tests.integration.kafka_fill import settled_committed

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

ROLES = ("transaction coordinator", "marker group coordinator", "partition leader")


def holder(cluster: Any, role: str, tid: str, topic: str) -> int:
    """The node that holds ``role`` for the sink ``tid`` writing ``topic`` now."""
    if role == "transaction coordinator":
        return int(cluster.transaction_coordinator(tid))
    if role == "marker group coordinator":
        return int(cluster.group_coordinator(f"laminar.{tid}"))
    return int(cluster.leader(topic, 0))


def cluster_group(cluster: Any, topic: str, dsn: str, table: str, tid: str) -> Any:
    """The atomic pair with the bounds a failover needs: the controller fences a dead broker
    after broker.session.timeout.ms (6 s here), then moves its roles."""
    kafka = laminar.KafkaSink(
        cluster.bootstrap_servers,
        topic,
        tid,
        key="id",
        commit_timeout_s=15.0,
        init_timeout_s=30.0,
    )
    return laminar.exactly_once(kafka, laminar.PostgresSink(dsn, table), retry_backoff_s=0.2)


@pytest.mark.parametrize("role", ROLES)
def test_a_writer_started_while_a_role_holder_is_down_writes_once(
    kafka_cluster: Any,
    pg_dsn: str,
    topic_name: str,
    table_name: str,
    unique_name: Any,
    clean_prepared_xacts: str,
    role: str,
) -> None:
    kafka_cluster.create_topic(topic_name, partitions=3)
    create_table(pg_dsn, table_name)
    tid = unique_name("tx")
    bootstrap = kafka_cluster.bootstrap_servers
    first = cluster_group(kafka_cluster, topic_name, pg_dsn, table_name, tid)
    first.write_epoch(0, epoch_table(0))
    first.close()

    victim = holder(kafka_cluster, role, tid, topic_name)
    kafka_cluster.kill(victim)
    began = time.monotonic()
    restarted = cluster_group(kafka_cluster, topic_name, pg_dsn, table_name, tid)
    restarted.write_epoch(1, epoch_table(1))
    restarted.write_epoch(2, epoch_table(2))
    took = time.monotonic() - began
    restarted.close()
    print(f"{role} (node {victim}) down: the restarted writer wrote 2 epochs in {took:.1f} s")

    kafka_cluster.start_node(victim)
    kafka_cluster.wait_in_sync()
    again = cluster_group(kafka_cluster, topic_name, pg_dsn, table_name, tid)
    again.write_epoch(3, epoch_table(3))
    again.write_epoch(2, epoch_table(2))  # a replay: skipped
    again.close()
    assert_exact_values(bootstrap, topic_name, pg_dsn, table_name, epochs=4)
    assert_nothing_open(bootstrap, topic_name, pg_dsn)


def test_an_acknowledged_commit_survives_its_coordinator_killed_right_after(
    kafka_cluster: Any, topic_name: str, unique_name: Any
) -> None:
    """Defect 6 of the production-topology issue, on a replicated cluster: the transaction
    coordinator is SIGKILLed right after ``commit_transaction`` returned, before (or while) it
    writes the commit markers. Its transaction log is replicated (min ISR 2): the coordinator
    that takes over completes the commit. The restarted writer — its ``init_transactions`` waits
    for whatever the transactional id had in flight — reads that epoch as the last committed,
    and every record of it is committed once. Two rounds.

    (A reader that opens no producer can read the previous epoch for a few seconds: until the new
    coordinator writes the markers, the commit is pending, and a pending marker is never read.
    That is a late answer, never a lost commit, and a writer never decides on it.)"""
    kafka_cluster.create_topic(topic_name, partitions=3)
    tid = unique_name("tx")
    bootstrap = kafka_cluster.bootstrap_servers
    for epoch in range(2):
        sink = laminar.KafkaSink(
            bootstrap, topic_name, tid, key="id", commit_timeout_s=15.0, init_timeout_s=30.0
        )
        writer = laminar.exactly_once(sink)
        writer.write_epoch(epoch, epoch_table(epoch))
        victim = kafka_cluster.transaction_coordinator(tid)
        kafka_cluster.kill(victim)  # right after the acknowledged commit
        writer.close()
        restarted = laminar.KafkaSink(bootstrap, topic_name, tid, init_timeout_s=30.0)
        restarted.init_transactions()
        assert restarted.last_committed_epoch() == epoch, f"round {epoch}: the commit was lost"
        restarted.close()
        kafka_cluster.start_node(victim)
        kafka_cluster.wait_in_sync()
    records = settled_committed(bootstrap, topic_name)
    got = Counter((json.loads(r.value)["id"], json.loads(r.value)["name"]) for r in records)
    want = {(row["id"], row["name"]) for e in range(2) for row in epoch_table(e).to_pylist()}
    assert set(got) == want, "committed records differ from the input"
    assert max(got.values()) == 1, "a record committed twice"


class Chaos:
    """Kills a broker of a chosen role (one at a time: with min ISR 2 a second one down would
    stop every write, which no client can ride out) and restarts it after a few seconds, and
    SIGKILLs the writer process now and then; counts what it did."""

    def __init__(self, cluster: Any, tid: str, topic: str, seed: int) -> None:
        self.cluster, self.tid, self.topic = cluster, tid, topic
        self.random = random.Random(seed)
        self.stop = threading.Event()
        self.broker_kills: Counter[str] = Counter()
        self.writer_kills = 0
        self.writer: subprocess.Popen[str] | None = None
        self.errors: list[str] = []

    def run_brokers(self) -> None:
        try:
            turn = 0
            while not self.stop.wait(self.random.uniform(2.0, 5.0)):
                role = ROLES[turn % len(ROLES)]  # every role in turn, at random moments
                turn += 1
                node = holder(self.cluster, role, self.tid, self.topic)
                self.cluster.kill(node)
                self.broker_kills[role] += 1
                self.stop.wait(self.random.uniform(1.0, 8.0))
                self.cluster.start_node(node)
                self.cluster.wait_in_sync(timeout=180)
        except Exception as e:  # reported by the test
            self.errors.append(f"{type(e).__name__}: {e}")

    def run_writer_kills(self) -> None:
        while not self.stop.wait(self.random.uniform(6.0, 12.0)):
            writer = self.writer
            if writer is not None and writer.poll() is None:
                writer.send_signal(signal.SIGKILL)
                self.writer_kills += 1


def test_the_atomic_pair_rides_out_brokers_and_writers_killed_at_random(
    kafka_cluster: Any,
    pg_dsn: str,
    topic_name: str,
    table_name: str,
    unique_name: Any,
    clean_prepared_xacts: str,
    tmp_path: Path,
) -> None:
    epochs = int(os.environ.get("LAMINAR_CHAOS_EPOCHS", "45"))
    seed = int(os.environ.get("LAMINAR_CHAOS_SEED", str(time.time_ns() % 10_000)))
    kafka_cluster.create_topic(topic_name, partitions=3)
    create_table(pg_dsn, table_name)
    tid = unique_name("tx")
    bootstrap = kafka_cluster.bootstrap_servers
    # the first epoch before any chaos: the roles exist (the marker group, the transactional id)
    first = make_group(bootstrap, topic_name, pg_dsn, table_name, tid)
    first.write_epoch(0, epoch_table(0))
    first.close()  # its clients would log every failover of the chaos until the session ends
    checkpoint = tmp_path / "checkpoint"
    checkpoint.write_text("0\n")
    env = {**os.environ, "LAMINAR_TEST_EPOCH_PAUSE_S": "0.4", "LAMINAR_TEST_LOG_LEVEL": "INFO"}
    env.pop("LAMINAR_CRASH_AT", None)
    argv = [sys.executable, str(WRITER), bootstrap, topic_name, pg_dsn, table_name, tid]
    argv += [str(epochs), str(checkpoint), "replay"]

    chaos = Chaos(kafka_cluster, tid, topic_name, seed)
    threads = [
        threading.Thread(target=chaos.run_brokers, daemon=True),
        threading.Thread(target=chaos.run_writer_kills, daemon=True),
    ]
    for t in threads:
        t.start()
    exits: Counter[str] = Counter()
    outputs: list[str] = []
    deadline = time.monotonic() + 420
    try:
        while time.monotonic() < deadline:
            chaos.writer = subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            out, _ = chaos.writer.communicate(timeout=max(deadline - time.monotonic(), 1))
            outputs.append(out[-6000:])
            code = chaos.writer.returncode
            if code == 0 and "done" in out:
                break
            kind = "SIGKILL" if code == -signal.SIGKILL else out.strip().splitlines()[-1][:160]
            exits[kind] += 1
            if "FatalError" in kind or "ConfigError" in kind:
                # the last runs' own words (their warnings say what recovery saw and decided)
                story = "\n---\n".join(outputs[-3:])
                raise AssertionError(f"the writer stopped for a failover: {kind}\n{story}")
        else:
            raise AssertionError(f"the writer did not finish within 420 s: {outputs[-1]}")
    finally:
        chaos.stop.set()
        for t in threads:
            t.join(timeout=240)
    assert not chaos.errors, chaos.errors
    print(
        f"seed {seed}: {epochs} epochs, {epochs * 20} rows; broker kills "
        f"{dict(chaos.broker_kills)}; writer kills {chaos.writer_kills}; writer exits "
        f"{dict(exits)}"
    )
    assert sum(chaos.broker_kills.values()) >= 3, "the chaos killed too few brokers to judge"
    kafka_cluster.ensure_all_running()
    assert_exact_values(bootstrap, topic_name, pg_dsn, table_name, epochs=epochs)
    assert_nothing_open(bootstrap, topic_name, pg_dsn)
    assert not [e for e in exits if "FatalError" in e], exits
