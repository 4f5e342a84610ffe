"""Compatibility path: ``laminar.watcher`` re-exports :mod:`laminar.protocol.watcher`.

The same public names (add, never rename); docs/engine.md, "Package layout". A package rather
than a module file, so the old file's path is free and git pairs that file with its new home as a
rename: edits made to it on other branches follow it there.
"""

from laminar.protocol.watcher import (
    Item,
    KafkaSinkFactory,
    Watcher,
    WatcherReport,
    find_decision,
    inspect,
    log,
)

__all__ = [
    "Item",
    "KafkaSinkFactory",
    "Watcher",
    "WatcherReport",
    "find_decision",
    "inspect",
    "log",
]
