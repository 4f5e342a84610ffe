"""PostgreSQL: the transactional sink (:mod:`.sink`) and its pieces (names, table, steps, upsert,
errors)."""

from laminar import _lazy

# A submodule not imported yet is imported on first use (`laminar._lazy`): an eager ``import
# laminar`` used to load this package's modules, so ``laminar.postgres.<module>`` worked without an
# import of its own.
__getattr__, __dir__ = _lazy.submodules(__name__)
