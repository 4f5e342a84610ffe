"""The KafkaSinks a decision database registered, built from their stored configuration: how the
tools that are not a writer — ``laminar status|resolve|recover`` (`laminar.protocol.admin`) and
the exporter (`laminar.exporter`) — read markers and complete transactions."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from typing import Any, cast

import psycopg

from laminar._core import participant_base
from laminar._redact import SECRET
from laminar.engine import records as _records
from laminar.errors import ConfigError, FatalError, LaminarError
from laminar.kafka.log import ClientSecurity, KafkaLogClient, UnsupportedSecurityError
from laminar.kafka.sink import KafkaSink
from laminar.protocol.distributed import kafka_participant

__all__ = ["RegisteredKafkaSinks"]


class RegisteredKafkaSinks:
    """Builds KafkaSinks from their registered configuration (``laminar.sinks.config``, read at
    construction or `reload`) plus client settings given by the caller (the secrets, which are
    never stored): called with a transactional id, it answers that sink (a Kafka participant's
    ``<tid>.p<n>`` from its base sink), None when it is not registered. Sinks are kept until
    `close`."""

    def __init__(self, conn: psycopg.Connection[Any], extra: dict[str, str]) -> None:
        self.configs: dict[str, Any] = {}
        self.reload(conn)
        self.extra = extra
        self.sinks: dict[str, Any] = {}
        self._reachability: dict[str, str] = {}

    def reload(self, conn: psycopg.Connection[Any]) -> None:
        """Read the registered configurations again (sinks registered since are found); leaves
        no transaction open."""
        self.configs = _records.read_kafka_registry(conn)
        conn.rollback()

    def __call__(self, transactional_id: str) -> Any:
        if transactional_id in self.sinks:
            return self.sinks[transactional_id]
        config = self.configs.get(transactional_id)
        if config is None:
            base_part = participant_base(transactional_id)
            if base_part is None:
                return None
            base = self(base_part[0])
            if base is None:
                return None
            self.sinks[transactional_id] = kafka_participant(base, base_part[1])
            return self.sinks[transactional_id]
        producer = {
            k: v for k, v in dict(config.get("producer_config") or {}).items() if v != SECRET
        }
        producer.update(self.extra)
        if isinstance(producer.get("oauth_cb"), str):
            producer["oauth_cb"] = _callable(str(producer["oauth_cb"]))
        self._check_reachable(str(config["bootstrap_servers"]), producer)
        sink = KafkaSink(
            config["bootstrap_servers"],
            config["topic"],
            transactional_id,
            key=config.get("key"),
            value_format=config.get("value_format") or "json",
            producer_config=producer,
            init_timeout_s=10.0,
            commit_timeout_s=10.0,
        )
        self.sinks[transactional_id] = sink
        return sink

    def _check_reachable(self, bootstrap: str, producer: dict[str, Any]) -> None:
        """Fail fast (a few seconds, once per cluster) when a registered sink's brokers do not
        answer — a decommissioned cluster must not stall `status` or `recover` behind
        librdkafka's retries."""

        known = self._reachability.get(bootstrap)
        if known is None:
            known = ""
            try:
                security = ClientSecurity.from_config(producer)
                with KafkaLogClient(bootstrap, timeout=5.0, security=security) as client:
                    client.connect()
            except UnsupportedSecurityError:
                pass  # not checkable here: librdkafka's own timeouts apply
            except LaminarError as e:
                known = str(e)
            self._reachability[bootstrap] = known
        if known:
            raise FatalError(f"the brokers at {bootstrap} do not answer: {known}")

    def close(self) -> None:
        """Close every sink built (a failing close is not an error of the caller's)."""
        for sink in self.sinks.values():
            with contextlib.suppress(LaminarError):
                sink.close()


def _callable(reference: str) -> Callable[..., Any]:
    """The callable a ``module:attribute`` reference names (``--kafka-config
    oauth_cb=my_tokens:msk_token``: a token provider given to the CLI and the exporter, which
    take strings); a `ConfigError` naming it otherwise."""
    module, _, attribute = reference.partition(":")
    try:
        found: Any = importlib.import_module(module.strip())
        for part in attribute.strip().split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(
            f"oauth_cb={reference!r}: not a 'module:function' reference to an importable "
            f"callable ({type(e).__name__}: {e})"
        ) from None
    if not attribute.strip() or not callable(found):
        raise ConfigError(f"oauth_cb={reference!r} does not name a callable ('module:function')")
    return cast("Callable[..., Any]", found)
