"""A writer process for the SIGKILL tests: writes epochs with ``exactly_once(KafkaSink)``.

    python kafka_crash_writer.py BOOTSTRAP TOPIC TRANSACTIONAL_ID EPOCHS

Crash points come from ``LAMINAR_CRASH_AT`` (see ``laminar._faults``). Every epoch is written,
so a restart replays the epochs already committed (they must be skipped).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import laminar
from tests.integration.kafka_helpers import epoch_table, make_sink


def main() -> None:
    bootstrap, topic, transactional_id, epochs = sys.argv[1:5]
    writer = laminar.exactly_once(make_sink(bootstrap, topic, transactional_id))
    for epoch in range(int(epochs)):
        result = writer.write_epoch(epoch, epoch_table(epoch))
        print(f"epoch {epoch}: {'committed' if result.committed else 'skipped'}", flush=True)
    writer.close()


if __name__ == "__main__":
    main()
