"""``laminar exporter``'s metrics: a Prometheus collector that reads the ``laminar`` schema at
each scrape (docs/operations.md, "Metrics and alerts"; the tables: docs/formats.md §3).

Each scrape opens one read-only transaction on the decision database and reads what ``laminar
status`` reads — the registry and each PostgreSQL sink's last epoch, the Kafka sinks' decisions,
the distributed transactions and their participants, the stop fences, the commit statistics,
and Laminar's prepared transactions in ``pg_prepared_xacts`` — and, unless told not to, each
decided Kafka epoch against its sink's marker in Kafka (the watcher's inspection without acting,
`laminar.protocol.watcher.inspect`). Nothing is written anywhere.

A scrape that cannot read still answers: ``laminar_up 0`` and the error counted in
``laminar_exporter_scrape_errors_total`` (the alert "exporter unable to read"); a Kafka check
that fails counts as a ``kafka`` error and the PostgreSQL metrics stand, and so does a decided
Kafka epoch whose marker cannot be read (the inspection's outcome ``unreadable``: counted as
behind, since it is unproven, and as an error, since the operator must fix the read). Labels
hold group ids, sink ids and kinds — never a DSN, a host or a credential; errors are logged
redacted.

`Snapshot` is what one scrape read and `families` turns it into metric families, a pure
function (its unit test needs no server).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from laminar._core import participant_base, participant_open
from laminar._redact import redact_dsn, redact_text
from laminar._stats import BUCKETS_S
from laminar.metadata import applied_version
from laminar.postgres._errors import map_pg_error

if TYPE_CHECKING:
    from laminar.protocol.kafka_sinks import RegisteredKafkaSinks

__all__ = ["LaminarCollector", "Snapshot", "families", "read_kafka_behind", "read_snapshot"]

log = logging.getLogger("laminar.exporter")


@dataclass
class Snapshot:
    """What one scrape read from the decision database (and Kafka)."""

    schema_version: int = 0
    #: ``(sink_id, kind, members, generation, epoch, committed_at_unix_s, age_s)``
    sinks: list[tuple[Any, ...]] = field(default_factory=list)
    #: ``(transactional_id, epoch, group_id, decided_at_unix_s, age_s)``
    decisions: list[tuple[str, int, str, float, float]] = field(default_factory=list)
    #: ``(dtid, group_id, epoch, state, age_s)``
    distributed: list[tuple[str, str, int, str, float]] = field(default_factory=list)
    #: ``(dtid, participant, kind, resource, state)``
    participants: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    #: ``(group_id, epoch, age_s)``
    fences: list[tuple[str, int, float]] = field(default_factory=list)
    #: ``(group_id, commits, aborts, latency_sum_s, latency_buckets)``
    stats: list[tuple[str, int, int, float, list[int]]] = field(default_factory=list)
    #: ``(gid, sink_id or the gid's sink part, age_s)``
    prepared: list[tuple[str, str, float]] = field(default_factory=list)
    #: Decided Kafka epochs whose marker is behind: ``(transactional_id, epoch, age_s)``.
    kafka_behind: list[tuple[str, int | None, float]] = field(default_factory=list)


def read_snapshot(conn: psycopg.Connection[Any]) -> Snapshot:
    """Read a `Snapshot` of the decision database on ``conn`` (rolled back after: nothing is
    written); its Kafka part is `read_kafka_behind`'s."""
    # in-function: these modules pull in the sinks; the collector's import stays light
    from laminar.engine import records as _records  # (see above)
    from laminar.postgres._steps import list_prepared  # (see above)

    snap = Snapshot()
    try:
        version = applied_version(conn)
        if version is None:
            return snap
        snap.schema_version = version
        snap.sinks = _records.read_metric_sinks(conn)
        snap.decisions = [
            (d.transactional_id, d.epoch, d.group_id, d.decided_at.timestamp(), d.age_s)
            for d in _records.read_decisions(conn)
        ]
        rows, parts = _records.read_dt_status(conn)
        snap.distributed = [(str(r[0]), str(r[1]), int(r[2]), str(r[3]), float(r[5])) for r in rows]
        snap.participants = [(str(d), str(p), str(k), str(r), str(s)) for d, p, k, r, s in parts]
        if version >= 3:
            snap.fences = _records.read_stop_fences(conn, reservable=version >= 5)
        if version >= 4:
            snap.stats = _records.read_commit_stats(conn)
        snap.prepared = [
            (p.gid, p.sink_id or p.gid.split(":")[1], p.age_s) for p in list_prepared(conn)
        ]
    finally:
        conn.rollback()
    return snap


