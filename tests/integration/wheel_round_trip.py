"""The round trip run by tests/integration/test_wheel_install.py inside a fresh virtualenv.

    python wheel_round_trip.py BOOTSTRAP TOPIC DSN TABLE TRANSACTIONAL_ID

Imports nothing but what the installed wheel brings (laminar and its dependencies): no `tests`
package, no repository on ``sys.path``. Writes epochs 0 and 1 through
``laminar.exactly_once(KafkaSink, PostgresSink)``, replays epoch 1 (as Spark does after a restart)
and prints one JSON object: each epoch's outcome, where laminar and its extension were imported
from, and whether a Rust toolchain was on PATH. The calling test checks both stores.
"""

from __future__ import annotations

import json
import shutil
import sys

import pyarrow as pa

import laminar
import laminar._core

ROWS_PER_EPOCH = 10


def epoch_table(epoch: int) -> pa.Table:
    """Rows with ids unique across epochs (epoch * 1000 + i); the test rebuilds the same rows."""
    ids = [epoch * 1000 + i for i in range(ROWS_PER_EPOCH)]
    return pa.table({"id": ids, "name": [f"row-{i}" for i in ids], "epoch": [epoch] * len(ids)})


def main() -> None:
    bootstrap, topic, dsn, table, transactional_id = sys.argv[1:6]
    writer = laminar.exactly_once(
        laminar.KafkaSink(
            bootstrap, topic, transactional_id, key="id", commit_timeout_s=10.0, init_timeout_s=30.0
        ),
        laminar.PostgresSink(dsn, table),
    )
    outcomes = []
    for epoch in (0, 1, 1):
        result = writer.write_epoch(epoch, epoch_table(epoch))
        outcomes.append([epoch, "committed" if result.committed else "skipped"])
    writer.close()
    print(
        json.dumps(
            {
                "outcomes": outcomes,
                "version": laminar.__version__,
                "laminar": laminar.__file__,
                "core": laminar._core.__file__,
                "toolchain": {tool: shutil.which(tool) for tool in ("cargo", "rustc", "maturin")},
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
