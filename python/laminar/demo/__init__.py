"""Compatibility path: ``laminar.demo`` re-exports :mod:`laminar.cli.demo`.

The same public names (add, never rename); docs/engine.md, "Package layout". A package rather
than a module file, so the old file's path is free and git pairs that file with its new home as a
rename: edits made to it on other branches follow it there.
"""

from laminar.cli.demo import (
    CRASH_POINTS,
    TABLE,
    TOPIC,
    TRANSACTIONAL_ID,
    Demo,
    DemoError,
    DemoForeachBatch,
    DemoOptions,
    DemoReport,
    Progress,
    StoreCheck,
    add_arguments,
    crash_point_of,
    run,
    run_from_args,
)

__all__ = [
    "CRASH_POINTS",
    "TABLE",
    "TOPIC",
    "TRANSACTIONAL_ID",
    "Demo",
    "DemoError",
    "DemoForeachBatch",
    "DemoOptions",
    "DemoReport",
    "Progress",
    "StoreCheck",
    "add_arguments",
    "crash_point_of",
    "run",
    "run_from_args",
]
