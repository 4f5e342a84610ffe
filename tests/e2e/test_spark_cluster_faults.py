"""``writeStream.format("laminar")`` on a Spark standalone cluster (a master, two workers, their
executors and a Spark Connect server, each its own JVM: `laminar.embedded.SparkCluster`) into
Kafka and PostgreSQL atomically, while executor JVMs and tasks' Python workers are SIGKILLed in
the middle of a task, then stopped (a plain ``query.stop()`` mid-batch), restarted from its
checkpoint and killed again (and a worker restarted under a task): every row exactly once in
both stores with its exact value (Kafka judged by its committed records, control batches
replayed), nothing prepared, no transaction open.

"Mid-task" is made certain, not left to timing: each task sleeps after each Arrow batch it
writes (25 rows), and leaves a marker once its first one is written (its Kafka transaction is
open, its COPY under way); the test kills the Python worker that left it, or the executor JVM
whose process tree holds that worker, while the worker runs, and checks afterwards that the
killed attempt never returned.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from laminar.embedded import SparkCluster
from tests.e2e.cluster_helpers import (
    Mark,
    Pipeline,
    committed_batches,
    done_statuses,
    judge,
    leftovers,
    make_pipeline,
    marks,
    stop_query,
    wait_for_new_mid_task,
)
from tests.e2e.spark_helpers import alive, stop, wait_for
from tests.fixtures import CLUSTER_ENV

#: The kills of each run, in order, one per batch.
RUN_1 = ("executor", "python worker", "executor", "python worker")
RUN_2 = ("python worker", "worker restart", "executor")


class Killer:
    """Kills a task attempt that is mid-task — its Python worker, or its executor JVM — once per
    batch, and remembers what it killed."""

    def __init__(self, cluster: SparkCluster, pipeline: Pipeline) -> None:
        self.cluster = cluster
        self.p = pipeline
        self.seen: set[tuple[int, int, int, int]] = set()
        self.killed: list[tuple[str, Mark]] = []
        self.counts: Counter[str] = Counter()

    def kill(self, kind: str, query: Any) -> Mark:
        # a full cluster first (the master replaces a killed executor), then a batch not hit yet
        self.cluster.wait_for_executors(2, timeout=240)
        after = max((m.batch for _, m in self.killed), default=0) + 1
        mark = wait_for_new_mid_task(self.p, self.seen, query, min_batch=after)
        self.seen.add(mark.task)
        if kind == "executor":
            victim = self.cluster.kill_executor(mark.pid)  # the JVM whose tree holds the worker
            assert not victim.alive()
            # its Python daemon shuts its workers down once the JVM is gone
            wait_for(lambda: not alive(mark.pid), timeout=60, what="the worker to follow")
        elif kind == "worker restart":
            executor = self.cluster.executor_of(mark.pid)
            assert executor is not None, f"{mark} runs on no executor"
            self.cluster.restart_worker(executor.worker)  # its executors end with it
            assert not executor.alive()
            assert not alive(mark.pid)
        else:
            self.cluster.kill_python_worker(mark.pid)
        self.counts[kind] += 1
        self.killed.append((kind, mark))
        return mark

    def check_killed_mid_task(self) -> None:
        """Every killed attempt never returned (no ``done`` marker): it died mid-task."""
        for kind, mark in self.killed:
            assert done_statuses(self.p.marks, mark) is None, f"{kind} kill of {mark} was late"


def test_executors_and_python_workers_sigkilled_mid_task_then_stopped_and_restarted(
    spark_cluster: SparkCluster,
    cluster_client: Any,
    kafka_broker: Any,
    pg_dsn: str,
    unique_name: Any,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    p = make_pipeline(
        kafka_broker,
        pg_dsn,
        CLUSTER_ENV.worker_dsn,
        unique_name,
        tmp_path,
        rows=800,
        parts=4,
        plan={"sleep_s": 0.25},
    )
    killer = Killer(spark_cluster, p)

    query = p.start(cluster_client)
    try:
        for kind in RUN_1:
            killer.kill(kind, query)
        # a plain stop in the middle of a task: nothing left behind, no manual step
        spark_cluster.wait_for_executors(2, timeout=240)
        after = max(m.batch for _, m in killer.killed) + 1
        wait_for_new_mid_task(p, killer.seen, query, min_batch=after)
        stop_1 = stop_query(query)
    finally:
        stop(query)
    left = leftovers(p)
    assert left.clean, f"right after query.stop() returned: {left}"
    batches_1 = committed_batches(p.checkpoint)

    query = p.start(cluster_client)  # the restart, from the checkpoint
    try:
        for kind in RUN_2:
            killer.kill(kind, query)
        target = max(m.batch for _, m in killer.killed) + 2
        wait_for(
            lambda: committed_batches(p.checkpoint) >= target,
            query=query,
            timeout=300,
            what=f"{target} batches",
        )
        stop_2 = stop_query(query)
    finally:
        stop(query)

    killer.check_killed_mid_task()
    rows = judge(p)
    # each killed task was run again by a later attempt that returned
    returned = {(m.batch, m.part, m.attempt) for m in marks(p.marks, "done")}
    for kind, m in killer.killed:
        later = [a for b, part, a in returned if (b, part) == (m.batch, m.part) and a > m.attempt]
        assert later, f"the task of the {kind} kill {m} was never retried to its end"
    print(
        f"\nSpark cluster faults: {killer.counts['executor']} executor kills, "
        f"{killer.counts['python worker']} Python worker kills, "
        f"{killer.counts['worker restart']} worker restart, {rows} rows in "
        f"{committed_batches(p.checkpoint)} batches ({batches_1} before the stop); "
        f"query.stop() took {stop_1:.1f} s and {stop_2:.1f} s; "
        f"{time.monotonic() - started:.0f} s in all"
    )
    assert killer.counts == Counter({"executor": 3, "python worker": 3, "worker restart": 1})
