"""Compatibility path: the code lives in :mod:`laminar.protocol.watcher` (docs/engine.md, "Package layout").

``laminar.watcher`` stays importable with the same public names (add, never rename). It is a package
rather than a module file so that the old file's path is free: git pairs the old file with its
new home as a rename, and edits made on other branches to the old file follow it there.
"""

from laminar.protocol.watcher import (
    DistributedDriver,
    Item,
    KafkaSinkFactory,
    Watcher,
    WatcherItem,
    WatcherPassMachine,
    WatcherReport,
    drive,
    find_decision,
    inspect,
    log,
    participant_matches,
)

__all__ = [
    "DistributedDriver",
    "Item",
    "KafkaSinkFactory",
    "Watcher",
    "WatcherItem",
    "WatcherPassMachine",
    "WatcherReport",
    "drive",
    "find_decision",
    "inspect",
    "log",
    "participant_matches",
]
