"""Handing a writer to another process: the laminar version is checked before anything else.

Spark Connect pickles the ``foreachBatch`` function on the client and unpickles it in the Python
worker of the server when the query starts. If that worker's laminar is another version, the
configuration may not mean the same thing there (or not load at all). So a writer pickles as
``restore(client_version, payload)``: the worker first compares versions and raises a
`ConfigError` that says what to install where — the query then fails in ``start()``, before any
batch — and only then loads the configuration.

A worker without laminar at all fails earlier, with Python's ``No module named 'laminar'``;
`laminar.spark.start` turns that into the same advice.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
from typing import Any

from laminar.errors import ConfigError

__all__ = ["VERSION_MISMATCH", "install_advice", "reduce_checked", "restore"]

#: Text every version-mismatch message starts with (the client recognises it in Spark's error).
VERSION_MISMATCH = "laminar version mismatch"


def _local_version() -> str:
    # the package's version, read when checked (not the extension's: a build may set it apart);
    # imported here because `laminar` imports this module while it is being initialised
    from laminar import __version__ as version

    return version


def install_advice(version: str, python: str | None = None) -> str:
    """What to run, and where, so a server's Python can run laminar ``version``."""
    where = python or "the Spark server's Python"
    return (
        f"install it in the environment of {where}: `{python or 'python'} -m pip install "
        f"laminar=={version}` (or the same wheel as the client). Spark Connect runs "
        "foreachBatch functions and UDFs with the interpreter named by the PYSPARK_PYTHON "
        "environment variable of the server process (classic Spark: spark.pyspark.python); "
        "restart the server after changing it (docs/spark.md)"
    )


def reduce_checked(obj: Any) -> tuple[Any, ...]:
    """``__reduce__`` for a picklable configuration object: on unpickling, the laminar version
    of the loading process is compared with this one's before the object's state is loaded."""
    cls = type(obj)
    state = obj.__getstate__() if hasattr(obj, "__getstate__") else obj.__dict__
    try:
        # The state is pickled on its own, so that the loading side checks the version before
        # it imports anything the state refers to.
        payload: bytes | None = pickle.dumps((cls, state), protocol=pickle.HIGHEST_PROTOCOL)
        inline = None
    except (pickle.PicklingError, TypeError, AttributeError):
        # e.g. a sink subclass defined in a notebook: left to the caller's pickler (cloudpickle)
        payload, inline = None, (cls, state)
    return (restore, (_local_version(), payload, inline))


def restore(client_version: str, payload: bytes | None, inline: tuple[Any, Any] | None) -> Any:
    """Rebuild an object pickled by `reduce_checked`; `ConfigError` if this process runs
    another laminar version than the one that pickled it."""
    local = _local_version()
    if client_version != local:
        python = sys.executable or "python"
        raise ConfigError(
            f"{VERSION_MISMATCH}: this writer was configured with laminar {client_version} but "
            f"the process that runs it (pid {os.getpid()} on {socket.gethostname()}, Python "
            f"{python}) has laminar {local}; {install_advice(client_version, python)}"
        )
    if payload is not None:
        cls, state = pickle.loads(payload)  # noqa: S301 (our own payload, from the client)
    else:
        assert inline is not None
        cls, state = inline
    obj = cls.__new__(cls)
    if hasattr(obj, "__setstate__"):
        obj.__setstate__(state)
    else:
        obj.__dict__.update(state)
    return obj
