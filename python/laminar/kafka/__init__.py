"""Kafka: the transactional sink (:mod:`.sink`), its record encoding and connection pieces
(:mod:`.records`, :mod:`.conn`) and the reader of committed records (:mod:`.log`)."""

from types import ModuleType

from laminar import _lazy


def __getattr__(name: str) -> ModuleType:
    """A submodule not imported yet (`laminar._lazy`: an eager ``import laminar`` used to
    load this package's modules, so ``laminar.kafka.<module>`` worked without an import)."""
    # typed as a module: mypy still flags a misspelt class or function of this package
    module: ModuleType = _lazy.attribute(__name__, name, {})
    return module


def __dir__() -> list[str]:
    return _lazy.names(__name__, {})
