"""Compatibility path: ``laminar.scaleout`` re-exports :mod:`laminar.protocol.scaleout`.

The same public names (add, never rename); docs/engine.md, "Package layout". A package rather
than a module file, so the old file's path is free and git pairs that file with its new home as a
rename: edits made to it on other branches follow it there.
"""

from laminar.protocol.scaleout import (
    RESULT_DDL,
    RESULT_SCHEMA,
    ParticipantResult,
    RunTasks,
    ScaleOutCoordinator,
    ScaleOutTask,
    dtid_for,
    kafka_participant,
    log,
    participant_base,
    participant_factory,
    postgres_participant,
    results_batch,
    roll_back_distributed,
)

__all__ = [
    "RESULT_DDL",
    "RESULT_SCHEMA",
    "ParticipantResult",
    "RunTasks",
    "ScaleOutCoordinator",
    "ScaleOutTask",
    "dtid_for",
    "kafka_participant",
    "log",
    "participant_base",
    "participant_factory",
    "postgres_participant",
    "results_batch",
    "roll_back_distributed",
]
