"""The Schema Registry of Avro values and keys: subject names, the writer schema's id (registered,
looked up, given, or the subject's latest), cached per process, and the one mapping of the
registry's errors to Laminar's (docs/kafka.md, "Avro with a Schema Registry").

The network calls are confluent-kafka's ``SchemaRegistryClient`` (``laminar[avro]``), which speaks
the Confluent API every compatible registry serves. This module decides what to ask and what an
answer means; the hot path asks nothing: a schema once registered or read is answered from the
process's cache, so an epoch whose schema did not change makes no registry call.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from laminar._redact import is_secret_key, redact_text
from laminar.errors import AbortableError, AuthorizationError, ConfigError, LaminarError

__all__ = [
    "LATEST",
    "SUBJECT_STRATEGIES",
    "AvroOptions",
    "RegistryClient",
    "field_changes",
    "registry_client",
    "subject_name",
]

#: Subject name strategies, as Confluent's serializers name them (``subject.name.strategy``).
SUBJECT_STRATEGIES = ("topic", "record", "topic_record")

#: What a ``schema_id`` may be besides an id: the subject's latest version.
LATEST = "latest"


@dataclass(frozen=True)
class AvroOptions:
    """How one side of a record (its value or its key) is written in Avro.

    ``record_name`` / ``namespace`` name the record derived from the Arrow schema (Spark's
    ``to_avro`` default name is ``topLevelRecord``). ``subject_strategy`` picks the subject:
    ``"topic"`` (``<topic>-value`` / ``<topic>-key``, Confluent's default), ``"record"`` (the
    record's full name) or ``"topic_record"`` (``<topic>-<full name>``). ``schema_id`` writes
    with a schema already in the registry instead of the derived one: an id, or ``"latest"``
    (the subject's latest version when the sink first writes); the batch's columns must fit it.
    """

    record_name: str = "topLevelRecord"
    namespace: str | None = None
    subject_strategy: Literal["topic", "record", "topic_record"] = "topic"
    schema_id: int | Literal["latest"] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.record_name, str) or not self.record_name:
            raise ConfigError(f"AvroOptions.record_name must be a name, not {self.record_name!r}")
        if self.namespace is not None and not isinstance(self.namespace, str):
            raise ConfigError(f"AvroOptions.namespace must be a string, not {self.namespace!r}")
        if self.subject_strategy not in SUBJECT_STRATEGIES:
            raise ConfigError(
                f"AvroOptions.subject_strategy must be one of {', '.join(SUBJECT_STRATEGIES)}, "
                f"not {self.subject_strategy!r}"
            )
        schema_id = self.schema_id
        if (
            schema_id is not None
            and schema_id != LATEST
            and (isinstance(schema_id, bool) or not isinstance(schema_id, int) or schema_id < 0)
        ):
            raise ConfigError(
                f"AvroOptions.schema_id must be a registry id (an int >= 0) or 'latest', "
                f"not {schema_id!r}"
            )

    @property
    def full_name(self) -> str:
        """The record's full name (``namespace.name``)."""
        return f"{self.namespace}.{self.record_name}" if self.namespace else self.record_name


def subject_name(options: AvroOptions, topic: str, role: Literal["key", "value"]) -> str:
    """The subject of ``role``'s schema on ``topic`` by ``options.subject_strategy`` (Confluent's
    TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy)."""
    if options.subject_strategy == "record":
        return options.full_name
    if options.subject_strategy == "topic_record":
        return f"{topic}-{options.full_name}"
    return f"{topic}-{role}"


def secret_values(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The registry settings' secrets (credentials), to scrub from any message."""
    out = []
    for key, value in config.items():
        key = str(key)
        if is_secret_key(key) or key.startswith(("basic.auth.user", "bearer.auth")):
            out.append(str(value))
            if ":" in str(value):
                out.extend(str(value).split(":", 1))  # user:password, both halves
    return tuple(v for v in out if v)


def _canonical(schema: str) -> str:
    """A schema's JSON with its spacing and key order normalised: two texts of one schema match."""
    return json.dumps(json.loads(schema), sort_keys=True, separators=(",", ":"))


def field_changes(old: str, new: str) -> list[str]:
    """The fields of ``new`` that differ from ``old``, by name (nested fields as ``a.b``):
    what a refused schema change names. A field is new, gone, or of another type."""

    def fields(schema: Any, prefix: str, out: dict[str, Any]) -> None:
        record = schema
        if isinstance(record, list):
            record = next((b for b in record if b != "null"), None)
        if not isinstance(record, dict):
            return
        if record.get("type") == "array":
            fields(record.get("items"), prefix, out)
            return
        if record.get("type") == "map":
            fields(record.get("values"), prefix, out)
            return
        for field in record.get("fields") or []:
            name = f"{prefix}{field.get('name')}"
            out[name] = field.get("type")
            fields(field.get("type"), f"{name}.", out)

    try:
        before: dict[str, Any] = {}
        after: dict[str, Any] = {}
        fields(json.loads(old), "", before)
        fields(json.loads(new), "", after)
    except ValueError:
        return []
    changes = []
    for name, kind in after.items():
        if name not in before:
            changes.append(f"'{name}' is new ({_show(kind)})")
        elif _leaf(before[name]) != _leaf(kind):
            changes.append(f"'{name}' changed from {_show(before[name])} to {_show(kind)}")
    changes += [f"'{name}' is gone" for name in before if name not in after]
    return changes


def _leaf(kind: Any) -> Any:
    """A type without its nested fields (those are compared by their own names)."""
    if isinstance(kind, list):
        return [_leaf(b) for b in kind]
    if isinstance(kind, dict):
        if kind.get("type") == "record":
            return "record"
        if kind.get("type") in ("array", "map"):
            return kind.get("type")
        return {k: v for k, v in kind.items() if k not in ("fields",)}
    return kind


def _show(kind: Any) -> str:
    text = json.dumps(_leaf(kind), separators=(",", ":"))
    return text if len(text) <= 80 else text[:77] + "..."


class RegistryClient:
    """One registry (its ``url`` and credentials), with the process's cache of its answers."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._config = dict(config)
        self._secrets = secret_values(self._config)
        self._url = str(self._config.get("url", ""))
        self._client: Any = None
        self._lock = threading.Lock()
        #: (subject, canonical schema) -> id: registered or found under the subject.
        self._ids: dict[tuple[str, str], int] = {}
        #: id -> schema text.
        self._schemas: dict[int, str] = {}
        #: subject -> (schema, id) of its latest version, as first read.
        self._latest: dict[str, tuple[str, int]] = {}

    @property
    def url(self) -> str:
        """The registry's URL (credentials in it masked)."""
        return self._scrub(self._url)

    def _scrub(self, text: str) -> str:
        return redact_text(text, self._secrets)

    def _sr(self) -> Any:
        if self._client is None:
            try:
                # laminar[avro] only: imported where a sink first needs its registry
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as e:  # confluent-kafka without its schemaregistry extra
                raise ConfigError(
                    "Avro with a Schema Registry needs confluent-kafka's registry client: "
                    "pip install 'laminar[avro]' (confluent-kafka[schemaregistry]) where the "
                    f"sink writes ({e})"
                ) from None
            try:
                self._client = SchemaRegistryClient(self._config)
            except (ValueError, TypeError) as e:
                raise ConfigError(
                    f"schema_registry settings are refused by the registry client: "
                    f"{self._scrub(str(e))}"
                ) from None
        return self._client

    # -- what the sink asks ----------------------------------------------------------------

    def register(self, subject: str, schema: str) -> int:
        """The id of ``schema`` under ``subject``: from the cache, else registered (the registry
        answers an existing schema's id; a new one becomes the subject's next version if the
        subject's compatibility accepts it). A refused change is a `ConfigError` naming the
        fields that changed."""
        key = (subject, _canonical(schema))
        with self._lock:
            found = self._ids.get(key)
        if found is not None:
            return found
        from confluent_kafka.schema_registry import Schema  # laminar[avro]: see _sr

        try:
            schema_id = int(
                self._call(lambda sr: sr.register_schema(subject, Schema(schema, "AVRO")))
            )
        except _RefusedError as refused:
            # Two writers registering one new schema at once (the tasks of a batch): a
            # registry may refuse the second with a conflict although the schema is now
            # there (Apicurio's "artifact … already exists"). Only a schema the subject does
            # not hold is a refused change.
            held = self._registered(subject, schema)
            if held is None:
                raise self._refused(subject, schema, refused.message) from None
            schema_id = held
        with self._lock:
            self._ids[key] = schema_id
            self._schemas[schema_id] = schema
        return schema_id

    def _registered(self, subject: str, schema: str) -> int | None:
        """The id of ``schema`` if ``subject`` already holds it (a lookup), else None."""
        from confluent_kafka.schema_registry import Schema  # laminar[avro]: see _sr

        try:
            found = self._call(lambda sr: sr.lookup_schema(subject, Schema(schema, "AVRO")))
        except _RefusedError:
            return None
        return int(found.schema_id)

    def schema(self, schema_id: int) -> str:
        """The schema with id ``schema_id`` (cached)."""
        with self._lock:
            found = self._schemas.get(schema_id)
        if found is not None:
            return found
        try:
            text = str(self._call(lambda sr: sr.get_schema(schema_id).schema_str))
        except _RefusedError as refused:
            raise ConfigError(
                f"the schema registry at {self.url} has no schema with id {schema_id} "
                f"({refused.message}); give an id it has, or no schema_id to register the "
                "schema of the batch"
            ) from None
        with self._lock:
            self._schemas[schema_id] = text
        return text

    def latest(self, subject: str) -> tuple[str, int]:
        """The latest version of ``subject`` (schema, id), as first read by this process."""
        with self._lock:
            found = self._latest.get(subject)
        if found is not None:
            return found
        try:
            registered = self._call(lambda sr: sr.get_latest_version(subject))
        except _RefusedError as refused:
            raise ConfigError(
                f"schema_id='latest' but the subject {subject!r} has no version in the schema "
                f"registry at {self.url} ({refused.message}); register one, or give no "
                "schema_id to register the schema of the batch"
            ) from None
        answer = (str(registered.schema.schema_str), int(registered.schema_id))
        with self._lock:
            self._latest[subject] = answer
            self._schemas[answer[1]] = answer[0]
        return answer

    # -- errors ----------------------------------------------------------------------------

    def _refused(self, subject: str, schema: str, message: str) -> ConfigError:
        """A schema change the subject's compatibility refuses, naming the fields."""
        changes: list[str] = []
        try:
            old = self._call(lambda sr: sr.get_latest_version(subject)).schema.schema_str
            changes = field_changes(str(old), schema)
        except LaminarError:
            pass
        what = "; ".join(changes) if changes else "see the registry's message"
        return ConfigError(
            f"the schema registry at {self.url} refuses the new schema of subject {subject!r}: "
            f"{what}. Registry: {message}. Nothing of the epoch was written; change the columns "
            "back, make the change compatible (a new column nullable, which gets a null "
            "default), or change the subject's compatibility level"
        )

    def _call(self, call: Any) -> Any:
        """``call(client)``, the registry's answers classified once: unreachable or a server
        error → `AbortableError` (retry the epoch), credentials → `AuthorizationError`,
        not found / refused (404, 409, 422) → `_RefusedError` for the caller to word."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError  # see _sr

        client = self._sr()
        try:
            return call(client)
        except SchemaRegistryError as e:
            status = e.http_status_code
            message = self._scrub(str(e.error_message))
            if status in (401, 403):
                raise AuthorizationError(
                    f"the schema registry at {self.url} refuses the credentials "
                    f"(HTTP {status}: {message}); check schema_registry's basic.auth settings "
                    "and the subject's permissions"
                ) from None
            if status in (404, 409, 422):
                raise _RefusedError(f"HTTP {status}, code {e.error_code}: {message}") from None
            raise AbortableError(
                f"the schema registry at {self.url} failed (HTTP {status}: {message}); the "
                "epoch is retried"
            ) from None
        except _transport_errors() as e:
            raise AbortableError(
                f"the schema registry at {self.url} is unreachable "
                f"({type(e).__name__}: {self._scrub(str(e))}); nothing of the epoch was "
                "written, and it is retried"
            ) from None


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The errors of the registry client's HTTP layer (connection refused, reset, time-out):
    httpx's, whichever distribution of it confluent-kafka uses (``httpx`` or ``httpx2``)."""
    try:
        # the httpx distribution confluent-kafka chose (httpx or httpx2), as it imports it
        from confluent_kafka.schema_registry.common._httpx_compat import httpx
    except ImportError:  # an older confluent-kafka: httpx itself
        try:
            import httpx  # type: ignore[no-redef, import-not-found, unused-ignore]
        except ImportError:
            return (OSError,)
    return (httpx.HTTPError, OSError)


class _RefusedError(Exception):
    """The registry answered no (not found, incompatible, invalid): the caller words it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_CLIENTS: dict[tuple[tuple[str, str], ...], RegistryClient] = {}
_CLIENTS_LOCK = threading.Lock()


def registry_client(config: Mapping[str, Any]) -> RegistryClient:
    """The process's client of the registry ``config`` describes (resolved settings): one per
    distinct configuration, so every sink of the process shares its cache."""
    if not str(config.get("url", "")).strip():
        raise ConfigError("schema_registry needs a 'url', e.g. {'url': 'http://registry:8081'}")
    key = tuple(sorted((str(k), repr(v)) for k, v in config.items()))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = RegistryClient(config)
        return client
