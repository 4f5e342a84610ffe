"""Compatibility path: ``laminar.sinks.kafka`` re-exports :mod:`laminar.kafka.sink`.

The same public names (add, never rename); docs/engine.md, "Package layout". A package rather
than a module file, so the old file's path is free and git pairs that file with its new home as a
rename: edits made to it on other branches follow it there.
"""

from laminar.kafka.sink import (
    HEADER_EPOCH,
    HEADER_SINK,
    WITNESS_MAX_RECORDS_ENV,
    KafkaSink,
    StartupRead,
    log,
)

__all__ = [
    "HEADER_EPOCH",
    "HEADER_SINK",
    "WITNESS_MAX_RECORDS_ENV",
    "KafkaSink",
    "StartupRead",
    "log",
]
