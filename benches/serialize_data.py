"""The benchmark batch: int64, string, decimal(18,2), timestamp[us, UTC], bool, float64."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def make_batch(rows: int, seed: int = 7) -> pa.Table:
    """A Spark-like micro-batch built from numpy buffers (fast to build, realistic values)."""
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64) * 7919 + 1_000_000
    names = pa.array([f"customer-{i % 100_003:06d}" for i in range(rows)], pa.string())
    cents = rng.integers(-10_000_000, 100_000_000, size=rows, dtype=np.int64)
    # decimal128 is 16 little-endian bytes: the int64 and its sign extension.
    dec_words = np.empty((rows, 2), dtype=np.int64)
    dec_words[:, 0] = cents
    dec_words[:, 1] = cents >> 63
    amounts = pa.Array.from_buffers(
        pa.decimal128(18, 2), rows, [None, pa.py_buffer(dec_words.tobytes())]
    )
    start = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z in µs
    ts = start + rng.integers(0, 86_400_000_000 * 30, size=rows, dtype=np.int64)
    flags = rng.random(rows) < 0.5
    scores = rng.random(rows) * 1000.0
    return pa.table(
        {
            "id": pa.array(ids),
            "name": names,
            "amount": amounts,
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "flag": pa.array(flags),
            "score": pa.array(scores),
        }
    )


PG_DDL = "(id int8, name text, amount numeric(18, 2), ts timestamptz, flag bool, score float8)"
PG_COLUMNS = [
    ("id", "int8", -1),
    ("name", "text", -1),
    ("amount", "numeric", (18 << 16 | 2) + 4),
    ("ts", "timestamptz", -1),
    ("flag", "bool", -1),
    ("score", "float8", -1),
]


# The peer comparisons' rows (bench_peers.py): five columns, numeric and timestamptz among them.
PEER_DDL = "(id int8, name text, amount numeric(18, 2), ts timestamptz, score float8)"
PEER_COLUMNS = [c for c in PG_COLUMNS if c[0] != "flag"]


def make_peer_batch(rows: int) -> pa.Table:
    """`make_batch` without its bool column: the same rows for Laminar and every peer."""
    return make_batch(rows).drop_columns(["flag"])
