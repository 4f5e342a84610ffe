"""A real Apache Kafka broker (single-node KRaft) on a free loopback port, in its own JVM.

The broker's jars (``org.apache.kafka:kafka_2.13`` and its runtime dependencies) are not shipped
with Laminar: ``scripts/bootstrap.sh`` resolves ``scripts/kafka/broker/pom.xml`` with Maven into
the machine's cache, ``~/.cache/laminar/kafka-<version>/libs`` (``$LAMINAR_CACHE`` moves the
cache, ``$LAMINAR_KAFKA_LIBS`` names another directory of jars). Nothing is downloaded here.

One JVM is both controller and broker (``process.roles=broker,controller``), with the settings a
single node needs for transactions (replication factor 1 and ``min.insync.replicas`` 1 for the
offsets and transaction-state logs, no initial rebalance delay) and a bounded heap. Its data
(the log directory, formatted by Kafka's ``StorageTool``) survives `stop`/`kill` + `start`, so
a restart test needs no other storage.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from laminar.embedded._process import (
    EmbeddedServerError,
    ServerProcess,
    free_port,
    log_tail,
    port_accepts,
    run_checked,
    wait_until,
)
from laminar.embedded._server import EmbeddedServer, KafkaAdmin, answers_metadata

__all__ = [
    "KAFKA_VERSION",
    "KafkaBroker",
    "find_java",
    "find_kafka_libs",
    "laminar_cache_dir",
]

#: The Apache Kafka version bootstrap resolves (``<kafka.version>`` in
#: ``scripts/kafka/broker/pom.xml``; a unit test keeps the two equal).
KAFKA_VERSION = "4.4.0"

#: Broker settings for one node that is its own controller and must run transactions.
#: ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` is short so that a transaction
#: older than its producer's ``transaction.timeout.ms`` is aborted within a second of expiring
#: (Kafka's default checks every 10 s); the limit itself stays the producer's.
SINGLE_NODE_SETTINGS: Mapping[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    # After a SIGKILL the restarted broker cannot register until its old session expired
    # (default 9 s of missed heartbeats); broker and controller share this JVM, so a short
    # session costs nothing and makes `kill` + `start` as quick as a clean restart.
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "4000",
    # Two cores shared with PostgreSQL and Spark: fewer threads than the defaults.
    "num.network.threads": "2",
    "num.io.threads": "4",
    "background.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.threads": "1",
}

#: The JVM's options besides the heap: Kafka's own (``kafka-run-class.sh``), headless.
JVM_OPTIONS: Sequence[str] = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)

# Everything to stdout (the broker's log file), one line per event; request logging and the
# full configuration dumps (hundreds of lines per client and start) off.
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
logger.kconfig.name = kafka.server.KafkaConfig
logger.kconfig.level = WARN
"""


