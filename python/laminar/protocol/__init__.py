"""The drivers of the core's protocol machines: each performs the command the machine returns
and reports the result back (docs/engine.md)."""

from laminar import _lazy

# A submodule not imported yet is imported on first use (`laminar._lazy`): an eager ``import
# laminar`` used to load this package's modules, so ``laminar.protocol.<module>`` worked without an
# import of its own.
__getattr__, __dir__ = _lazy.submodules(__name__)