def read_kafka_behind(
    conn: psycopg.Connection[Any], kafka_sink: Callable[[str], Any]
) -> list[tuple[str, int | None, float]]:
    """The decided Kafka epochs whose sink's marker is behind: ``(transactional_id, epoch,
    age_s)``, read with ``kafka_sink`` (a KafkaSink factory by transactional id, as ``laminar
    status`` builds one) through the watcher's inspection, without acting."""
    return [(i.id.removeprefix("kafka:"), i.epoch, i.age_s) for i in _kafka_items(conn, kafka_sink)]


def _kafka_items(conn: psycopg.Connection[Any], kafka_sink: Callable[[str], Any]) -> list[Any]:
    """The watcher's ``kafka_behind`` items (an epoch decided and its marker behind, or its
    marker unreadable: outcome ``unreadable``, the reason in ``detail``)."""
    from laminar.protocol.watcher import inspect  # in-function: see read_snapshot

    try:
        items = inspect(conn, kafka_sink=kafka_sink)
    finally:
        conn.rollback()
    return [i for i in items if i.kind == "kafka_behind"]


def _open(state: str) -> bool:
    """Whether a participant in ``state`` may hold its transaction open (the core's
    `participant_open`); a state the core does not know (a row written by hand) counts as open
    rather than failing the scrape."""
    try:
        return participant_open(state)
    except ValueError:
        return True


def _base(transactional_id: str) -> str:
    """A Kafka participant's sink (``<tid>.p<n>`` → ``<tid>``), else the id itself."""
    found = participant_base(transactional_id)
    return found[0] if found is not None else transactional_id