def laminar_cache_dir() -> Path:
    """The machine's cache of what bootstrap downloads: ``$LAMINAR_CACHE``, else
    ``$XDG_CACHE_HOME/laminar``, else ``~/.cache/laminar`` (as in ``scripts/bootstrap.sh``)."""
    env = os.environ.get("LAMINAR_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "laminar" if xdg else Path.home() / ".cache" / "laminar"


def find_kafka_libs() -> Path:
    """The directory of the Apache Kafka broker's jars: ``$LAMINAR_KAFKA_LIBS``, else
    ``<cache>/kafka-<KAFKA_VERSION>/libs`` as ``scripts/bootstrap.sh`` fills it."""
    env = os.environ.get("LAMINAR_KAFKA_LIBS")
    libs = Path(env) if env else laminar_cache_dir() / f"kafka-{KAFKA_VERSION}" / "libs"
    if not any(libs.glob("kafka_2.13-*.jar")):
        where = "LAMINAR_KAFKA_LIBS" if env else "the bootstrap cache"
        raise EmbeddedServerError(
            f"no Apache Kafka broker jars in {libs} ({where}): run scripts/bootstrap.sh (it "
            "resolves scripts/kafka/broker/pom.xml with Maven), or set LAMINAR_KAFKA_LIBS to a "
            "directory holding kafka_2.13 and its runtime dependencies (a Kafka distribution's "
            "libs/)"
        )
    return libs


def find_java() -> str:
    """``$JAVA_HOME/bin/java``, else ``java`` on ``PATH`` (Kafka 4 needs Java 17+)."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    java = shutil.which("java")
    if java is None:
        raise EmbeddedServerError(
            "Apache Kafka needs Java 17+: install it (Debian: apt-get install "
            "openjdk-17-jre-headless, or run scripts/bootstrap.sh) or set JAVA_HOME"
        )
    return java


def new_cluster_id() -> str:
    """A random Kafka cluster id: 16 random bytes in URL-safe base64 without padding, never
    starting with ``-`` (Kafka's ``Uuid.randomUuid`` rule; such ids confuse command lines)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaBroker(EmbeddedServer, KafkaAdmin):
    """An Apache Kafka broker (KRaft, one node, its own controller) on 127.0.0.1.

    ``config`` overrides or adds broker settings (``server.properties``), e.g.
    ``{"transaction.max.timeout.ms": "5000"}``. ``heap`` is the JVM's ``-Xmx``. The data lives
    in a temporary directory until `stop` (without ``keep_data``)::

        with KafkaBroker() as broker:
            broker.create_topic("orders", partitions=3)
            broker.kill()      # crash
            broker.start()     # same ports, same data
    """

    _NAME = "the broker"
    _LOG_NAME = "kafka.log"

    def __init__(
        self,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        config: Mapping[str, str] | None = None,
        heap: str = "512m",
        libs: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 90.0,
        node_id: int = 1,
        quorum: str | None = None,
        cluster_id: str | None = None,
        base_settings: Mapping[str, str] = SINGLE_NODE_SETTINGS,
    ) -> None:
        """Configure the broker; nothing runs until `start`.

        A node of a cluster (`laminar.embedded.KafkaCluster`) is given its ``node_id``, the
        cluster's ``quorum`` (``controller.quorum.voters``), its ``cluster_id`` and the cluster's
        ``base_settings``; a lone broker needs none of them."""
        self.host = "127.0.0.1"
        self._requested_ports = (port, controller_port)
        self.port = port or 0
        self.controller_port = controller_port or 0
        self._config = dict(config or {})
        self.heap = heap
        self._libs = Path(libs) if libs is not None else None
        self._log_path_arg = Path(log_path) if log_path is not None else None
        self.startup_timeout = startup_timeout
        self.node_id = node_id
        self._quorum = quorum
        self._fixed_cluster_id = cluster_id
        self._base_settings = dict(base_settings)
        self.cluster_id = cluster_id or new_cluster_id()
        self._dir: Path | None = None
        self._process: ServerProcess | None = None

    # -- public surface ---------------------------------------------------------------------

    @property
    def durable(self) -> bool:
        """Always true: the log directory survives `stop` (``keep_data``), `kill` and `restart`."""
        return True

    @property
    def data_dir(self) -> Path:
        """The broker's log directory (``log.dirs``), metadata log included."""
        return self._started_dir() / "data"

    def settings(self) -> dict[str, str]:
        """The broker's ``server.properties`` (ports as of now)."""
        settings = {
            **self._base_settings,
            "node.id": str(self.node_id),
            "listeners": (
                f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.quorum.voters": self._quorum
            or f"{self.node_id}@{self.host}:{self.controller_port}",
        }
        if self._dir is not None:
            settings["log.dirs"] = str(self.data_dir)
        settings.update(self._config)
        return settings

    def start(self, *, wait: bool = True) -> KafkaBroker:
        """Start the broker (again, on the same ports, after `stop`/`kill`) and wait until it
        answers a Kafka metadata request naming itself (its cluster id: not another server
        holding the port); return ``self``. ``wait=False`` only launches it (a cluster's nodes
        answer once a quorum of them runs): `wait_ready` waits.

        The first start formats the log directory (Kafka's ``StorageTool``, a JVM of its own).
        """
        if self.is_running():
            return self
        java = find_java()
        libs = self._libs or find_kafka_libs()
        self._libs = libs
        if self._dir is None:
            self._own_dir(Path(tempfile.mkdtemp(prefix="laminar-kafka-")))
        first = not self.port
        attempts = 3 if first and self._requested_ports == (None, None) else 1
        for attempt in range(attempts):
            if not self.port:
                self.port = free_port(self.host)
            if not self.controller_port:
                self.controller_port = free_port(self.host)
            try:
                self._write_config()
                if not (self.data_dir / "meta.properties").is_file():
                    self._format(java, libs)
                self._launch(java, libs)
                if wait:
                    self.wait_ready()
                return self
            except EmbeddedServerError:
                # The bind error sits before the JVM's shutdown messages: look further back.
                in_use = "Address already in use" in log_tail(self.log_path, 400)
                if attempt + 1 < attempts and in_use:
                    self.port = self.controller_port = 0
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self, *, keep_data: bool = False, timeout: float = 30.0) -> None:
        """Stop the broker (SIGTERM: a controlled shutdown; SIGKILL after ``timeout``). Unless
        ``keep_data``, remove its data and forget its ports."""
        self._end_process(timeout)
        if not keep_data:
            self._forget_dir()
            self.port, self.controller_port = (p or 0 for p in self._requested_ports)
            self.cluster_id = self._fixed_cluster_id or new_cluster_id()

    def restart(self) -> None:
        """Stop the broker cleanly and start it again on the same ports, with its data."""
        self.stop(keep_data=True)
        self.start()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        where = f"{self.host}:{self.port}" if self.port else "no port yet"
        return f"KafkaBroker({where}, Apache Kafka {KAFKA_VERSION}, {state})"

    # -- internals ---------------------------------------------------------------------------

    def _write_config(self) -> None:
        assert self._dir is not None
        lines = [f"{key}={value}" for key, value in self.settings().items()]
        (self._dir / "server.properties").write_text("\n".join(lines) + "\n")
        (self._dir / "log4j2.properties").write_text(_LOG4J2)

    def _java_argv(self, java: str, libs: Path, heap: str, main: str) -> list[str]:
        assert self._dir is not None
        return [
            java,
            f"-Xmx{heap}",
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={self._dir / 'log4j2.properties'}",
            "-cp",
            str(libs / "*"),
            main,
        ]

    def _format(self, java: str, libs: Path) -> None:
        assert self._dir is not None
        argv = self._java_argv(java, libs, "256m", "kafka.tools.StorageTool")
        argv[1:1] = ["-XX:TieredStopAtLevel=1"]  # a short-lived JVM: start fast, no C2
        config = str(self._dir / "server.properties")
        argv += ["format", "--config", config, "--cluster-id", self.cluster_id]
        run_checked(argv, what="formatting the Kafka log directory (StorageTool)", timeout=120)

    def _launch(self, java: str, libs: Path) -> None:
        assert self._dir is not None
        argv = self._java_argv(java, libs, self.heap, "kafka.Kafka")
        argv.append(str(self._dir / "server.properties"))
        process = ServerProcess(argv, log_path=self.log_path, name="Apache Kafka broker")
        self._adopt(process)

    def wait_ready(self) -> None:
        """Wait until the broker answers a metadata request naming its cluster, with every
        partition led (`EmbeddedServerError` with its log's tail if it does not in time)."""
        process = self._process
        if process is None:
            raise EmbeddedServerError(f"{self._NAME} is not running")
        what = f"Apache Kafka broker {self.node_id} on {self.host}:{self.port}"
        try:
            wait_until(
                lambda: port_accepts(self.host, self.port),
                timeout=self.startup_timeout,
                what=what,
                interval=0.1,
                abort=process.exit_reason,
            )
            wait_until(
                lambda: answers_metadata(
                    self.bootstrap_servers, need_brokers=True, cluster_id=self.cluster_id
                ),
                timeout=self.startup_timeout,
                what=what,
                interval=0.2,
                abort=process.exit_reason,
            )
        except EmbeddedServerError as e:
            process.kill()
            self._process = None
            raise EmbeddedServerError(
                f"{e.message}\nlog {self.log_path}:\n{log_tail(self.log_path, 40)}"
            ) from None
