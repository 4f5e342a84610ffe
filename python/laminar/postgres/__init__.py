"""PostgreSQL: the transactional sink (:mod:`.sink`) and its pieces (names, table, steps, upsert,
errors)."""

from typing import Any

from laminar import _lazy


def __getattr__(name: str) -> Any:
    """A submodule not imported yet (`laminar._lazy`: an eager ``import laminar`` used to
    load this package's modules, so ``laminar.postgres.<module>`` worked without an import)."""
    return _lazy.attribute(__name__, name, {})


def __dir__() -> list[str]:
    return _lazy.names(__name__, {})
