"""Type aliases shared across the package."""

from __future__ import annotations

from typing import Any, TypeAlias

#: What sinks accept as a batch: a pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader``,
#: or any object exporting the Arrow PyCapsule interface (``__arrow_c_stream__`` or
#: ``__arrow_c_array__``). Spark's ``DataFrame.toArrow()`` and ``mapInArrow`` batches qualify.
ArrowData: TypeAlias = Any
