"""A replicated Apache Kafka cluster on loopback: N KRaft nodes (3 by default), each its own JVM
that is both a broker and a voter of the controller quorum, with the settings of a production
cluster where they matter to exactly-once — replication factor 3, ``min.insync.replicas=2`` (for
topics, the consumer offsets and the transaction state), no unclean leader election — so that
failover tests kill a broker the way production loses one (SIGKILL), or hang one (SIGSTOP:
`pause`, its sockets open and nothing answering), and watch the rest of the cluster ride it out.

A node is chosen by its role, read from the cluster as it is now: the transaction coordinator of
a transactional id, the group coordinator of a consumer group, the leader of a partition::

    with KafkaCluster() as cluster:
        cluster.create_topic("orders", partitions=3)          # replication factor 3
        victim = cluster.transaction_coordinator("orders-eo")
        cluster.kill(victim)                                  # SIGKILL: a crash
        ...
        cluster.start_node(victim)                            # same ports, same data
        cluster.wait_in_sync()                                # every replica caught up
        hung = cluster.leader("orders", 0)
        cluster.pause(hung)                                   # SIGSTOP: a hung broker
        try:
            ...
        finally:
            cluster.resume(hung)                              # SIGCONT, always

The jars are the single broker's (`laminar.embedded.kafka`: bootstrap resolves them once).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from laminar.embedded._process import EmbeddedServerError, free_port, wait_until
from laminar.embedded._server import KafkaAdmin
from laminar.embedded.kafka import KafkaBroker, find_kafka_libs, new_cluster_id

__all__ = ["KafkaCluster", "cluster_settings"]

#: How a controller logs the quorum's leader of a new epoch (``active_controller``).
_QUORUM_LEADER = re.compile(r"In the new epoch (\d+), the leader is (\d+)\.")


def cluster_settings(replication_factor: int, min_insync_replicas: int) -> dict[str, str]:
    """The settings every node of a cluster shares (``node.id``, listeners and the quorum are
    each node's own)."""
    rf, isr = str(replication_factor), str(min_insync_replicas)
    return {
        "process.roles": "broker,controller",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "num.partitions": "1",
        "default.replication.factor": rf,
        "min.insync.replicas": isr,
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": "6",
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        "transaction.state.log.num.partitions": "6",
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": isr,
        "group.initial.rebalance.delay.ms": "0",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        # A SIGKILLed node is fenced by the controller once its session expires; a restarted one
        # registers again after that. Short, but not so short that a GC pause on a loaded
        # 2-core machine fences a live node.
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "6000",
        # Followers that fall behind (a restarted node) leave the ISR after this.
        "replica.lag.time.max.ms": "10000",
        # How long a broker waits for another broker's answer — the transaction coordinator's
        # commit markers to a partition leader among them. Kafka's 30 s default holds the next
        # transaction of a transactional id (CONCURRENT_TRANSACTIONS) that long when a leader
        # hangs with markers in flight; below the session time-out, the markers go to the new
        # leader right after the hung one is fenced (docs/operations.md, "A hung broker").
        "request.timeout.ms": "3000",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "num.replica.fetchers": "1",
        "log.cleaner.threads": "1",
    }


class KafkaCluster(KafkaAdmin):
    """``nodes`` Apache Kafka KRaft nodes on 127.0.0.1, each a broker and a controller (module
    docstring). ``config`` adds or overrides settings of every node; ``heap`` is each JVM's
    ``-Xmx``. Data lives in a temporary directory until `stop`."""

    def __init__(
        self,
        nodes: int = 3,
        *,
        replication_factor: int = 3,
        min_insync_replicas: int = 2,
        config: Mapping[str, str] | None = None,
        heap: str = "384m",
        libs: str | os.PathLike[str] | None = None,
        startup_timeout: float = 180.0,
        log_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if nodes < 1 or not 1 <= min_insync_replicas <= replication_factor <= nodes:
            raise ValueError(
                f"need 1 <= min_insync_replicas ({min_insync_replicas}) <= replication_factor "
                f"({replication_factor}) <= nodes ({nodes})"
            )
        self.host = "127.0.0.1"
        self.port = 0
        self.size = nodes
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self._config = dict(config or {})
        self.heap = heap
        self._libs = Path(libs) if libs is not None else None
        self.startup_timeout = startup_timeout
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self.cluster_id = new_cluster_id()
        self.nodes: dict[int, KafkaBroker] = {}
        self._dir: Path | None = None
        #: Seconds the last `start` took.
        self.startup_s: float | None = None

    # -- the cluster --------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """Every node's ``host:port``, comma-separated (clients find the rest themselves)."""
        if not self.nodes:
            raise EmbeddedServerError("the cluster has not been started")
        return ",".join(f"{self.host}:{b.port}" for b in self.nodes.values())

    def start(self) -> KafkaCluster:
        """Start every node (the first start formats them with one cluster id) and wait until
        each answers with every partition led; return ``self``."""
        began = time.monotonic()
        if not self.nodes:
            libs = self._libs or find_kafka_libs()
            self._dir = Path(tempfile.mkdtemp(prefix="laminar-kafka-cluster-"))
            logs = self._log_dir or self._dir
            logs.mkdir(parents=True, exist_ok=True)
            ports = {n: (free_port(self.host), free_port(self.host)) for n in self._ids()}
            quorum = ",".join(f"{n}@{self.host}:{c}" for n, (_, c) in ports.items())
            settings = cluster_settings(self.replication_factor, self.min_insync_replicas)
            for n, (port, controller) in ports.items():
                self.nodes[n] = KafkaBroker(
                    port=port,
                    controller_port=controller,
                    config=self._config,
                    heap=self.heap,
                    libs=libs,
                    log_path=logs / f"kafka-{n}.log",
                    startup_timeout=self.startup_timeout,
                    node_id=n,
                    quorum=quorum,
                    cluster_id=self.cluster_id,
                    base_settings=settings,
                )
            self.port = ports[1][0]
        try:
            for broker in self.nodes.values():
                broker.start(wait=False)
            for broker in self.nodes.values():
                broker.wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop every node (a controlled shutdown) and remove the data."""
        for broker in self.nodes.values():
            broker.resume()
            broker.stop(timeout=15.0)
        self.nodes.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        running = [n for n, b in self.nodes.items() if b.is_running()]
        return f"KafkaCluster({self.size} nodes, running {running}, RF {self.replication_factor})"

    # -- one node -----------------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (its broker and its controller): a crash. Its data stays."""
        self._node(node_id).kill()

    def stop_node(self, node_id: int) -> None:
        """Stop node ``node_id`` cleanly (a controlled shutdown moves its leaderships first)."""
        self._node(node_id).stop(keep_data=True, timeout=30.0)

    def pause(self, node_id: int) -> None:
        """SIGSTOP node ``node_id``: a hung broker (and controller). Its sockets stay open and
        the kernel still accepts connections, but nothing answers until `resume`; the controller
        fences it after ``broker.session.timeout.ms`` and moves its roles. Resume in a
        ``finally``: the cluster fixture resumes every paused node after a test."""
        self._node(node_id).pause()

    def resume(self, node_id: int) -> None:
        """SIGCONT node ``node_id`` after `pause`: it goes on where it stood (and registers with
        the controller again)."""
        self._node(node_id).resume()

    def paused(self) -> list[int]:
        """The ids of the nodes `pause` stopped."""
        return [n for n, b in self.nodes.items() if b.paused]

    def start_node(self, node_id: int, *, wait: bool = True) -> None:
        """Start node ``node_id`` again on its ports with its data."""
        self._node(node_id).start(wait=wait)

    def running(self) -> list[int]:
        """The ids of the nodes whose JVM runs."""
        return [n for n, b in self.nodes.items() if b.is_running()]

    def ensure_all_running(self, timeout: float = 120.0) -> None:
        """Resume every paused node and start every node that is not running, then wait until
        every replica is in sync: how a test that hung or killed nodes leaves the cluster for the
        next one."""
        for n, broker in self.nodes.items():
            broker.resume()
            if not broker.is_running():
                self.start_node(n)
        self.wait_in_sync(timeout=timeout)

    # -- roles, read from the cluster as it is now ---------------------------------------------

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node that coordinates ``transactional_id``'s transactions."""
        return self._coordinator(transactional_id, 1)

    def group_coordinator(self, group: str) -> int:
        """The node that coordinates consumer group ``group`` (its committed offsets)."""
        return self._coordinator(group, 0)

    def leader(self, topic: str, partition: int) -> int:
        """The node that leads ``topic[partition]``."""
        leaders = self._metadata_leaders(topic)
        if partition not in leaders:
            raise EmbeddedServerError(f"{topic}[{partition}] has no leader now")
        return leaders[partition]

    def leaders(self, topic: str) -> dict[int, int]:
        """``{partition: the node that leads it}`` of ``topic``."""
        return self._metadata_leaders(topic)

    def active_controller(self) -> int | None:
        """The node leading the KRaft controller quorum, as the nodes last logged it (the
        highest epoch's ``In the new epoch E, the leader is N``), or None if none says. Every
        node here is a controller too: a hung node that is also the active controller costs a
        controller election before it is fenced (docs/operations.md, "A hung broker")."""
        newest: tuple[int, int] | None = None
        for broker in self.nodes.values():
            try:
                text = broker.log_path.read_text(errors="replace")
            except OSError:
                continue
            for match in _QUORUM_LEADER.finditer(text):
                epoch, leader = int(match.group(1)), int(match.group(2))
                if newest is None or epoch > newest[0]:
                    newest = (epoch, leader)
        return None if newest is None else newest[1]

    def wait_in_sync(self, topics: list[str] | None = None, timeout: float = 120.0) -> None:
        """Wait until every partition (of ``topics``, default all, internal ones included) is
        led and has all its replicas in sync."""

        def in_sync() -> bool:
            try:
                metadata = self.admin_client(logger=_Quiet()).list_topics(timeout=5)
            except Exception:
                return False
            for name, topic in metadata.topics.items():
                if topics is not None and name not in topics:
                    continue
                if topic.error is not None:
                    return False
                for p in topic.partitions.values():
                    if p.leader < 0 or p.error is not None or len(p.isrs) < len(p.replicas):
                        return False
            return True

        wait_until(in_sync, timeout=timeout, what="every replica in sync", interval=0.5)

    # -- internals ----------------------------------------------------------------------------

    def _ids(self) -> range:
        return range(1, self.size + 1)

    def _node(self, node_id: int) -> KafkaBroker:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise EmbeddedServerError(
                f"no node {node_id} in this cluster (nodes {sorted(self.nodes)})"
            ) from None

    def _coordinator(self, key: str, key_type: int) -> int:
        from laminar.kafka.log import KafkaLogClient  # the wire client: kept off the import

        deadline = time.monotonic() + 30
        while True:
            try:
                with KafkaLogClient(self._live_bootstrap(), timeout=5) as client:
                    return client.coordinator_node(key, key_type)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _metadata_leaders(self, topic: str) -> dict[int, int]:
        metadata = self.admin_client(logger=_Quiet()).list_topics(topic, timeout=10)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise EmbeddedServerError(f"topic {topic!r}: no metadata ({found and found.error})")
        return {p.id: p.leader for p in found.partitions.values() if p.leader >= 0}

    def _live_bootstrap(self) -> str:
        live = [f"{self.host}:{b.port}" for b in self.nodes.values() if b.is_running()]
        return ",".join(live) or self.bootstrap_servers

    def admin_client(self, **config: Any) -> Any:
        """A confluent-kafka ``AdminClient`` for the running nodes."""
        from confluent_kafka.admin import AdminClient  # kept off `import laminar.embedded`

        return AdminClient({"bootstrap.servers": self._live_bootstrap(), **config})


class _Quiet:
    """Swallows librdkafka's connection-refused lines about a node that is down."""

    def log(self, *args: object, **kwargs: object) -> None:
        pass
