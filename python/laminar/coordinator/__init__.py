"""Compatibility path: ``laminar.coordinator`` re-exports :mod:`laminar.spark.writer`.

The same public names (add, never rename); docs/engine.md, "Package layout". A package rather
than a module file, so the old file's path is free and git pairs that file with its new home as a
rename: edits made to it on other branches follow it there.
"""

from laminar.spark.writer import (
    EpochResult,
    ExactlyOnceWriter,
    exactly_once,
    log,
)

__all__ = [
    "EpochResult",
    "ExactlyOnceWriter",
    "exactly_once",
    "log",
]
