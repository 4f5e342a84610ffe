"""Encoding overlapped with sending: the bounded pipeline (`laminar.postgres._encode_ahead`) and the
chunk-by-chunk COPY stream it drives (`laminar._core.iter_pg_copy`), byte-identical to
`encode_pg_copy`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

import laminar
from laminar._core import iter_pg_copy
from laminar.errors import DataError
from laminar.postgres._encode_ahead import encode_ahead


class Counted:
    """An iterator of 0..n-1 that records how many items exist at once (made, not released)."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at = n, fail_at
        self.made = 0
        self.released = 0
        self.most_alive = 0
        self.threads: set[str] = set()

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        if self.made == self.n:
            raise StopIteration
        if self.made == self.fail_at:
            raise ValueError(f"item {self.made} cannot be made")
        self.threads.add(threading.current_thread().name)
        time.sleep(0.002)
        self.made += 1
        self.most_alive = max(self.most_alive, self.made - self.released)
        return self.made - 1


@pytest.mark.parametrize("overlap", [True, False])
def test_items_come_in_order_with_at_most_two_alive(overlap: bool) -> None:
    source = Counted(12)
    got = []
    for item in encode_ahead(source, overlap=overlap):
        got.append(item)
        time.sleep(0.003)  # the caller "sends" item n while n+1 is made
        source.released += 1
    assert got == list(range(12))
    assert source.most_alive <= 2
    if overlap:
        assert any(name.startswith("laminar-encode") for name in source.threads)
    else:
        assert source.threads == {threading.current_thread().name}


def test_an_error_is_raised_where_its_item_would_come() -> None:
    ahead = encode_ahead(Counted(10, fail_at=3))
    assert [next(ahead), next(ahead), next(ahead)] == [0, 1, 2]
    with pytest.raises(ValueError, match="item 3 cannot be made"):
        next(ahead)


def test_closing_early_waits_for_the_item_in_flight_and_stops() -> None:
    source = Counted(100)
    ahead = encode_ahead(source)
    assert next(ahead) == 0
    ahead.close()
    made = source.made
    time.sleep(0.02)
    assert source.made == made <= 2  # nothing is made after close returned
    assert not any(t.name.startswith("laminar-encode") for t in threading.enumerate())


def test_an_empty_source_yields_nothing() -> None:
    assert list(encode_ahead(iter(()))) == []


def _rows(n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "name": pa.array([f"row-{i:08d}-" + "x" * (i % 50) for i in range(n)], pa.string()),
        }
    )


COLUMNS = [("id", "int8", -1), ("name", "text", -1)]


@pytest.mark.parametrize("rows", [0, 1, 40_000])
def test_the_copy_stream_is_the_buffer_chunk_for_chunk(rows: int) -> None:
    table = _rows(rows)
    buffer = laminar.encode_pg_copy(table, COLUMNS)
    stream = iter_pg_copy(table, COLUMNS)
    assert stream.num_rows == rows
    assert stream.columns == buffer.columns
    chunks = list(encode_ahead(stream))
    assert chunks == buffer.chunks
    assert len(chunks) >= (2 if rows > 1 else 1)
    assert stream.total_bytes == buffer.total_bytes


def test_a_bad_value_in_a_later_chunk_is_a_data_error_naming_its_row() -> None:
    n = 300_000  # 3 MB of COPY: several chunks
    ids = pa.array([*range(n - 1), 2**40], pa.int64())
    table = pa.table({"id": ids})
    stream = iter_pg_copy(table, [("id", "int4", -1)])
    first = next(stream)  # the header and the first rows: fine
    assert first.startswith(b"PGCOPY\n\xff\r\n\x00")
    with pytest.raises(DataError, match=f"column 'id' row {n - 1}"):
        list(stream)
