"""Laminar: exactly-once transactional sinks from Spark Structured Streaming to Kafka and PostgreSQL."""

from laminar._core import __version__

__all__ = ["__version__"]
