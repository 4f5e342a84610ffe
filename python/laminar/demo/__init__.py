"""Compatibility path: the code lives in :mod:`laminar.cli.demo` (docs/engine.md, "Package layout").

``laminar.demo`` stays importable with the same public names (add, never rename). It is a package
rather than a module file so that the old file's path is free: git pairs the old file with its
new home as a rename, and edits made on other branches to the old file follow it there.
"""

from laminar.cli.demo import (
    CRASH_POINTS,
    ConfigError,
    CrashPoint,
    Demo,
    DemoError,
    DemoForeachBatch,
    DemoOptions,
    DemoReport,
    Progress,
    StoreCheck,
    TABLE,
    TOPIC,
    TRANSACTIONAL_ID,
    add_arguments,
    crash_point_of,
    point_named,
    run,
    run_from_args,
)

__all__ = [
    "CRASH_POINTS",
    "ConfigError",
    "CrashPoint",
    "Demo",
    "DemoError",
    "DemoForeachBatch",
    "DemoOptions",
    "DemoReport",
    "Progress",
    "StoreCheck",
    "TABLE",
    "TOPIC",
    "TRANSACTIONAL_ID",
    "add_arguments",
    "crash_point_of",
    "point_named",
    "run",
    "run_from_args",
]
