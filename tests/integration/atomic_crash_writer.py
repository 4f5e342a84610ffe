"""A writer process for the atomic crash tests: ``exactly_once(KafkaSink, PostgresSink)``.

    python atomic_crash_writer.py BOOTSTRAP TOPIC DSN TABLE TID EPOCHS CHECKPOINT REDO

Behaves like Spark: the CHECKPOINT file lists the epochs whose ``foreachBatch`` returned; a
(re)started writer resumes at the first epoch not listed (Spark replays the batch that did not
return). Crash points come from ``LAMINAR_CRASH_AT`` (``laminar._faults``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import laminar
from tests.integration.atomic_helpers import make_group


def main() -> None:
    bootstrap, topic, dsn, table, tid, epochs, checkpoint, redo = sys.argv[1:9]
    done = Path(checkpoint)
    finished = [int(x) for x in done.read_text().split()] if done.exists() else []
    writer = make_group(bootstrap, topic, dsn, table, tid, redo=redo)
    from tests.integration.atomic_helpers import epoch_table

    for epoch in range(max(finished, default=-1) + 1, int(epochs)):
        result = writer.write_epoch(epoch, epoch_table(epoch))
        with done.open("a") as f:
            f.write(f"{epoch}\n")
        print(f"epoch {epoch}: {'committed' if result.committed else 'skipped'}", flush=True)
    writer.close()
    print("done", flush=True)


if __name__ == "__main__":
    try:
        main()
    except laminar.LaminarError as e:
        print(f"error {type(e).__name__}: {e}", flush=True)
        sys.exit(3)
