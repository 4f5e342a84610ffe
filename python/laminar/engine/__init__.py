"""The floor the sinks and the protocols stand on: the driver loop (`engine.loop`: `drive`, the
commands every performer shares) and every statement over the ``laminar`` schema
(`engine.records`). It imports no sink, no protocol and nothing of Spark, so that a sink's
in-doubt resolution and a protocol's drivers can both use it (docs/engine.md, "Layout")."""

from laminar import _lazy

__getattr__, __dir__ = _lazy.submodules(__name__)
