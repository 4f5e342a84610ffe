"""Compatibility path: ``laminar.spark_options`` re-exports :mod:`laminar.spark.options`.

The same public names (add, never rename); docs/engine.md, "Package layout". A package rather
than a module file, so the old file's path is free and git pairs that file with its new home as a
rename: edits made to it on other branches follow it there.
"""

from laminar.spark.options import (
    KNOWN,
    SinkOptions,
    parse_options,
)

__all__ = [
    "KNOWN",
    "SinkOptions",
    "parse_options",
]
