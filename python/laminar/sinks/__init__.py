"""Laminar's transactional sinks."""

from laminar.sinks.base import TransactionalSink
from laminar.sinks.postgres import PostgresSink

__all__ = ["PostgresSink", "TransactionalSink"]
