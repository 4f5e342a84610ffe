"""Laminar's transactional sinks."""

from laminar.sinks.base import TransactionalSink

__all__ = ["TransactionalSink"]
