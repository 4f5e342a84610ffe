"""``query.stop()`` in the middle of a batch on a Spark standalone cluster leaves nothing prepared
and no Kafka transaction open — with no manual step (docs/spark.md, "Stopping a query").

Spark answers a stop by cancelling the batch's job and calling the writer's ``abort``, and kills
the tasks' Python workers only later (the executor's monitor, ``spark.python.task.killTimeout``
after the stop; the session's cluster sets 10 s, Spark's default is 2 s plus a poll of up to
2 s). A worker that was still starting when the query stopped — here: sleeping before it
connects — then runs its task after the abort. Before the abort fenced its batch, that task
created the batch's record afresh and prepared its participants (a PostgreSQL ``PREPARE``d
transaction holding its locks, a Kafka transaction left open) until the query's next run or a
manual ``resolve_stopped``; now it finds the batch fenced and writes nothing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.e2e.cluster_helpers import (
    Leftovers,
    committed_batches,
    done_statuses,
    judge,
    leftovers,
    make_pipeline,
    marks,
    stop_query,
)
from tests.e2e.spark_helpers import stop, wait_for
from tests.fixtures import CLUSTER_ENV

#: The stores must be clean when ``query.stop()`` returns, and stay so until the stopped batch's
#: task processes ended (Spark kills them within killTimeout + 2 s: this bound is generous).
TASKS_END_WITHIN_S = 60.0
LATE_S = 4.0


def test_a_plain_stop_mid_batch_leaves_nothing_prepared(
    cluster_client: Any, kafka_broker: Any, pg_dsn: str, unique_name: Any, tmp_path: Path
) -> None:
    p = make_pipeline(
        kafka_broker,
        pg_dsn,
        CLUSTER_ENV.worker_dsn,
        unique_name,
        tmp_path,
        rows=400,
        parts=2,
        plan={"late_batches": [1], "late_s": LATE_S, "sleep_s": 0.05},
    )
    query = p.start(cluster_client)
    try:
        wait_for(
            lambda: {m.part for m in marks(p.marks, "start") if m.batch == 1} == {0, 1},
            query=query,
            timeout=240,
            what="both tasks of batch 1 started (and sleeping before they connect)",
            interval=0.1,
        )
        late = [m for m in marks(p.marks, "start") if m.batch == 1]
        stopped_in = stop_query(query)
    finally:
        stop(query)
    # from here on, no manual step: only looks
    dirty: list[tuple[float, Leftovers]] = []
    looks = 0
    since = time.monotonic()
    while True:
        left = leftovers(p)
        looks += 1
        if not left.clean:
            dirty.append((round(time.monotonic() - since, 1), left))
        running = [m for m in late if Path(f"/proc/{m.pid}").exists()]
        if not running:
            break
        assert time.monotonic() - since < TASKS_END_WITHIN_S, f"the batch's workers run: {running}"
        time.sleep(0.5)
    final = leftovers(p, settle_s=3.0)
    found = (
        f"after query.stop(), with no manual step: {len(dirty)} of {looks} looks found leftovers "
        f"(first at +{dirty[0][0] if dirty else '-'} s); at the end: {final}"
    )
    assert not dirty, found
    assert final.clean, found
    # the late workers did run their task after the stop, and wrote nothing
    statuses = {m.part: done_statuses(p.marks, m) for m in late}
    assert statuses == {0: ["skipped"], 1: ["skipped"]}, statuses
    print(f"query.stop() returned after {stopped_in:.1f} s; {looks} looks, all clean")

    # the restart from the checkpoint writes batch 1 again: every row once
    query = p.start(cluster_client)
    try:
        wait_for(lambda: committed_batches(p.checkpoint) >= 3, query=query, timeout=240, what="3")
    finally:
        stop_query(query)
    rows = judge(p)
    print(f"rows: {rows}")
