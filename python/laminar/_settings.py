"""Settings resolved in the process that writes: ``laminar.env("PG_DSN")``.

Spark Connect pickles the ``foreachBatch`` function on the client and runs it in the server's
Python worker. A DSN or a SASL password written into a sink's configuration travels inside that
pickle (and sits in the client's memory and notebooks). An `EnvValue` travels as the *name* of
an environment variable instead and is read where the sink opens its connection — the Spark
server's Python worker — so the secret only ever exists in the server's environment::

    sink = laminar.PostgresSink(dsn=laminar.env("ORDERS_PG_DSN"), table="public.orders")
    kafka = laminar.KafkaSink(..., producer_config={"sasl.password": laminar.env("KAFKA_PW")})

PostgreSQL also reads libpq's own variables (``PGPASSWORD``, ``PGHOST``, …) and ``~/.pgpass`` in
the process that connects, so a DSN without a password plus ``PGPASSWORD`` on the server works
without any of this.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from laminar.errors import ConfigError

__all__ = [
    "EnvValue",
    "Setting",
    "env",
    "env_names",
    "is_deferred",
    "resolve",
    "resolve_mapping",
]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class EnvValue:
    """A setting read from the environment variable ``name`` of the process that writes.

    Only the name (and ``default``, if given) is stored and pickled. The value is read each
    time it is resolved, by `resolve`; it never appears in reprs or messages.
    """

    name: str
    default: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(
                f"laminar.env() takes the name of an environment variable (letters, digits, "
                f"'_'), got {self.name!r}"
            )
        if self.default is not None and not isinstance(self.default, str):
            raise ConfigError(f"laminar.env({self.name!r}, default=...) must be a string")

    def __repr__(self) -> str:
        # The default may be a secret too: never shown.
        extra = ", default=..." if self.default is not None else ""
        return f"laminar.env({self.name!r}{extra})"

    def resolve(self, what: str) -> str:
        """The variable's value in this process (or the default); `ConfigError` naming the
        variable, the setting it feeds and where to set it if it is missing or empty."""
        value = os.environ.get(self.name)
        if value:
            return value
        if self.default is not None:
            return self.default
        state = "is empty" if value == "" else "is not set"
        raise ConfigError(
            f"{what} comes from the environment variable {self.name}, which {state} in this "
            f"process (pid {os.getpid()}). Set it in the environment of the process that "
            "writes: for Spark Connect, the server's environment (its Python workers inherit "
            "it); executors need it too, in a way Spark does not display (docs/spark.md, "
            "'Secrets on executors')"
        )


#: A setting given directly or read from the environment of the writing process.
Setting: TypeAlias = str | EnvValue


def env(name: str, default: str | None = None) -> EnvValue:
    """A setting read from the environment variable ``name`` where the sink writes (e.g. the
    Spark Connect server's Python worker), not where the sink is configured; see `EnvValue`."""
    return EnvValue(name, default)


def is_deferred(value: Any) -> bool:
    """Whether ``value`` is resolved later, in the writing process."""
    return isinstance(value, EnvValue)


def resolve(value: str | EnvValue, what: str) -> str:
    """``value`` itself, or the environment variable it names (see `EnvValue.resolve`)."""
    if isinstance(value, EnvValue):
        return value.resolve(what)
    return value


def resolve_mapping(config: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A copy of a client configuration with every `EnvValue` replaced by its value."""
    return {
        key: (value.resolve(f"{what} {key!r}") if isinstance(value, EnvValue) else value)
        for key, value in config.items()
    }


def env_names(*values: Any) -> list[str]:
    """The names of the `EnvValue` settings in ``values`` — a sink, its attributes, their
    mappings and sequences (a producer configuration) —, sorted: the environment variables the
    writing process reads (`laminar.readiness.exposed_executor_env` checks them)."""
    found: set[str] = set()
    seen: set[int] = set()

    def walk(value: Any, depth: int) -> None:
        if isinstance(value, EnvValue):
            found.add(value.name)
            return
        if depth > 3 or id(value) in seen or isinstance(value, (str, bytes, int, float)):
            return
        seen.add(id(value))
        if isinstance(value, Mapping):
            children: list[Any] = list(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            children = list(value)
        else:
            children = list(getattr(value, "__dict__", {}).values())
        for child in children:
            walk(child, depth + 1)

    for value in values:
        walk(value, 0)
    return sorted(found)
