"""The producers this process keeps between scale-out tasks: a participant's producer, its
marker consumer and what their callbacks reported (a `_Runtime`), kept after the task prepared
an epoch with them, for the process's next task of the same transactional id and settings
(docs/protocol.md §4, "A kept producer").

A new producer per task costs its handle, its connections, FindCoordinator and InitProducerId
(25-85 ms a task, docs/benchmarks.md); a kept one ends the transaction it prepared (the core's
`kept_transaction_committed`: commit what the marker proves committed, else abort) and writes
again. Spark runs a worker's tasks one after another, so a kept runtime is taken by one task at a
time; another process's new producer fences it, and its first call then fails: the task opens a
new one, as it would have anyway.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException

from laminar._core import kept_transaction_committed
from laminar.errors import LaminarError
from laminar.kafka._calls import StuckCallError, retire

if TYPE_CHECKING:
    from laminar.kafka._base import PartSettings
    from laminar.kafka._clients import Clients
    from laminar.kafka._runtime import _Runtime
    from laminar.kafka._witness import Witness

__all__ = [
    "MAX_IDLE_S",
    "MAX_KEPT",
    "Kept",
    "expire",
    "keep",
    "key_of",
    "release",
    "release_all",
    "resume",
    "take",
]

log = logging.getLogger("laminar.kafka")

#: Runtimes kept per process, the least recently kept released first: one per participant a
#: worker writes (a query's partitions), bounded so that a worker of many queries holds few
#: connections.
MAX_KEPT = 16
#: A runtime no task took for this long is released: its clients hold connections (and
#: librdkafka logs their failures) for a query that may have ended. A query's next batch comes
#: sooner at any trigger interval under it.
MAX_IDLE_S = 60.0


@dataclass
class Kept:
    """A participant's runtime and the epoch its producer's open transaction prepared."""

    rt: _Runtime
    epoch: int
    kept_at: float


_LOCK = threading.Lock()
_KEPT: OrderedDict[str, Kept] = OrderedDict()
#: Runtimes a forked child inherited: their librdkafka threads do not exist there, so they are
#: never used nor destroyed (the parent's handles are the parent's).
_INHERITED: list[Kept] = []
#: The process whose expiry thread runs (a forked child starts its own).
_expiring_in: list[int] = []


def key_of(cfg: PartSettings) -> str:
    """Which runtimes a sink may take: the same transactional id, topic, servers, settings and
    derived time-outs (a digest: a callable setting differs in each unpickled copy, so such a
    sink keeps none)."""
    settings = repr(
        (
            cfg.topic,
            cfg.bootstrap_servers,
            sorted(cfg.producer_config.items()),
            cfg.transaction_timeout_ms,
            cfg.timeouts.librdkafka_settings(),  # the time-outs its clients were built with
            cfg.marker_group,
        )
    )
    return cfg.sink_id + "\0" + hashlib.sha256(settings.encode()).hexdigest()


def keep(key: str, rt: _Runtime, epoch: int) -> None:
    """Keep ``rt`` (its producer prepared ``epoch``) for the next task of ``key``."""
    with _LOCK:
        replaced = _KEPT.pop(key, None)
        _KEPT[key] = Kept(rt, epoch, time.monotonic())
        evicted = [replaced] if replaced is not None else []
        while len(_KEPT) > MAX_KEPT:
            evicted.append(_KEPT.popitem(last=False)[1])
        if _expiring_in != [os.getpid()]:
            _expiring_in[:] = [os.getpid()]
            threading.Thread(target=_expire, name="laminar-kept-expiry", daemon=True).start()
    for kept in evicted:
        release(kept)


def expire(now: float) -> int:
    """Release the runtimes kept longer than `MAX_IDLE_S` before ``now``; how many."""
    with _LOCK:
        stale = [key for key, kept in _KEPT.items() if now - kept.kept_at > MAX_IDLE_S]
        expired = [_KEPT.pop(key) for key in stale]
    for kept in expired:
        release(kept)
    return len(expired)


def _expire() -> None:
    pid = os.getpid()
    while _expiring_in == [pid]:
        time.sleep(MAX_IDLE_S / 4)
        expire(time.monotonic())


def take(key: str) -> Kept | None:
    """The runtime kept for ``key`` (no longer kept), or None."""
    with _LOCK:
        return _KEPT.pop(key, None)


def resume(
    cfg: PartSettings,
    clients_for: Callable[[_Runtime], Clients],
    witness_for: Callable[[_Runtime], Witness],
    deadline: float,
) -> _Runtime | None:
    """The runtime kept for the sink of ``cfg`` (no longer kept), its producer's prepared
    transaction ended by the core's rule (`kept_transaction_committed`: commit what the marker
    proves committed, else abort); None if none is kept, or the kept producer failed that call
    (fenced by a newer one, say): the start-up then opens new clients, as it would have. Its
    calls are the start-up's: they end by its ``deadline`` (``time.monotonic()``), one
    ``init_timeout_s`` for the whole start-up however it goes."""
    kept = take(key_of(cfg))
    if kept is None:
        return None
    rt = kept.rt
    rt.fenced = None
    rt.without_marker = None
    rt.partition_counts.clear()
    rt.client_errors.clear()
    rt.startup_deadline = deadline
    try:
        # the last committed value at once, a pending one never (`Witness.read_marker`)
        marker = witness_for(rt).committed_through_consumer()
        commit = kept_transaction_committed(
            kept.epoch, marker.offset if marker.offset >= 0 else None
        )
        clients_for(rt).end_kept(commit)
    except (LaminarError, KafkaException, StuckCallError) as e:
        log.info(
            "sink %s: the producer kept since epoch %d is not reused (%s); opening a new one",
            cfg.sink_id,
            kept.epoch,
            cfg.scrub(str(e)),
        )
        release(kept)
        return None
    finally:
        rt.startup_deadline = None
    return rt


def release(kept: Kept) -> None:
    """Close a kept runtime's clients on daemon threads: its producer destroyed (its open
    transaction is the coordinator's to complete, as when a task releases it), its consumer
    closed."""
    rt = kept.rt
    producer, rt.producer = rt.producer, None
    retire(producer)
    consumer, rt.consumer = rt.consumer, None
    if consumer is not None:  # closing may wait on a hung coordinator: not on this thread
        threading.Thread(target=_close_quietly, args=(consumer,), daemon=True).start()


def _close_quietly(consumer: object) -> None:
    with contextlib.suppress(Exception):
        consumer.close()  # type: ignore[attr-defined]


def release_all() -> None:
    """Release every kept runtime (at exit, and for tests)."""
    with _LOCK:
        kept = list(_KEPT.values())
        _KEPT.clear()
    for k in kept:
        release(k)


def _after_fork_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()
    _INHERITED.extend(_KEPT.values())
    _KEPT.clear()
    _expiring_in.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(release_all)
