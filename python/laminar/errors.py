"""Laminar's one error taxonomy (KIP-691), raised the same way by every sink.

Each class is one failure kind of the core (``failure_kind``: ``abortable``, ``in_doubt``,
``fenced`` or ``fatal``), decided once where the error is raised: the engine hands the kind to the
core's machines as it is (`laminar.engine.loop.failed_event`), never re-deriving it.

The flags mirror librdkafka's ``KafkaError``: ``retriable`` (the same call may succeed if repeated),
``requires_abort`` (the epoch's transaction must be aborted, then the epoch can be retried) and
``fatal`` (close the sink and stop). Each error carries the sink id and epoch it concerns when
known, and the root cause stays in ``__cause__`` (errors are wrapped at most once).

    LaminarError
    ├── AbortableError           abort the epoch, then retry it
    │   └── RecordTooLargeError  a record over the size limit (also a DataError): the epoch is
    │                            aborted, the sink stays usable; retrying the batch cannot help
    ├── FatalError               close and stop
    │   ├── FencedError          another instance owns the transactional id / sink
    │   ├── AuthorizationError   credentials or ACLs refuse the operation
    │   ├── ConfigError          wrong settings, schema or types; fix and restart
    │   └── DataError            a value that cannot be written as asked (also a ValueError)
    │       └── RecordTooLargeError
    ├── InDoubtError             a commit whose outcome is unknown: recovery resolves it
    ├── IllegalStateError        misuse of the lifecycle (a bug): never wrapped, never retried
    └── InvalidStateEncoding     persisted state that does not decode (also a ValueError)
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

__all__ = [
    "AbortableError",
    "AuthorizationError",
    "ConfigError",
    "DataError",
    "FatalError",
    "FencedError",
    "IllegalStateError",
    "InDoubtError",
    "InvalidStateEncoding",
    "LaminarError",
    "RecordTooLargeError",
]


#: The core's failure kinds (docs/engine.md §1): what a machine does after a command failed.
FailureKind = Literal["abortable", "in_doubt", "fenced", "fatal"]


class LaminarError(Exception):
    """Base of every error Laminar raises on purpose."""

    #: The core's kind of this failure (a class attribute: the class raised is the
    #: classification).
    failure_kind: ClassVar[FailureKind] = "fatal"
    retriable: ClassVar[bool] = False
    requires_abort: ClassVar[bool] = False
    fatal: ClassVar[bool] = False

    def __init__(
        self, message: str, *, sink_id: str | None = None, epoch: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sink_id = sink_id
        self.epoch = epoch

    def __str__(self) -> str:
        where = []
        if self.sink_id is not None:
            where.append(f"sink {self.sink_id!r}")
        if self.epoch is not None:
            where.append(f"epoch {self.epoch}")
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Spark Connect pickles errors raised in the server-side worker; keep the structure.
        return (_rebuild, (type(self), self.message, self.sink_id, self.epoch, self.__dict__))


def _rebuild(
    cls: type[LaminarError],
    message: str,
    sink_id: str | None,
    epoch: int | None,
    state: dict[str, Any],
) -> LaminarError:
    err = cls.__new__(cls)
    LaminarError.__init__(err, message, sink_id=sink_id, epoch=epoch)
    err.__dict__.update(state)
    return err


class AbortableError(LaminarError):
    """The epoch's transaction must be aborted; the epoch can then be retried."""

    failure_kind = "abortable"
    retriable = True
    requires_abort = True


class FatalError(LaminarError):
    """The sink cannot go on: close it and stop (fix the cause, then restart)."""

    fatal = True


class FencedError(FatalError):
    """Another instance now owns this transactional id or sink: this one is a zombie."""

    failure_kind = "fenced"


class AuthorizationError(FatalError):
    """The server refused the credentials or the operation (authentication or ACLs)."""


class ConfigError(FatalError):
    """A setting, schema or type is wrong; the message names it and the fix."""


class DataError(FatalError, ValueError):
    """A value in the batch cannot be written as asked (e.g. out of range for its column)."""


class RecordTooLargeError(AbortableError, DataError):
    """A record is larger than the client or broker accepts.

    Both an `AbortableError` (KIP-691: the epoch's transaction is aborted and the sink stays
    usable) and a `DataError` (the batch's data is at fault: ``except DataError`` catches it).
    Its flags say what to do: ``requires_abort`` (done by the sink), not ``retriable`` (the same
    batch fails again), not ``fatal`` (the sink need not be closed). Raise the size limit or write
    smaller records.
    """

    retriable = False
    requires_abort = True
    fatal = False


class InDoubtError(LaminarError):
    """A commit whose outcome is unknown; never answered by an abort, recovery resolves it."""

    failure_kind = "in_doubt"


class IllegalStateError(LaminarError):
    """A lifecycle call that is not legal in the current state: a bug in the caller."""


class InvalidStateEncoding(LaminarError, ValueError):  # noqa: N818 (a public name: kept)
    """A persisted state string or blob that does not decode (corrupt, truncated or too new)."""
