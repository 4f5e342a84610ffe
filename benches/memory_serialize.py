"""Peak extra memory of the encoders and bytes held per buffered Kafka event, measured for real.

Method: each case runs in a fresh process. The batch is built, the encoders warmed up on a small
slice and free heap memory returned to the OS (``malloc_trim``); then the kernel's peak-RSS mark is
reset (``echo 5 > /proc/self/clear_refs`` resets VmHWM)
and RSS is read. After the encode, VmHWM - RSS(before) is the peak extra memory (Rust buffers,
Python objects, allocator slack: everything the process touched), and RSS(after) - RSS(before) is
what the result holds. Per-event overhead = (held - payload bytes) / rows.

    python benches/memory_serialize.py ROWS            # all cases, one JSON report on stdout
    python benches/memory_serialize.py ROWS CASE   # one case of CASES below
"""

from __future__ import annotations

import ctypes
import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

CASES = ("kafka_json", "kafka_json_keyed", "kafka_stream_keyed", "pg_copy")


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class StreamResult:
    """Bytes streamed by a consumed KafkaRecordStream (it holds nothing afterwards)."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes


def run_case(rows: int, case: str) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).parent))
    import laminar
    from serialize_data import PG_COLUMNS, make_batch

    table = make_batch(rows)

    def encode(t: Any) -> Any:
        if case == "kafka_json":
            return laminar.encode_kafka(t)
        if case == "kafka_json_keyed":
            return laminar.encode_kafka(t, key="id")
        if case == "kafka_stream_keyed":
            # What a produce loop over iter_kafka holds: the pair in hand; bytes are counted as
            # they are consumed (and dropped, as produce copies them).
            stream = laminar.iter_kafka(t, key="id")
            total = 0
            for key, value in stream:
                total += len(key or b"") + len(value or b"")
            return StreamResult(total)
        return laminar.encode_pg_copy(t, PG_COLUMNS)

    encode(table.slice(0, 10_000))  # warm up code paths and allocator arenas
    gc.collect()
    # Give the memory freed while building the batch back to the OS, so that RSS counts only what
    # is in use and the encoder cannot hide its allocations in already-resident free memory.
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = _status("VmRSS")
    _reset_peak()
    out = encode(table)
    peak = _status("VmHWM")
    held = _status("VmRSS") - before
    payload = out.total_bytes
    # A consumed stream holds no payload: what stays (if anything) is all overhead.
    held_payload = 0 if isinstance(out, StreamResult) else payload
    return {
        "rows": rows,
        "payload_bytes": payload,
        "peak_extra_bytes": peak - before,
        "peak_extra_over_payload": round((peak - before) / payload, 3),
        "held_bytes": held,
        "held_over_payload": round(held / payload, 3),
        "overhead_bytes_per_event": round((held - held_payload) / rows, 1),
    }


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    if len(sys.argv) > 2:
        print(json.dumps(run_case(rows, sys.argv[2])))
        return
    report = {}
    for case in CASES:
        out = subprocess.run(
            [sys.executable, __file__, str(rows), case], capture_output=True, text=True, check=True
        )
        report[case] = json.loads(out.stdout)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
