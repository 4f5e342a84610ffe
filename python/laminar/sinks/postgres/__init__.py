"""Compatibility path: ``laminar.sinks.postgres`` re-exports :mod:`laminar.postgres.sink`.

The same public names (add, never rename); docs/engine.md, "Package layout". A package rather
than a module file, so the old file's path is free and git pairs that file with its new home as a
rename: edits made to it on other branches follow it there.
"""

from laminar.postgres.sink import (
    DEFAULT_SCHEMA,
    ColumnsSpec,
    PostgresSink,
    PreparedTransaction,
    log,
)

__all__ = [
    "DEFAULT_SCHEMA",
    "ColumnsSpec",
    "PostgresSink",
    "PreparedTransaction",
    "log",
]
