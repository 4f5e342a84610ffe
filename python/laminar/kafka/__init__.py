"""Kafka: the transactional sink (:mod:`.sink`), its record encoding and connection pieces
(:mod:`.records`, :mod:`.conn`) and the reader of committed records (:mod:`.log`)."""

from laminar import _lazy

# A submodule not imported yet is imported on first use (`laminar._lazy`): an eager ``import
# laminar`` used to load this package's modules, so ``laminar.kafka.<module>`` worked without an
# import of its own.
__getattr__, __dir__ = _lazy.submodules(__name__)