def families(snap: Snapshot) -> Iterator[Metric]:
    """The metric families of one `Snapshot` (docs/operations.md lists them)."""
    groups: dict[str, list[str]] = {}
    generation: dict[str, int] = {}
    kinds: dict[str, str] = {}
    pg_epochs: dict[str, tuple[int, float, float]] = {}
    for sink_id, kind, members, gen, epoch, at, age in snap.sinks:
        kinds[sink_id] = kind
        if kind == "atomic_group":
            groups[sink_id] = [str(m) for m in (members or [])]
            generation[sink_id] = int(gen)
        elif epoch is not None:
            pg_epochs[sink_id] = (int(epoch), float(at), float(age))
    group_of = {m: g for g, ms in groups.items() for m in ms}
    for tid, _, group_id, _, _ in snap.decisions:
        groups.setdefault(group_id, [])
        group_of.setdefault(_base(tid), group_id)
    for _, group_id, _, _, _ in snap.distributed:
        groups.setdefault(group_id, [])
    for fenced, *_ in snap.fences:
        groups.setdefault(fenced, [])
    for counted, *_ in snap.stats:
        groups.setdefault(counted, [])

    # -- per sink: the last committed (PostgreSQL) or decided (Kafka) epoch --------------------
    sink_epoch = GaugeMetricFamily(
        "laminar_sink_last_committed_epoch",
        "Last epoch committed by a PostgreSQL sink (laminar.sink_epochs), or decided for a "
        "Kafka sink (laminar.txn_state; its Kafka commit completes it)",
        labels=["sink", "kind", "group"],
    )
    sink_age = GaugeMetricFamily(
        "laminar_sink_last_commit_age_seconds",
        "Seconds since that epoch was committed (decided), by the database's clock",
        labels=["sink", "kind", "group"],
    )
    # group: (epoch, unix time, age) of its newest commit
    last: dict[str, tuple[int, float, float]] = {}

    def newer(key: str, value: tuple[int, float, float], into: dict[str, Any]) -> None:
        """Keep the later epoch (of one epoch, its latest record: the smallest age)."""
        if key not in into or (value[0], -value[2]) > (into[key][0], -into[key][2]):
            into[key] = value

    for sink_id, value in sorted(pg_epochs.items()):
        group = group_of.get(sink_id, "")
        sink_epoch.add_metric([sink_id, "postgres", group], value[0])
        sink_age.add_metric([sink_id, "postgres", group], value[2])
        if group:
            newer(group, value, last)
    kafka_last: dict[str, tuple[int, float, float]] = {}
    for tid, epoch, group_id, at, age in snap.decisions:
        newer(_base(tid), (epoch, at, age), kafka_last)
        newer(group_id, (epoch, at, age), last)
    for sink_id, value in sorted(kafka_last.items()):
        group = group_of.get(sink_id, "")
        sink_epoch.add_metric([sink_id, "kafka", group], value[0])
        sink_age.add_metric([sink_id, "kafka", group], value[2])
    yield sink_epoch
    yield sink_age

    # -- per group ------------------------------------------------------------------------------
    g_epoch = GaugeMetricFamily(
        "laminar_group_last_committed_epoch",
        "Last epoch an atomic group committed (its decision)",
        labels=["group"],
    )
    g_time = GaugeMetricFamily(
        "laminar_group_last_commit_timestamp_seconds",
        "Unix time of the group's last commit",
        labels=["group"],
    )
    g_age = GaugeMetricFamily(
        "laminar_group_last_commit_age_seconds",
        "Seconds since the group's last commit, by the database's clock",
        labels=["group"],
    )
    for group, (epoch, at, age) in sorted(last.items()):
        g_epoch.add_metric([group], epoch)
        g_time.add_metric([group], at)
        g_age.add_metric([group], age)
    yield g_epoch
    yield g_time
    yield g_age
    g_gen = GaugeMetricFamily(
        "laminar_group_generation",
        "The group's fencing generation: it moves at every start of a writer or commit process",
        labels=["group"],
    )
    for group, gen in sorted(generation.items()):
        g_gen.add_metric([group], gen)
    yield g_gen

    # epochs in doubt: distributed transactions not concluded, decided Kafka epochs behind
    doubt: dict[str, dict[int | None, float]] = {g: {} for g in groups}
    for _, group_id, epoch, _, age in snap.distributed:
        seen = doubt.setdefault(group_id, {})
        seen[epoch] = max(age, seen.get(epoch, 0.0))
    for tid, epoch, age in snap.kafka_behind:
        group = group_of.get(_base(tid), "")
        seen = doubt.setdefault(group, {})
        seen[epoch] = max(age, seen.get(epoch, 0.0))
    in_doubt = GaugeMetricFamily(
        "laminar_group_epochs_in_doubt",
        "Epochs begun and not concluded: distributed transactions (laminar.dt_state) and decided "
        "Kafka epochs behind their marker; an epoch being written counts while it is",
        labels=["group"],
    )
    oldest = GaugeMetricFamily(
        "laminar_group_oldest_in_doubt_age_seconds",
        "Age of the group's oldest epoch in doubt (0: none)",
        labels=["group"],
    )
    for group, epochs in sorted(doubt.items()):
        in_doubt.add_metric([group], len(epochs))
        oldest.add_metric([group], max(epochs.values(), default=0.0))
    yield in_doubt
    yield oldest

    commits = CounterMetricFamily(
        "laminar_group_commits",
        "Epochs the group's writers committed (laminar.commit_stats)",
        labels=["group"],
    )
    aborts = CounterMetricFamily(
        "laminar_group_aborts",
        "Epoch attempts the group's writers rolled back (laminar.commit_stats)",
        labels=["group"],
    )
    latency = HistogramMetricFamily(
        "laminar_group_commit_latency_seconds",
        "Commit latency of the group's epochs (steps 1-8: lock to Kafka commit)",
        labels=["group"],
    )
    for group, n_commits, n_aborts, total_s, counts in snap.stats:
        commits.add_metric([group], n_commits)
        aborts.add_metric([group], n_aborts)
        cumulative, buckets = 0, []
        for i, bound in enumerate((*BUCKETS_S, float("inf"))):
            cumulative += counts[i] if i < len(counts) else 0
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), float(cumulative)))
        latency.add_metric([group], buckets, total_s)
    yield commits
    yield aborts
    yield latency

    fence_epoch = GaugeMetricFamily(
        "laminar_stop_fence_epoch",
        "The epoch up to which a stopped query's group is fenced (laminar.stop_fence)",
        labels=["group"],
    )
    fence_age = GaugeMetricFamily(
        "laminar_stop_fence_age_seconds",
        "Seconds since the group's stop fence was set; the next run of the query lifts it",
        labels=["group"],
    )
    for group, epoch, age in snap.fences:
        fence_epoch.add_metric([group], epoch)
        fence_age.add_metric([group], age)
    yield fence_epoch
    yield fence_age
    yield GaugeMetricFamily(
        "laminar_stop_fences", "Stop fences in place", value=float(len(snap.fences))
    )

    # -- transactions Laminar holds open -------------------------------------------------------
    yield from _transactions(snap, kinds, group_of)


