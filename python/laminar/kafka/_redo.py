"""Re-producing one redo-log blob (docs/formats.md §2, docs/protocol.md §3): the records of a
decided epoch, each to its own topic and partition with its own headers when the blob is
version 2 (Spark's Kafka-sink shape), into the sink's open transaction.

Performed for the recovery machine's ``produce_redo`` command (`laminar.protocol.driver`); it is
the sink's producing of a blob, so it lives in the sink's package.
"""

from __future__ import annotations

from typing import Any

from laminar._core import decode_redo_records

__all__ = ["produce_blob"]


def produce_blob(sink: Any, blob: bytes) -> None:
    """Produce ``blob``'s records with ``sink.write_records`` (which adds Laminar's own headers
    for the open epoch): plain key/value records as they were, routed records with their topic
    (``None``: the sink's), partition (-1: the partitioner's) and user headers."""
    values, keys, topics, partitions, headers = decode_redo_records(blob)
    routed = any(t is not None for t in topics) or any(p >= 0 for p in partitions)
    if not routed and not any(headers):
        sink.write_records(values, keys)
        return
    sink.write_records(values, keys, routed=(topics, partitions, headers))
