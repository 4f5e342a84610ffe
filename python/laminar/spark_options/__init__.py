"""Compatibility path: the code lives in :mod:`laminar.spark.options` (docs/engine.md, "Package layout").

``laminar.spark_options`` stays importable with the same public names (add, never rename). It is a package
rather than a module file so that the old file's path is free: git pairs the old file with its
new home as a rename, and edits made on other branches to the old file follow it there.
"""

from laminar.spark.options import (
    ConfigError,
    EnvValue,
    KNOWN,
    KafkaSink,
    PostgresSink,
    SinkOptions,
    env,
    is_secret_key,
    parse_options,
)

__all__ = [
    "ConfigError",
    "EnvValue",
    "KNOWN",
    "KafkaSink",
    "PostgresSink",
    "SinkOptions",
    "env",
    "is_secret_key",
    "parse_options",
]
