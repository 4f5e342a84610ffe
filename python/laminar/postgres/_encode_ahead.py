"""Encoding overlapped with sending (docs/serialization.md, "Performance").

The core encodes with the GIL released, so while the calling thread sends chunk n (a COPY write
waiting on the socket, GIL released too) a worker thread can encode chunk n+1. `encode_ahead` is
that two-stage pipeline, bounded: at most two chunks exist at a time (the one in hand and the one
being encoded), whatever the batch size. It pays only where the sending releases the GIL: a
Python produce loop does not, and sharing the GIL with the worker made it slower.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["encode_ahead"]

T = TypeVar("T")

_END = object()


def encode_ahead(chunks: Iterator[T], *, overlap: bool = True) -> Generator[T, None, None]:
    """Yields the items of ``chunks`` in order; with ``overlap``, item n+1 is computed on a
    worker thread while the caller works on item n.

    The first item is computed on the calling thread (nothing can be sent before it exists, and
    an error in it is raised before anything was sent); an exception from ``chunks`` is raised
    where its item would have been yielded. The worker is a thread of this call's own (not a
    shared pool, so a fork or a second sink cannot starve it); closing the generator early waits
    for the item in flight. ``overlap=False`` (a batch of one chunk) skips the thread.
    """
    first = next(chunks, _END)
    if first is _END:
        return
    if not overlap:
        yield first  # type: ignore[misc]
        yield from chunks
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="laminar-encode") as pool:
        item = first
        while True:
            ahead = pool.submit(next, chunks, _END)
            try:
                yield item  # type: ignore[misc]
            except BaseException:
                ahead.cancel()  # closed early: skip the item if it has not started
                raise
            item = ahead.result()
            if item is _END:
                return
