"""One classification of librdkafka's errors onto Laminar's taxonomy (KIP-691), and their words.

``classify`` is the only place that decides what a client error (a ``KafkaError``, a
``KafkaException``, a call that did not return: ``StuckCallError``) means for an epoch — its
`Failure`: the kind the sink's machine and the drivers act on (``fenced``, ``fatal``,
``in_doubt``, ``abortable``: ``SinkTransaction.commit_failed``, `laminar.engine.loop`'s
``failed_event``), whether a transactional call retries it locally first, and the cause that
picks the message. ``map_kafka_error`` words a classified error as a `LaminarError`:

- fenced / producer-fenced / invalid-producer-epoch (fatal or not) → `FencedError`
- authentication and authorization failures → `AuthorizationError`
- any other ``fatal()`` error → `FatalError`
- a commit that fails without a definite outcome (timed out, retriable, unknown) → `InDoubtError`
- ``txn_requires_abort()`` → `AbortableError`
- ``retriable()`` (once the caller's bounded local retries are spent) → `AbortableError`
- invalid configuration → `ConfigError`
- anything else during a transaction → `AbortableError` (abort, then the epoch is retried)
- a call that did not return in time → `InDoubtError` for a commit, else `AbortableError`

Messages name the operation, the setting to look at, and never carry secrets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from confluent_kafka import KafkaError, KafkaException

from laminar._core import identity_group, marker_group
from laminar._redact import redact_text
from laminar.errors import (
    AbortableError,
    AuthorizationError,
    ConfigError,
    FatalError,
    FencedError,
    InDoubtError,
    LaminarError,
    RecordTooLargeError,
)
from laminar.kafka._calls import StuckCallError

if TYPE_CHECKING:
    # the kinds the core's machines take (`laminar._core`'s `Event.failed`): one list, the stub's
    from laminar._core import _FailureKind as FailureKind

__all__ = [
    "AUTH_CODES",
    "FENCED_CODES",
    "ErrorContext",
    "Failure",
    "as_kafka_error",
    "classify",
    "classify_silence",
    "describe",
    "is_silence",
    "map_kafka_error",
]

FENCED_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)

AUTH_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)

_CONFIG_CODES = frozenset({KafkaError._INVALID_ARG, KafkaError.INVALID_CONFIG})

_UNREACHABLE_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
    }
)

_UNKNOWN_TOPIC_CODES = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
    }
)

_TOO_LARGE_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})


@dataclass(frozen=True)
class ErrorContext:
    """What an error message names: the sink, epoch, cluster and topic; and what it must hide."""

    sink_id: str
    bootstrap_servers: str
    topic: str
    epoch: int | None = None
    #: Secret values (SASL passwords, …) scrubbed from any text taken from the client.
    secrets: tuple[str, ...] = ()

    def at(self, epoch: int | None) -> ErrorContext:
        """The same context for another epoch."""
        return ErrorContext(self.sink_id, self.bootstrap_servers, self.topic, epoch, self.secrets)


def as_kafka_error(error: BaseException | KafkaError) -> KafkaError | None:
    """The ``KafkaError`` inside a ``KafkaException`` (or the error itself), if any."""
    if isinstance(error, KafkaError):
        return error
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0]
    return None


#: Errors that mean no broker answered: a request time-out, a connection lost or never set up.
_SILENCE_CODES = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    }
)


def is_silence(error: BaseException | KafkaError) -> bool:
    """Whether a client error means that no broker answered (a time-out, a connection lost or
    never set up) rather than an answer of the cluster — what the core's ``after_attempt`` rule
    takes as ``silent`` (docs/kafka.md, "Budgets")."""
    kafka_error = as_kafka_error(error)
    return kafka_error is not None and kafka_error.code() in _SILENCE_CODES


def describe(error: KafkaError, ctx: ErrorContext) -> str:
    """``NAME: text`` of a client error, secrets scrubbed."""
    return redact_text(f"{error.name()}: {error.str()}", ctx.secrets)


#: Why, finer: which message `map_kafka_error` words it with.
Cause = Literal[
    "not_kafka",
    "fenced",
    "unauthorized",
    "fatal",
    "config",
    "commit_unknown",
    "stuck",
    "failover",
    "unreachable",
    "unknown_topic",
    "too_large",
    "timed_out",
    "other",
    "stalled",
    "hung",
]


@dataclass(frozen=True)
class Failure:
    """What a client error means for the epoch (`classify`)."""

    #: ``fenced`` (another producer took over), ``fatal`` (close the sink), ``in_doubt`` (a
    #: commit's outcome is unknown: the marker decides), ``abortable`` (abort, retry the epoch).
    kind: FailureKind
    #: Which of the taxonomy's cases it is (picks the message).
    cause: Cause
    #: A transactional call retries it locally, within its retries and its time bound, before
    #: the error stands (librdkafka documents it for send_offsets/commit/abort).
    retry: bool = False


def classify(
    error: BaseException | KafkaError, operation: str, *, reached: bool = False
) -> Failure:
    """The one classification of a client error raised by ``operation`` (the module's list).

    ``reached``: the cluster answered this process before (its metadata), so a connection lost
    or a call timed out at start-up is a broker down or a coordinator moving — retriable —
    rather than an address to fix."""
    if isinstance(error, StuckCallError):
        # The producer is given up; a commit's outcome is then unknown until the marker is read.
        kind: FailureKind = "in_doubt" if operation == "commit_transaction" else "abortable"
        return Failure(kind, "stuck")
    kafka_error = as_kafka_error(error)
    if kafka_error is None:
        return Failure("fatal", "not_kafka")
    code = kafka_error.code()
    retry = (
        kafka_error.retriable() and not kafka_error.fatal() and not kafka_error.txn_requires_abort()
    )
    if code in FENCED_CODES:
        return Failure("fenced", "fenced", retry)
    if code in AUTH_CODES:
        return Failure("fatal", "unauthorized", retry)
    if kafka_error.fatal():
        return Failure("fatal", "fatal", retry)
    if code in _CONFIG_CODES:
        return Failure("fatal", "config", retry)
    if operation == "commit_transaction" and not kafka_error.txn_requires_abort():
        return Failure("in_doubt", "commit_unknown", retry)
    if operation in ("init_transactions", "metadata") and code in _UNREACHABLE_CODES:
        return (
            Failure("abortable", "failover", retry)
            if reached
            else Failure("fatal", "unreachable", retry)
        )
    if code in _UNKNOWN_TOPIC_CODES:
        return Failure("abortable", "unknown_topic", retry)
    if code in _TOO_LARGE_CODES:
        return Failure("abortable", "too_large", retry)
    if code in _UNREACHABLE_CODES:
        return Failure("abortable", "timed_out", retry)
    return Failure("abortable", "other", retry)


def classify_silence(seen: Sequence[KafkaError], *, stalled: bool, connected: bool) -> Failure:
    """The one classification of a cluster that did not answer a start-up request (its
    metadata), from what librdkafka reported meanwhile: ``seen`` (its error callbacks), whether
    its statistics show servers that took the connection and never answered its set-up
    (``stalled``) or servers set up that did not answer the request (``connected``).

    Refused credentials win (``unauthorized``: the caller words that client error); a stall is a
    hang to wait out, not an address to fix (unless TLS failed: a plaintext port spoken to
    with TLS looks alike); a set-up server is a hung or overloaded broker; else unreachable."""
    if any(error.code() in AUTH_CODES for error in seen):
        return Failure("fatal", "unauthorized")
    if stalled and all(error.code() != KafkaError._SSL for error in seen):
        return Failure("abortable", "stalled")
    if connected:
        return Failure("abortable", "hung")
    return Failure("fatal", "unreachable")


def map_kafka_error(
    error: BaseException | KafkaError,
    operation: str,
    ctx: ErrorContext,
    *,
    hint: str | None = None,
    reached: bool = False,
) -> LaminarError:
    """The Laminar error for a client error raised by ``operation`` (``init_transactions``,
    ``begin_transaction``, ``produce``, ``send_offsets_to_transaction``, ``flush``,
    ``commit_transaction``, ``abort_transaction``, ``delivery``, ``metadata``), as `classify`
    decides it.

    ``hint`` adds a sentence (e.g. which record failed); ``reached``: as for `classify`. The
    caller raises the result ``from`` the original exception so the root cause stays in
    ``__cause__``. (A call that did not return is worded by its caller, which knows the
    bound.)
    """
    failure = classify(error, operation, reached=reached)
    cause = failure.cause
    kafka_error = as_kafka_error(error)
    if kafka_error is None:
        text = redact_text(f"{type(error).__name__}: {error}", ctx.secrets)
        return FatalError(_join(f"{operation} failed: {text}", hint), **_where(ctx))
    code = kafka_error.code()
    what = describe(kafka_error, ctx)

    if cause == "fenced":
        return FencedError(
            _join(
                f"another producer with transactional.id {ctx.sink_id!r} has taken over "
                f"({operation}: {what}); this instance is a zombie and must stop — the newer "
                "instance owns the sink",
                hint,
            ),
            **_where(ctx),
        )
    if cause == "unauthorized":
        return AuthorizationError(
            _join(_auth_message(code, operation, what, ctx), hint), **_where(ctx)
        )
    if cause == "fatal":
        return FatalError(
            _join(
                f"fatal producer error in {operation} ({what}); close the sink and restart",
                hint,
            ),
            **_where(ctx),
        )
    if cause == "config":
        return ConfigError(
            _join(f"invalid producer configuration ({what}); fix producer_config", hint),
            **_where(ctx),
        )
    if cause == "commit_unknown":
        return InDoubtError(
            _join(
                f"the commit's outcome is unknown ({what}); recovery reads the epoch marker to "
                "decide, the transaction is never aborted blindly",
                hint,
            ),
            **_where(ctx),
        )
    if cause == "failover":
        return AbortableError(
            _join(
                f"{operation} did not complete against the Kafka cluster at "
                f"bootstrap.servers={ctx.bootstrap_servers} ({what}), which answered before: a "
                "broker down or a coordinator moving (a failover). Nothing was written; the "
                "call can be retried (raise init_timeout_s to ride out longer failovers)",
                hint,
            ),
            **_where(ctx),
        )
    if cause == "unreachable":
        return FatalError(
            _join(
                f"could not reach the Kafka cluster at bootstrap.servers={ctx.bootstrap_servers} "
                f"({operation}: {what}); check the address, that the brokers run, and the "
                "security settings (security.protocol, sasl.*, ssl.*)",
                hint,
            ),
            **_where(ctx),
        )
    if cause == "unknown_topic":
        return AbortableError(
            _join(
                f"topic {ctx.topic!r} does not exist on {ctx.bootstrap_servers} ({operation}: "
                f"{what}); create it (Laminar never creates topics)",
                hint,
            ),
            **_where(ctx),
        )
    if cause == "too_large":
        return RecordTooLargeError(
            _join(
                f"a record is larger than the broker or client accepts ({operation}: {what}); "
                "raise message.max.bytes in producer_config and the topic's max.message.bytes, "
                "or write smaller records",
                hint,
            ),
            **_where(ctx),
        )
    if cause == "timed_out":
        return AbortableError(
            _join(
                f"{operation} timed out or lost the connection to {ctx.bootstrap_servers} "
                f"({what}); the epoch will be aborted and retried",
                hint,
            ),
            **_where(ctx),
        )
    kind = (
        "requires abort"
        if kafka_error.txn_requires_abort()
        else "retriable"
        if kafka_error.retriable()
        else "error"
    )
    return AbortableError(
        _join(f"{operation} failed ({kind}: {what}); the epoch will be aborted and retried", hint),
        **_where(ctx),
    )


def _auth_message(code: int, operation: str, what: str, ctx: ErrorContext) -> str:
    if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return (
            f"the brokers at {ctx.bootstrap_servers} refused the credentials ({operation}: "
            f"{what}); check sasl.mechanisms, sasl.username and sasl.password, the OAUTHBEARER "
            "token source (oauth_cb or sasl.oauthbearer.*), or the ssl.* settings in "
            "producer_config"
        )
    # TxnOffsetCommit (the epoch marker) needs READ on the topic, Produce and
    # AddPartitionsToTxn WRITE; librdkafka's text says which request it was
    topic_operation = "READ" if "commit offsets" in what.lower() else "WRITE"
    resource = {
        KafkaError.TOPIC_AUTHORIZATION_FAILED: f"{topic_operation} on topic {ctx.topic!r}",
        KafkaError.GROUP_AUTHORIZATION_FAILED: (
            f"READ on groups {marker_group(ctx.sink_id)!r} and {identity_group(ctx.sink_id)!r}"
        ),
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (
            f"WRITE on transactional id {ctx.sink_id!r}"
        ),
        KafkaError.CLUSTER_AUTHORIZATION_FAILED: "IDEMPOTENT_WRITE on the cluster",
    }.get(code, "the operation")
    return (
        f"the brokers refused {operation} ({what}); grant the sink's principal {resource} "
        '(ACLs: docs/operations.md, "Least privilege")'
    )


def _join(message: str, hint: str | None) -> str:
    return f"{message}. {hint}" if hint else message


def _where(ctx: ErrorContext) -> dict[str, Any]:
    return {"sink_id": ctx.sink_id, "epoch": ctx.epoch}
