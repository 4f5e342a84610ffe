"""Module ``__getattr__``/``__dir__`` (PEP 562) for laminar's packages, which import their heavy
submodules on first use (docs/engine.md: what ``import laminar`` loads).

An eager ``import laminar`` used to load every subpackage and submodule, so ``laminar.spark``,
``laminar.spark.writer``, ``laminar.postgres.sink`` or ``laminar.protocol.scaleout`` were
attributes without an import of their own, and ``dir()`` listed them. `attribute` keeps that:
a lazy re-exported name (``lazy``), else a submodule that exists, imported now; anything else,
including a name that is not an identifier (``hasattr(laminar, "a.b")``), is an
``AttributeError`` as for any module. Only the standard library here: every package imports it.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["attribute", "names", "submodules"]


def attribute(package: str, name: str, lazy: Mapping[str, str]) -> Any:
    """``package``'s attribute ``name``: ``lazy[name]``'s attribute of that name, else the
    submodule ``package.name`` (imported); kept in the package's namespace."""
    module = lazy.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif (
        name.isidentifier()
        and not name.startswith("_")
        and importlib.util.find_spec(f"{package}.{name}") is not None
    ):
        value = importlib.import_module(f"{package}.{name}")
    else:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    setattr(sys.modules[package], name, value)
    return value


def names(package: str, lazy: Mapping[str, str]) -> list[str]:
    """``dir(package)``: its namespace, its lazy names and its public submodules."""
    module = sys.modules[package]
    path = getattr(module, "__path__", [])
    subs = {m.name for m in pkgutil.iter_modules(path) if not m.name.startswith("_")}
    return sorted({*vars(module), *lazy, *subs})


def submodules(
    package: str,
) -> tuple[Callable[[str], ModuleType], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose only lazy attributes are its
    submodules (``laminar.kafka``, ``laminar.postgres``, ``laminar.protocol``)::

        __getattr__, __dir__ = _lazy.submodules(__name__)
    """

    def getattr_(name: str) -> ModuleType:
        module: ModuleType = attribute(package, name, {})
        return module

    def dir_() -> list[str]:
        return names(package, {})

    return getattr_, dir_
