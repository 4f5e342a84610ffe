"""A writer process for the secured-cluster tests: ``exactly_once(KafkaSink, PostgresSink)`` with
the least-privileged principal and role of a `secured_helpers.World`.

    LAMINAR_TEST_SECURED='{"bootstrap": …, "topic": …, "tid": …, "dsn": …, "table": …,
        "epochs": 4, "checkpoint": …, "producer": {…}, "token": [url, client id, secret]}'
    python secured_writer.py

``producer`` holds the string settings; ``token`` (if any) becomes the ``oauth_cb`` (a user's
token provider, `secured_helpers.TokenProvider`). Behaves like Spark, as
``atomic_crash_writer.py`` does: CHECKPOINT lists the epochs whose ``foreachBatch`` returned, a
restarted writer resumes at the first one not listed; crash points from ``LAMINAR_CRASH_AT``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import laminar
from tests.integration.atomic_helpers import epoch_table, write_like_spark
from tests.integration.secured_helpers import TokenProvider


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    spec = json.loads(os.environ["LAMINAR_TEST_SECURED"])
    producer = dict(spec["producer"])
    if spec.get("token"):
        producer["oauth_cb"] = TokenProvider(*spec["token"])
    kafka = laminar.KafkaSink(
        spec["bootstrap"],
        spec["topic"],
        spec["tid"],
        key="id",
        producer_config=producer,
        commit_timeout_s=10.0,
        init_timeout_s=15.0,
    )
    writer = laminar.exactly_once(
        kafka, laminar.PostgresSink(spec["dsn"], spec["table"]), redo="log", retry_backoff_s=0.1
    )
    print(f"writer {writer!r}", file=sys.stderr, flush=True)
    write_like_spark(writer, spec["checkpoint"], int(spec["epochs"]), epoch_table)


if __name__ == "__main__":
    try:
        main()
    except laminar.LaminarError as e:
        print(f"error {type(e).__name__}: {e}", flush=True)
        sys.exit(3)
