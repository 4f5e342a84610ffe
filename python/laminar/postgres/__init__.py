"""PostgreSQL: the transactional sink (:mod:`.sink`) and its pieces (names, table, steps, upsert,
errors)."""

from types import ModuleType

from laminar import _lazy


def __getattr__(name: str) -> ModuleType:
    """A submodule not imported yet (`laminar._lazy`: an eager ``import laminar`` used to
    load this package's modules, so ``laminar.postgres.<module>`` worked without an import)."""
    # typed as a module: mypy still flags a misspelt class or function of this package
    module: ModuleType = _lazy.attribute(__name__, name, {})
    return module


def __dir__() -> list[str]:
    return _lazy.names(__name__, {})