def _transactions(
    snap: Snapshot, kinds: dict[str, str], group_of: dict[str, str]
) -> Iterable[Metric]:
    prepared: dict[str, list[float]] = {s: [] for s, k in kinds.items() if k == "postgres"}
    for _, sink, prepared_s in snap.prepared:
        prepared.setdefault(sink, []).append(prepared_s)
    count = GaugeMetricFamily(
        "laminar_prepared_transactions",
        "Laminar's prepared PostgreSQL transactions (pg_prepared_xacts, gids laminar:...) in "
        "the exporter's database",
        labels=["sink", "group"],
    )
    age = GaugeMetricFamily(
        "laminar_prepared_transaction_oldest_age_seconds",
        "Age of the sink's oldest prepared transaction (0: none)",
        labels=["sink", "group"],
    )
    for sink, ages in sorted(prepared.items()):
        count.add_metric([sink, group_of.get(sink, "")], len(ages))
        age.add_metric([sink, group_of.get(sink, "")], max(ages, default=0.0))
    yield count
    yield age

    # Kafka: a scale-out participant's transaction (prepared by its task) until its
    # distributed transaction concludes; a decided epoch whose marker is behind
    dt_age = {dtid: a for dtid, _, _, _, a in snap.distributed}
    open_kafka: dict[str, dict[str, float]] = {s: {} for s, k in kinds.items() if k == "kafka"}
    for dtid, _, kind, resource, state in snap.participants:
        if kind == "kafka" and _open(state):
            open_kafka.setdefault(_base(resource), {})[resource] = dt_age.get(dtid, 0.0)
    for tid, _, behind in snap.kafka_behind:
        seen = open_kafka.setdefault(_base(tid), {})
        seen[tid] = max(behind, seen.get(tid, 0.0))
    k_count = GaugeMetricFamily(
        "laminar_kafka_open_transactions",
        "Kafka transactions Laminar holds open: scale-out participants not concluded, decided "
        "epochs not yet committed in Kafka",
        labels=["sink", "group"],
    )
    k_age = GaugeMetricFamily(
        "laminar_kafka_open_transaction_oldest_age_seconds",
        "Age of the sink's oldest open Kafka transaction (0: none)",
        labels=["sink", "group"],
    )
    for sink, found in sorted(open_kafka.items()):
        k_count.add_metric([sink, group_of.get(sink, "")], len(found))
        k_age.add_metric([sink, group_of.get(sink, "")], max(found.values(), default=0.0))
    yield k_count
    yield k_age


