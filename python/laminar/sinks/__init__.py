"""Laminar's transactional sinks: compatibility path for ``laminar.sinks.KafkaSink`` and friends.

The sinks live in :mod:`laminar.kafka` and :mod:`laminar.postgres`, their shared base in
:mod:`laminar._sink` (docs/engine.md, "Package layout").
"""

from laminar._sink import TransactionalSink
from laminar.kafka.sink import KafkaSink
from laminar.postgres.sink import PostgresSink

__all__ = ["KafkaSink", "PostgresSink", "TransactionalSink"]
