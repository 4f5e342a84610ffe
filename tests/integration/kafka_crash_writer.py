"""A writer process for the SIGKILL tests: writes epochs with ``exactly_once(KafkaSink)``.

    python kafka_crash_writer.py BOOTSTRAP TOPIC TRANSACTIONAL_ID EPOCHS [spark]

With ``spark``, each epoch is Spark's Kafka-sink shape routed to two topics with explicit
partitions and headers (`kafka_shape_helpers.shape_table`).

Crash points come from ``LAMINAR_CRASH_AT`` (see ``laminar._faults``). Every epoch is written,
so a restart replays the epochs already committed (they must be skipped).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import laminar
from tests.integration.kafka_helpers import epoch_table, make_sink
from tests.integration.kafka_shape_helpers import shape_table


def main() -> None:
    bootstrap, topic, transactional_id, epochs = sys.argv[1:5]
    spark = sys.argv[5:6] == ["spark"]
    sink = (
        make_sink(bootstrap, topic, transactional_id, key=None)
        if spark
        else make_sink(bootstrap, topic, transactional_id)
    )
    writer = laminar.exactly_once(sink)
    for epoch in range(int(epochs)):
        table = shape_table(epoch, topic) if spark else epoch_table(epoch)
        result = writer.write_epoch(epoch, table)
        print(f"epoch {epoch}: {'committed' if result.committed else 'skipped'}", flush=True)
    writer.close()


if __name__ == "__main__":
    main()
