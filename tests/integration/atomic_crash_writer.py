"""A writer process for the atomic crash tests: ``exactly_once(KafkaSink, PostgresSink)``.

    python atomic_crash_writer.py BOOTSTRAP TOPIC DSN TABLE TID EPOCHS CHECKPOINT REDO [routed]

``routed``: the epochs are Spark's Kafka-sink shape routed over three topics (explicit partitions
and user headers on some rows, `atomic_routed_helpers`), written to both sinks.

Behaves like Spark: the CHECKPOINT file lists the epochs whose ``foreachBatch`` returned; a
(re)started writer resumes at the first epoch not listed (Spark replays the batch that did not
return). Crash points come from ``LAMINAR_CRASH_AT`` (``laminar._faults``).
``LAMINAR_TEST_EPOCH_PAUSE_S`` paces the epochs (a failover test kills brokers meanwhile);
``LAMINAR_TEST_LOG_LEVEL`` sets laminar's log level (WARNING).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import laminar
from tests.integration.atomic_helpers import make_group


def main() -> None:
    # what recovery saw and decided, timed (a failing test prints the writer's last words)
    logging.basicConfig(
        level=os.environ.get("LAMINAR_TEST_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    bootstrap, topic, dsn, table, tid, epochs, checkpoint, redo = sys.argv[1:9]
    routed = sys.argv[9:] == ["routed"]
    writer = make_group(bootstrap, topic, dsn, table, tid, redo=redo, routed=routed)
    from tests.integration.atomic_helpers import epoch_table, write_like_spark
    from tests.integration.atomic_routed_helpers import routed_table

    pause = float(os.environ.get("LAMINAR_TEST_EPOCH_PAUSE_S", "0"))
    write_like_spark(
        writer,
        checkpoint,
        int(epochs),
        (lambda epoch: routed_table(epoch, topic)) if routed else epoch_table,
        pause_s=pause,
    )


if __name__ == "__main__":
    try:
        main()
    except laminar.LaminarError as e:
        print(f"error {type(e).__name__}: {e}", flush=True)
        sys.exit(3)
