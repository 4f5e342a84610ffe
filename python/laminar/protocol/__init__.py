"""The drivers of the core's protocol machines: each performs the command the machine returns
and reports the result back (docs/engine.md)."""

from types import ModuleType

from laminar import _lazy


def __getattr__(name: str) -> ModuleType:
    """A submodule not imported yet (`laminar._lazy`: an eager ``import laminar`` used to
    load this package's modules, so ``laminar.protocol.<module>`` worked without an import)."""
    # typed as a module: mypy still flags a misspelt class or function of this package
    module: ModuleType = _lazy.attribute(__name__, name, {})
    return module


def __dir__() -> list[str]:
    return _lazy.names(__name__, {})
