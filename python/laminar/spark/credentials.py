"""Warns about credentials a Spark session hands its executors where Spark shows them
(``spark.executorEnv.NAME``: its UI, REST API and the standalone workers' pages; docs/spark.md,
"Secrets on executors"), on the ``laminar.spark`` logger."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laminar.readiness import ExposedVariable

__all__ = ["warn_exposed_credentials"]

#: The package's logger: the warnings are `laminar.spark`'s, as `register` and `start` give them.
log = logging.getLogger("laminar.spark")


def warn_exposed_credentials(
    spark: Any, names: Sequence[str] = (), *, options: Mapping[str, str] | None = None
) -> list[ExposedVariable]:
    """Warn (the ``laminar.spark`` logger) about each credential the session hands its executors
    through ``spark.executorEnv.NAME`` that Spark shows in full — its UI, REST API and the
    standalone workers' pages (`laminar.readiness.exposed_executor_env`) — and return them.
    ``names`` are the variables a query's sinks read (``laminar.env`` settings); ``options``, a
    ``format("laminar")`` query's options, adds those its ``….env`` options name. `register`
    (without names: values and names that look like credentials) and `start` call it; a
    session whose configuration cannot be read gives nothing. Docs: docs/spark.md, "Secrets on
    executors"."""
    # lazy: Spark imports laminar.spark in every fresh driver-side process (laminar.spark's top)
    from laminar.readiness import exposed_executor_env

    names = list(names)
    if options is not None:
        from laminar.spark.options import parse_options  # lazy: the same

        names += parse_options(options, check_sinks=False).env_names()

    try:
        entries = spark.conf.getAll  # a property in pyspark 4 (Connect and classic)
        if callable(entries):
            entries = entries()
        conf = {str(k): str(v) for k, v in dict(entries).items()}
    except Exception as e:  # an old or foreign session: nothing to check against
        log.debug("cannot read the session's configuration to check spark.executorEnv: %s", e)
        return []
    exposed = exposed_executor_env(conf, names)
    for variable in exposed:
        log.warning("%s", variable.message())
    return exposed