class LaminarCollector(Collector):
    """Reads a `Snapshot` at each scrape (module docstring). ``dsn`` is resolved by the caller
    (an environment variable's value: never shown); ``kafka_extra`` are Kafka client settings
    for reading markers (``None``: Kafka is not checked)."""

    def __init__(
        self,
        dsn: str,
        *,
        kafka_extra: dict[str, str] | None = None,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self._dsn = dsn
        self._kafka_extra = kafka_extra
        self._timeout = connect_timeout_s
        self._kafka: RegisteredKafkaSinks | None = None
        self.errors: dict[str, int] = defaultdict(int)
        self.errors.update({"postgres": 0, "kafka": 0})
        self.last_error = ""

    def __repr__(self) -> str:
        return f"LaminarCollector({redact_dsn(self._dsn)})"

    def _fail(self, source: str, error: BaseException) -> None:
        password = self._password()
        if isinstance(error, psycopg.Error):
            # one mapping of PostgreSQL's errors: a missing grant says which to give
            error = map_pg_error(error, f"reading {source}", secrets=(password,))
        self._count(source, f"{type(error).__name__}: {error}")

    def _count(self, source: str, text: str) -> None:
        """One error reading ``source``: counted, kept (redacted) and logged."""
        self.errors[source] += 1
        self.last_error = redact_text(text, (self._password(),))
        log.warning("laminar exporter: cannot read %s: %s", source, self.last_error)

    def _password(self) -> str:
        return str(psycopg.conninfo.conninfo_to_dict(self._dsn).get("password") or "")

    def _factory(self, conn: psycopg.Connection[Any]) -> Callable[[str], Any] | None:
        if self._kafka_extra is None:
            return None
        # in-function: the Kafka sinks load only when Kafka is checked
        from laminar.protocol.kafka_sinks import RegisteredKafkaSinks

        if self._kafka is None:
            self._kafka = RegisteredKafkaSinks(conn, dict(self._kafka_extra))
        else:
            self._kafka.reload(conn)
        return self._kafka

    def read(self) -> tuple[Snapshot, bool]:
        """One scrape's `Snapshot`, and whether the database was read."""
        try:
            with psycopg.connect(
                self._dsn,
                connect_timeout=max(1, round(self._timeout)),
                application_name="laminar exporter",
            ) as conn:
                conn.read_only = True
                snap = read_snapshot(conn)
                try:
                    factory = self._factory(conn)
                    if factory is not None:
                        items = _kafka_items(conn, factory)
                        snap.kafka_behind = [
                            (i.id.removeprefix("kafka:"), i.epoch, i.age_s) for i in items
                        ]
                        for item in items:
                            if item.outcome == "unreadable":
                                # counted as behind (unproven), and an error: a marker the
                                # exporter cannot read is what the operator must fix
                                self._count("kafka", f"{item.id}: {item.detail}")
                except Exception as e:  # Kafka down: the PostgreSQL metrics stand
                    self._fail("kafka", e)
                    conn.rollback()
                return snap, True
        except Exception as e:
            self._fail("postgres", e)
            return Snapshot(), False

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        snap, up = self.read()
        if up:
            yield from families(snap)
        yield GaugeMetricFamily(
            "laminar_up", "1 if the last scrape read the laminar schema, else 0", value=int(up)
        )
        yield GaugeMetricFamily(
            "laminar_schema_version",
            "The laminar schema's version in the database (0: no schema yet)",
            value=snap.schema_version,
        )
        errors = CounterMetricFamily(
            "laminar_exporter_scrape_errors",
            "Scrapes that could not read a source (postgres: the decision database, kafka: "
            "the Kafka markers)",
            labels=["source"],
        )
        for source, n in sorted(self.errors.items()):
            errors.add_metric([source], n)
        yield errors
        yield GaugeMetricFamily(
            "laminar_exporter_scrape_duration_seconds",
            "How long the last scrape took",
            value=time.perf_counter() - started,
        )

    def close(self) -> None:
        """Close the Kafka sinks built for reading markers."""
        if self._kafka is not None:
            with contextlib.suppress(Exception):
                self._kafka.close()
            self._kafka = None
