"""Compatibility path: ``laminar.spark_source`` re-exports :mod:`laminar.spark.source`.

The same public names (add, never rename); docs/engine.md, "Package layout". A package rather
than a module file, so the old file's path is free and git pairs that file with its new home as a
rename: edits made to it on other branches follow it there.
"""

from laminar.spark.source import (
    FORMAT,
    LaminarCommitMessage,
    LaminarDataSource,
    LaminarStreamWriter,
    abort_batch,
    commit_batch,
    log,
    resolve_stopped,
    write_task,
)

__all__ = [
    "FORMAT",
    "LaminarCommitMessage",
    "LaminarDataSource",
    "LaminarStreamWriter",
    "abort_batch",
    "commit_batch",
    "log",
    "resolve_stopped",
    "write_task",
]
