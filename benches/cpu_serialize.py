"""CPU time per row of the encoders, immune to other processes competing for the cores.

pytest-benchmark measures wall-clock time, which on a shared 2-core machine moves by 2x from run to
run. The encoders run on the calling thread (the GIL is released, the thread is the same), so
``time.thread_time()`` around a call is the CPU the call costs on one core.

    python benches/cpu_serialize.py [ROWS]
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import laminar
from serialize_data import PG_COLUMNS, make_batch


def best_cpu(fn: Callable[[], object], rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    table = make_batch(rows)

    def stream_loop() -> None:
        for _pair in laminar.iter_kafka(table):
            pass

    cases: dict[str, Callable[[], object]] = {
        "encode_kafka json (list of bytes)": lambda: laminar.encode_kafka(table),
        "iter_kafka json, consumed": stream_loop,
        "encode_pg_copy": lambda: laminar.encode_pg_copy(table, PG_COLUMNS),
    }
    report = {}
    for name, fn in cases.items():
        seconds = best_cpu(fn)
        report[name] = {"cpu_s": round(seconds, 4), "rows_per_s": round(rows / seconds)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
