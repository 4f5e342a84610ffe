"""A scale-out writer process for the crash tests: ``exactly_once(KafkaSink, PostgresSink,
scale_out=True)``, its partition tasks run in child processes (like Spark's Python workers).

    python scaleout_crash_writer.py BOOTSTRAP TOPIC DSN TABLE TID EPOCHS CHECKPOINT PARTS
    python scaleout_crash_writer.py --task        (a child: pickled (task, part, rows) on stdin)

Behaves like Spark: the CHECKPOINT file lists the epochs whose ``foreachBatch`` returned; a
(re)started writer resumes at the first epoch not listed. A task that dies is retried once, as a
new attempt (Spark's task retry). ``LAMINAR_CRASH_AT`` arms crash points in this process;
``SCALEOUT_TASK_CRASH_AT`` arms them in the *first* attempt of task 1 of epoch 1. An epoch's tasks
run at once, each in its own child process.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import laminar
from laminar.protocol.scaleout import ParticipantResult, ScaleOutTask
from tests.integration.atomic_helpers import epoch_table, make_group

TASK_CRASH_VAR = "SCALEOUT_TASK_CRASH_AT"


def partition(epoch: int, part: int, parts: int) -> Any:
    """Partition ``part`` of the epoch's rows (row i goes to partition i % parts)."""
    table = epoch_table(epoch)
    return table.take([i for i in range(table.num_rows) if i % parts == part])


def run_task(task: ScaleOutTask, part: int, parts: int, crash_at: str | None) -> list[Any] | None:
    """One task attempt in a child process; None if it died."""
    env = dict(os.environ)
    env.pop("LAMINAR_CRASH_AT", None)
    env.pop(TASK_CRASH_VAR, None)
    if crash_at:
        env["LAMINAR_CRASH_AT"] = crash_at
    payload = pickle.dumps((task, part, partition(task.epoch, part, parts)))
    done = subprocess.run(
        [sys.executable, __file__, "--task"],
        input=payload,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        sys.stderr.write(f"task {part} attempt died ({done.returncode}): {done.stderr[-500:]!r}\n")
        return None
    return [ParticipantResult.from_row(r) for r in json.loads(done.stdout)]


def main() -> None:
    bootstrap, topic, dsn, table, tid, epochs, checkpoint, parts_arg = sys.argv[1:9]
    parts = int(parts_arg)
    done = Path(checkpoint)
    finished = [int(x) for x in done.read_text().split()] if done.exists() else []
    writer = make_group(bootstrap, topic, dsn, table, tid, scale_out=True)
    task_crash = os.environ.get(TASK_CRASH_VAR)

    for epoch in range(max(finished, default=-1) + 1, int(epochs)):

        def run(task: ScaleOutTask, epoch: int = epoch) -> list[Any]:
            def attempts(part: int) -> list[Any]:
                crash = task_crash if epoch == 1 and part == 1 else None
                got = run_task(task, part, parts, crash)
                if got is None:  # Spark retries a failed task as a new attempt
                    got = run_task(task, part, parts, None)
                if got is None:
                    raise RuntimeError(f"task {part} failed twice")
                return got

            # the tasks run at once, as Spark's do
            with ThreadPoolExecutor(parts) as pool:
                return [r for got in pool.map(attempts, range(parts)) for r in got]

        result = writer.write_epoch_scaled(epoch, run)
        with done.open("a") as f:
            f.write(f"{epoch}\n")
        print(f"epoch {epoch}: {'committed' if result.committed else 'skipped'}", flush=True)
    writer.close()
    print("done", flush=True)


def task_main() -> None:
    task, part, rows = pickle.loads(sys.stdin.buffer.read())
    results = task.write_partition(part, rows.to_batches())
    print(json.dumps([r.row() for r in results]))


if __name__ == "__main__":
    try:
        if sys.argv[1:2] == ["--task"]:
            task_main()
        else:
            main()
    except laminar.LaminarError as e:
        print(f"error {type(e).__name__}: {e}", flush=True)
        sys.exit(3)
