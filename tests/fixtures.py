"""Pytest plugin shared by tests/ and benches/: real servers, started lazily, once per session.

- ``postgres`` / ``pg_dsn``: an `EphemeralPostgres`, or the server at ``$LAMINAR_PG_DSN``.
- ``kafka_broker`` / ``kafka_bootstrap``: a real Apache Kafka broker (`KafkaBroker`, single-node
  KRaft, jars from bootstrap's Maven step), or the cluster at ``$LAMINAR_KAFKA_BOOTSTRAP``.
- ``broker_capabilities``: what that broker really does (`laminar.embedded.probe_broker`), run
  once; the collection report prints it. On the embedded Apache Kafka every check must pass:
  a test that reads a capability to relax an assertion is therefore strict there.
- ``tansu_broker`` / ``tansu_bootstrap``: a Tansu broker (``laminar demo``'s default), for the
  compatibility subset; ``broker_under_test`` runs a test on either broker
  (``@on_both_brokers``), with that broker's capabilities.
- ``spark_remote`` / ``spark_server`` / ``spark``: a Spark Connect server with Spark's Kafka
  connector (or ``$LAMINAR_SPARK_REMOTE``) and a client session on it.
- ``secured_kafka`` / ``secured_postgres``: servers secured as production ones are
  (`SecuredKafkaBroker`: SASL_SSL SCRAM-SHA-512, SSL with client certificates, SASL_SSL
  OAUTHBEARER against a local JWKS, ACLs enforced; `SecuredPostgres`: TLS and SCRAM only), their
  certificates signed by one local CA per run (``local_ca``); each started on first use.
- ``spark_cluster``: a Spark standalone cluster (`SparkCluster`: a master, two workers, their
  executors and a Spark Connect server on it, each its own JVM), one per run, with the test
  database's DSN given to the executors the ways `CLUSTER_ENV` says.
- Factories for tests that stop, kill or restart a server (they get their own instance:
  ``broker_factory`` an Apache Kafka broker, ``tansu_broker_factory`` a Tansu one), unique
  topic/table names, and ``clean_prepared_xacts`` for two-phase-commit tests.

A server that cannot be started skips the tests that need it, with the reason; under ``CI=true``
it fails them instead. Nothing is started for tests that do not ask for it.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from laminar.embedded import (
    BrokerCapabilities,
    EmbeddedServerError,
    EphemeralPostgres,
    KafkaBroker,
    KafkaCluster,
    S3Server,
    SparkCluster,
    SparkConnectServer,
    TansuBroker,
    probe_broker,
)
from laminar.embedded._server import create_topic
from laminar.embedded._tls import LocalCA
from laminar.embedded.kafka_secure import SecuredKafkaBroker
from laminar.embedded.oauth import OAuthIssuer
from laminar.embedded.postgres_secure import SecuredPostgres
from laminar.embedded.registry import SchemaRegistry

IN_CI = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")

BROKER_FIXTURES = frozenset(
    {"kafka_broker", "kafka_bootstrap", "broker_capabilities", "broker_under_test"}
)
TANSU_FIXTURES = frozenset({"tansu_broker", "tansu_bootstrap", "tansu_capabilities"})

#: The brokers of the compatibility subset: ``broker_under_test``'s parameters.
APACHE_KAFKA, TANSU = "apache-kafka", "tansu"
BOTH_BROKERS = (APACHE_KAFKA, TANSU)

#: Runs a test (which asks for ``broker_under_test``) on the session's Apache Kafka and on Tansu.
on_both_brokers = pytest.mark.parametrize("broker_under_test", BOTH_BROKERS, indirect=True)


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason`` locally; fail under CI, where every server must be there."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: a missing server is a failure)", pytrace=False)
    pytest.skip(reason)


# -- external servers (given by environment variables) ------------------------------------------


@dataclass
class ExternalPostgres:
    """A PostgreSQL server given by ``$LAMINAR_PG_DSN``: used as is, never stopped."""

    dsn: str

    def dsn_for(self, database: str) -> str:
        return make_conninfo(self.dsn, dbname=database)

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.dsn_for(name)

    def restart(self, *args: Any, **kwargs: Any) -> NoReturn:
        pytest.skip("LAMINAR_PG_DSN is an external server: this test restarts its own server")

    stop = kill = restart


@dataclass
class ExternalBroker:
    """A Kafka cluster given by ``$LAMINAR_KAFKA_BOOTSTRAP``: used as is, never stopped."""

    bootstrap_servers: str

    def create_topic(self, name: str, partitions: int = 1, **kwargs: Any) -> None:
        create_topic(self.bootstrap_servers, name, partitions, **kwargs)

    def restart(self, *args: Any, **kwargs: Any) -> NoReturn:
        pytest.skip("LAMINAR_KAFKA_BOOTSTRAP is an external cluster: this test restarts a broker")

    stop = kill = start = restart


# -- the session's servers ----------------------------------------------------------------------


@dataclass
class Servers:
    """The session-wide servers, each started on first use; a start failure is remembered, so
    every later test that needs the server skips or fails at once with the same reason."""

    config: pytest.Config
    _log_dir: Path | None = None
    _postgres: EphemeralPostgres | ExternalPostgres | None = None
    _broker: KafkaBroker | ExternalBroker | None = None
    _capabilities: BrokerCapabilities | None = None
    _tansu: TansuBroker | None = None
    _tansu_capabilities: BrokerCapabilities | None = None
    _kafka_cluster: KafkaCluster | None = None
    _spark: SparkConnectServer | None = None
    _spark_remote: str | None = None
    _registry: SchemaRegistry | None = None
    _spark_cluster: SparkCluster | None = None
    _ca: LocalCA | None = None
    _secured_kafka: SecuredKafkaBroker | None = None
    _secured_postgres: SecuredPostgres | None = None
    _errors: dict[str, str] = field(default_factory=dict)
    startup_seconds: dict[str, float] = field(default_factory=dict)
    _owned: list[Any] = field(default_factory=list)

    @property
    def log_dir(self) -> Path:
        """Where the servers log (kept by pytest with its last few temporary directories)."""
        if self._log_dir is None:
            factory = self.config._tmp_path_factory  # type: ignore[attr-defined]
            self._log_dir = Path(factory.mktemp("server-logs", numbered=False))
        return self._log_dir

    def _start(self, kind: str, start: Callable[[], Any]) -> Any:
        if kind in self._errors:
            unavailable(self._errors[kind])
        started = time.monotonic()
        try:
            server = start()
            self.startup_seconds[kind] = time.monotonic() - started
            return server
        except EmbeddedServerError as e:
            self._errors[kind] = f"embedded {kind} could not be started: {e}"
            unavailable(self._errors[kind])

    def postgres(self) -> EphemeralPostgres | ExternalPostgres:
        if self._postgres is None:
            dsn = os.environ.get("LAMINAR_PG_DSN")
            if dsn:
                self._postgres = ExternalPostgres(dsn)
            else:
                server = EphemeralPostgres(log_path=self.log_dir / "postgres.log")
                self._owned.append(server)
                self._postgres = self._start("PostgreSQL", server.start)
        return self._postgres

    def broker(self) -> KafkaBroker | ExternalBroker:
        if self._broker is None:
            bootstrap = os.environ.get("LAMINAR_KAFKA_BOOTSTRAP")
            if bootstrap:
                self._broker = ExternalBroker(bootstrap)
            else:
                broker = KafkaBroker(log_path=self.log_dir / "kafka.log")
                self._owned.append(broker)
                self._broker = self._start(KAFKA_KIND, broker.start)
        return self._broker

    def kafka_cluster(self) -> KafkaCluster:
        """The session's replicated Apache Kafka cluster (3 KRaft nodes, RF 3, min ISR 2) for
        the failover tests, started on first use; never an external one (its brokers are
        killed)."""
        if self._kafka_cluster is None:
            cluster = KafkaCluster(log_dir=self.log_dir / "kafka-cluster")
            self._owned.append(cluster)
            self._kafka_cluster = self._start(KAFKA_CLUSTER_KIND, cluster.start)
        return self._kafka_cluster

    def capabilities(self) -> BrokerCapabilities:
        if self._capabilities is None:
            self._capabilities = probe_broker(self.broker().bootstrap_servers)
        return self._capabilities

    def strict_capabilities(self) -> BrokerCapabilities:
        """The session broker's capabilities; on the embedded Apache Kafka, every one or fail."""
        capabilities = self.capabilities()
        if isinstance(self.broker(), KafkaBroker) and capabilities.missing():
            message = f"Apache Kafka failed its capability probe:\n{capabilities}"
            pytest.fail(message, pytrace=False)
        return capabilities

    def tansu(self) -> TansuBroker:
        if self._tansu is None:
            broker = TansuBroker(log_path=self.log_dir / "tansu.log")
            self._owned.append(broker)
            self._tansu = self._start(TANSU_KIND, broker.start)
        return self._tansu

    def tansu_capabilities(self) -> BrokerCapabilities:
        if self._tansu_capabilities is None:
            self._tansu_capabilities = probe_broker(self.tansu().bootstrap_servers)
        return self._tansu_capabilities

    def spark_remote(self) -> str:
        if self._spark_remote is None:
            remote = os.environ.get("LAMINAR_SPARK_REMOTE")
            if remote:
                self._spark_remote = remote
            else:
                self._spark_remote = self.spark_server().remote_url
        return self._spark_remote

    def spark_server(self) -> SparkConnectServer:
        if self._spark is None:
            if os.environ.get("LAMINAR_SPARK_REMOTE"):
                pytest.skip("LAMINAR_SPARK_REMOTE is an external server: this test needs its own")
            # With Spark's Kafka connector (bootstrap's Maven step): format("kafka") works.
            server = SparkConnectServer(
                log_path=self.log_dir / "spark-connect.log", kafka_connector=True
            )
            self._owned.append(server)
            self._spark = self._start("Spark Connect server", server.start)
        return self._spark

    def registry(self) -> SchemaRegistry:
        """The session's Schema Registry (Apicurio, in memory): the Avro tests'."""
        if self._registry is None:
            registry = SchemaRegistry(log_path=self.log_dir / "registry.log")
            self._owned.append(registry)
            self._registry = self._start("Schema Registry", registry.start)
        return self._registry

    def spark_cluster(self) -> SparkCluster:
        if self._spark_cluster is None:
            folder = Path(self.config._tmp_path_factory.mktemp("cluster-pgpass"))  # type: ignore[attr-defined]
            passfile = folder / "pgpass"
            passfile.write_text(f"*:*:*:*:{CLUSTER_ENV.passfile_secret}\n")
            passfile.chmod(0o600)
            pg = self.postgres().dsn
            cluster = SparkCluster(
                workers=2,
                log_dir=self.log_dir / "spark-cluster",
                env={CLUSTER_ENV.worker_dsn: pg},
                driver_env={
                    CLUSTER_ENV.redacted_dsn: CLUSTER_ENV.dsn(pg, CLUSTER_ENV.redacted_secret),
                    CLUSTER_ENV.shown_dsn: CLUSTER_ENV.dsn(pg, CLUSTER_ENV.shown_secret),
                },
                conf={
                    **CLUSTER_ENV.executor_env(pg, passfile),
                    # Spark kills a stopped task's Python worker 2-4 s after the stop by
                    # default; 10 s makes that window (a worker may still reach its PREPARE)
                    # wide enough to hit every time (tests/e2e/test_spark_cluster_stop.py)
                    "spark.python.task.killTimeout": "10s",
                    # every fault run kills executors and Python workers: several attempts of
                    # one task may fail
                    "spark.task.maxFailures": "8",
                },
            )
            self._owned.append(cluster)
            self._spark_cluster = self._start(CLUSTER_KIND, cluster.start)
        return self._spark_cluster

    def local_ca(self) -> LocalCA:
        """The run's certificate authority (the secured servers' and their clients')."""
        if self._ca is None:
            folder = self.config._tmp_path_factory.mktemp("local-ca")  # type: ignore[attr-defined]
            self._ca = LocalCA(folder)
        return self._ca

    def secured_kafka(self) -> SecuredKafkaBroker:
        """The run's secured Apache Kafka broker (and the OAuth issuer its OAUTHBEARER listener
        validates tokens against), started on first use; never an external one."""
        if self._secured_kafka is None:
            issuer = OAuthIssuer()
            broker = SecuredKafkaBroker(
                self.local_ca(), issuer, log_path=self.log_dir / "kafka-secured.log"
            )
            self._owned += [issuer, broker]
            self._secured_kafka = self._start(SECURED_KAFKA_KIND, broker.start)
        return self._secured_kafka

    def secured_postgres(self) -> SecuredPostgres:
        """The run's PostgreSQL that takes TLS + SCRAM connections only, started on first use."""
        if self._secured_postgres is None:
            server = SecuredPostgres(
                self.local_ca(),
                password=SECURED_PG_PASSWORD,
                log_path=self.log_dir / "postgres-secured.log",
            )
            self._owned.append(server)
            self._secured_postgres = self._start(SECURED_PG_KIND, server.start)
        return self._secured_postgres

    def close(self) -> None:
        """Stop every server this process started, each whatever happened to the others — a
        Ctrl-C (or pytest-xdist's SIGINT to a worker that outlives its shutdown) included, which
        is raised again once all are stopped: a server left running outlives the run."""
        interrupted: BaseException | None = None
        for server in reversed(self._owned):
            try:
                server.stop()
            except Exception as e:  # keep stopping the others
                print(f"laminar: could not stop {server!r}: {e}")
            except BaseException as e:  # KeyboardInterrupt, SystemExit: the others first
                interrupted = interrupted or e
        self._owned.clear()
        if interrupted is not None:
            raise interrupted


KAFKA_KIND, TANSU_KIND = "Apache Kafka broker", "Tansu broker"
KAFKA_CLUSTER_KIND = "Apache Kafka cluster (3 nodes)"
CLUSTER_KIND = "Spark standalone cluster"
SECURED_KAFKA_KIND, SECURED_PG_KIND = "secured Apache Kafka broker", "secured PostgreSQL"
#: The secured PostgreSQL's superuser password (a test server's: never a real secret).
SECURED_PG_PASSWORD = "Admin-S3cret-pw"


@dataclass(frozen=True)
class ClusterEnv:
    """How the session's Spark cluster hands the executors the test database's DSN, each way
    with a password of its own (the test cluster trusts local connections: the passwords are
    sent, never checked), so a test can tell which one Spark shows (docs/spark.md, "Secrets on
    executors"):

    - ``worker_dsn``: in the workers' environment (as ``spark-env.sh`` sets it), no password;
      what the fault tests' queries use;
    - ``redacted_dsn``: ``spark.executorEnv.<name>`` with a name ``spark.redaction.regex``
      covers (``…_SECRET``), the DSN with ``redacted_secret``;
    - ``shown_dsn``: ``spark.executorEnv.<name>`` with a name it does not cover, the DSN with
      ``shown_secret``: what Spark shows, and the readiness warning names;
    - ``spark.executorEnv.PGPASSFILE``: libpq's password file, holding ``passfile_secret``.
    """

    worker_dsn: str = "LAMINAR_TEST_CLUSTER_PG_DSN"
    redacted_dsn: str = "LAMINAR_TEST_CLUSTER_PG_DSN_SECRET"
    shown_dsn: str = "LAMINAR_TEST_CLUSTER_PG_DSN_SHOWN"
    redacted_secret: str = "Redacted-S3cret-pw"
    shown_secret: str = "Shown-S3cret-pw"
    passfile_secret: str = "Passfile-S3cret-pw"

    @staticmethod
    def dsn(pg_dsn: str, password: str) -> str:
        """``pg_dsn`` as a URI with ``password`` (a URI: Spark would redact the key=value form's
        ``password=`` by its value, whatever the variable's name)."""
        parts = psycopg.conninfo.conninfo_to_dict(pg_dsn)
        user, host = parts.get("user", ""), parts.get("host", "127.0.0.1")
        port, db = parts.get("port", "5432"), parts.get("dbname", "")
        return f"postgresql://{user}:{password}@{host}:{port}/{db}"

    def executor_env(self, pg_dsn: str, passfile: Path) -> dict[str, str]:
        """The ``spark.executorEnv.*`` settings of the cluster's application."""
        return {
            f"spark.executorEnv.{self.redacted_dsn}": self.dsn(pg_dsn, self.redacted_secret),
            f"spark.executorEnv.{self.shown_dsn}": self.dsn(pg_dsn, self.shown_secret),
            "spark.executorEnv.PGPASSFILE": str(passfile),
        }


CLUSTER_ENV = ClusterEnv()

_SERVERS = pytest.StashKey[Servers]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SERVERS] = Servers(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop what a session that never reached ``pytest_sessionfinish`` started."""
    servers = config.stash.get(_SERVERS, None)
    if servers is not None:
        servers.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    def where(var: str, embedded: str) -> str:
        value = os.environ.get(var)
        return f"external (${var})" if value else embedded

    return [
        "laminar servers (started on first use): "
        f"postgres={where('LAMINAR_PG_DSN', 'embedded')}, "
        f"kafka={where('LAMINAR_KAFKA_BOOTSTRAP', 'embedded Apache Kafka')} (+ Tansu for the "
        "compatibility subset), "
        f"spark={where('LAMINAR_SPARK_REMOTE', 'embedded Spark Connect')} (+ an embedded "
        "standalone cluster for the cluster tests); "
        f"CI={'true: a missing server fails' if IN_CI else 'false: a missing server skips'}",
    ]


def pytest_report_collectionfinish(
    config: pytest.Config, start_path: Path, items: list[pytest.Item]
) -> list[str]:
    """Probe the brokers before the first test, each when any collected test needs it."""
    kinds = {kind for item in items for kind in _brokers_needed(item)}
    if not kinds:
        return []
    servers = config.stash[_SERVERS]
    lines = [f"laminar server logs: {servers.log_dir}"]
    probes = [(KAFKA_KIND, servers.capabilities), (TANSU_KIND, servers.tansu_capabilities)]
    for kind, probe in probes:
        if kind not in kinds:
            continue
        try:
            lines += [f"{kind}:", *probe().summary().splitlines()]
        except (pytest.skip.Exception, pytest.fail.Exception) as e:
            lines.append(f"{kind} capabilities: not probed ({e.msg})")
        except Exception as e:  # reported again by the tests that need the broker
            servers._errors.setdefault(kind, f"broker probe failed: {e}")
            lines.append(f"{kind} capabilities: probe failed: {e}")
    return lines


def _brokers_needed(item: pytest.Item) -> set[str]:
    names = set(getattr(item, "fixturenames", ()))
    kinds = set()
    if names & BROKER_FIXTURES:
        callspec = getattr(item, "callspec", None)
        param = callspec.params.get("broker_under_test") if callspec is not None else None
        kinds.add(TANSU_KIND if param == TANSU else KAFKA_KIND)
    if names & TANSU_FIXTURES:
        kinds.add(TANSU_KIND)
    return kinds


def _server_lines(servers: Servers) -> list[str]:
    """What the session's servers did: start-up times, capabilities missing, where they log."""
    if not (servers.startup_seconds or servers._capabilities):
        return []
    lines = []
    started = ", ".join(f"{kind} {secs:.1f} s" for kind, secs in servers.startup_seconds.items())
    if started:
        lines.append(f"start-up times: {started}")
    for kind, caps in (
        (KAFKA_KIND, servers._capabilities),
        (TANSU_KIND, servers._tansu_capabilities),
    ):
        if caps is not None:
            lines.append(f"{kind} capabilities missing: {', '.join(caps.missing()) or 'none'}")
    lines.append(f"server logs: {servers.log_dir}")
    return lines


_WORKER_LINES = pytest.StashKey[dict[str, list[str]]]()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the session's servers once its fixtures are torn down (trylast: after pytest's own
    teardown of what an interrupted session left set up); in a pytest-xdist worker, hand the
    summary of its servers to the controller first.

    Here and not in ``pytest_unconfigure``: a worker reports itself finished when this hook
    returns, and the controller then ends it — a SIGINT 5 s later, ``os._exit`` 10 s after
    that (execnet's ``_terminate_execution``) — which stopping a broker, a Spark Connect server
    and a Spark cluster can outlast, leaving the rest running after the run."""
    output = getattr(session.config, "workeroutput", None)
    servers = session.config.stash.get(_SERVERS, None)
    if servers is None:
        return
    if output is not None:
        output["laminar_servers"] = _server_lines(servers)
    servers.close()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """In pytest-xdist's controller: keep each worker's summary of its servers."""
    lines = getattr(node, "workeroutput", {}).get("laminar_servers")
    if lines:
        worker = str(getattr(node, "gateway", node).id)
        node.config.stash.setdefault(_WORKER_LINES, {})[worker] = lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    servers = config.stash.get(_SERVERS, None)
    own = _server_lines(servers) if servers is not None else []
    workers = config.stash.get(_WORKER_LINES, {})
    if not (own or workers):
        return
    terminalreporter.write_sep("-", "laminar servers")
    for line in own:
        terminalreporter.write_line(line)
    for worker, lines in sorted(workers.items()):
        for line in lines:
            terminalreporter.write_line(f"{worker}: {line}")


#: The servers each heavy enough that one run should start it once (a JVM or several, seconds
#: to start): with ``pytest -n N --dist loadgroup`` (`./dev test`), every test that asks for one
#: runs in the same worker, whatever its file. Keyed by the fixtures that start them.
SHARED_SERVER_GROUPS = (
    ("spark", frozenset({"spark", "spark_remote", "spark_server", "spark_cluster"})),
    ("kafka-cluster", frozenset({"kafka_cluster"})),
    ("secured", frozenset({"secured_kafka", "secured_postgres", "local_ca"})),
)


def worker_group(item: pytest.Item) -> str:
    """The pytest-xdist group an item runs in: ``spark`` for every end-to-end test (they start
    Spark servers and clusters of their own too: two workers running them at once would run
    several JVMs on two cores), the heavy server it needs (`SHARED_SERVER_GROUPS`), else its
    module, so that a module's fixtures (a topic filled once for all its tests) are set up in one
    worker only. Each worker starts the servers its tests ask for, as a run without workers does
    (tests/unit/test_worker_groups.py)."""
    if "e2e" in Path(str(item.path)).parts:  # each a Spark server's client, some their own
        return "spark"
    names = set(getattr(item, "fixturenames", ()))
    for group, fixtures in SHARED_SERVER_GROUPS:
        if names & fixtures:
            return group
    return str(Path(str(item.path)).relative_to(item.config.rootpath))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.path)).parts
        if "integration" in parts:
            item.add_marker(pytest.mark.integration)
        if "e2e" in parts:
            item.add_marker(pytest.mark.e2e)
        item.add_marker(pytest.mark.xdist_group(worker_group(item)))


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def laminar_servers(request: pytest.FixtureRequest) -> Servers:
    """The session's lazily started servers."""
    return request.config.stash[_SERVERS]


@pytest.fixture(scope="session")
def postgres(laminar_servers: Servers) -> EphemeralPostgres | ExternalPostgres:
    """The session's PostgreSQL server (``max_prepared_transactions`` > 0 when embedded)."""
    return laminar_servers.postgres()


@pytest.fixture(scope="session")
def pg_dsn(postgres: EphemeralPostgres | ExternalPostgres) -> str:
    """DSN of the session's test database."""
    return postgres.dsn


@pytest.fixture(scope="session")
def kafka_broker(laminar_servers: Servers) -> KafkaBroker | ExternalBroker:
    """The session's broker: Apache Kafka (or ``$LAMINAR_KAFKA_BOOTSTRAP``)."""
    return laminar_servers.broker()


@pytest.fixture
def kafka_cluster(laminar_servers: Servers) -> Iterator[KafkaCluster]:
    """The session's 3-node Apache Kafka cluster; after the test every node runs again and every
    replica is in sync (a test kills nodes; the next one starts from a healthy cluster)."""
    cluster = laminar_servers.kafka_cluster()
    try:
        yield cluster
    finally:
        cluster.ensure_all_running()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: KafkaBroker | ExternalBroker) -> str:
    """``bootstrap.servers`` of the session's broker."""
    return kafka_broker.bootstrap_servers


@pytest.fixture(scope="session")
def broker_capabilities(laminar_servers: Servers) -> BrokerCapabilities:
    """What the session's broker really does (probed once). On the embedded Apache Kafka every
    check must pass (else this fixture fails), so a test that relaxes an assertion by a
    capability is strict there; an external cluster is taken as probed."""
    return laminar_servers.strict_capabilities()


@pytest.fixture(scope="session")
def tansu_broker(laminar_servers: Servers) -> TansuBroker:
    """The session's Tansu broker (memory storage), for the compatibility subset."""
    return laminar_servers.tansu()


@pytest.fixture(scope="session")
def tansu_bootstrap(tansu_broker: TansuBroker) -> str:
    """``bootstrap.servers`` of the session's Tansu broker."""
    return tansu_broker.bootstrap_servers


@pytest.fixture(scope="session")
def tansu_capabilities(laminar_servers: Servers) -> BrokerCapabilities:
    """What the session's Tansu broker really does (probed once)."""
    return laminar_servers.tansu_capabilities()


@dataclass(frozen=True)
class BrokerUnderTest:
    """One of the session's brokers, as a compatibility test sees it."""

    name: str  # APACHE_KAFKA (or the external cluster) or TANSU
    server: KafkaBroker | TansuBroker | ExternalBroker
    capabilities: BrokerCapabilities

    @property
    def bootstrap_servers(self) -> str:
        return self.server.bootstrap_servers

    def create_topic(self, name: str, partitions: int = 1, **kwargs: Any) -> None:
        self.server.create_topic(name, partitions, **kwargs)


@pytest.fixture
def broker_under_test(request: pytest.FixtureRequest) -> BrokerUnderTest:
    """The session's Apache Kafka broker, or Tansu when parametrized so (`on_both_brokers`):
    the compatibility subset runs once per broker, each with its own capabilities."""
    servers: Servers = request.config.stash[_SERVERS]
    if getattr(request, "param", APACHE_KAFKA) == TANSU:
        return BrokerUnderTest(TANSU, servers.tansu(), servers.tansu_capabilities())
    return BrokerUnderTest(APACHE_KAFKA, servers.broker(), servers.strict_capabilities())


@pytest.fixture(scope="session")
def spark_remote(laminar_servers: Servers) -> str:
    """``sc://host:port`` of the session's Spark Connect server."""
    return laminar_servers.spark_remote()


@pytest.fixture(scope="session")
def spark_server(laminar_servers: Servers) -> SparkConnectServer:
    """The session's embedded Spark Connect server (for tests that need its pid or log)."""
    return laminar_servers.spark_server()


@pytest.fixture(scope="session")
def spark(spark_remote: str) -> Iterator[Any]:
    """A Spark Connect client session on the session's server."""
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(spark_remote).create()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def schema_registry(laminar_servers: Servers) -> SchemaRegistry:
    """The session's Schema Registry (Apicurio Registry's Confluent-compatible API, in memory):
    ``schema_registry.url`` is what a registry client takes."""
    return laminar_servers.registry()


@pytest.fixture
def registry_factory(laminar_servers: Servers) -> Iterator[Callable[..., SchemaRegistry]]:
    """Makes private Schema Registries (for tests that stop one: it is unreachable, then back,
    empty); all are stopped after the test."""
    made: list[SchemaRegistry] = []

    def make(**kwargs: Any) -> SchemaRegistry:
        kwargs.setdefault(
            "log_path", laminar_servers.log_dir / f"registry-{uuid.uuid4().hex[:8]}.log"
        )
        registry = SchemaRegistry(**kwargs)
        made.append(registry)
        try:
            return registry.start()
        except EmbeddedServerError as e:
            unavailable(f"embedded Schema Registry could not be started: {e}")

    yield make
    for server in reversed(made):
        server.close()


@pytest.fixture(scope="session")
def spark_cluster(laminar_servers: Servers) -> SparkCluster:
    """The session's Spark standalone cluster (one per run, started on first use): a master,
    two workers (one core, one 512 MiB executor each) and a Spark Connect server on it
    (``spark_cluster.remote_url``); the test database reaches the executors as `CLUSTER_ENV`
    says."""
    return laminar_servers.spark_cluster()


@pytest.fixture(scope="session")
def local_ca(laminar_servers: Servers) -> LocalCA:
    """The run's certificate authority: the secured servers' certificates and the clients'."""
    return laminar_servers.local_ca()


@pytest.fixture(scope="session")
def secured_kafka(laminar_servers: Servers) -> SecuredKafkaBroker:
    """The run's secured Apache Kafka broker (`SecuredKafkaBroker`; ``.issuer`` is its OAuth
    issuer, ``.ca`` the CA): principals can do only what a test grants them."""
    return laminar_servers.secured_kafka()


@pytest.fixture(scope="session")
def secured_postgres(laminar_servers: Servers) -> SecuredPostgres:
    """The run's PostgreSQL that takes TLS (verified) + SCRAM connections only
    (`SecuredPostgres`); ``.dsn`` is its superuser's."""
    return laminar_servers.secured_postgres()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name(prefix)`` → a fresh lowercase name, valid as a Kafka topic, a Postgres
    identifier and a transactional id, unique per call (parallel runs never collide)."""
    test = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")[:24]

    def make(prefix: str = "t") -> str:
        return f"{prefix}_{test}_{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture
def topic_name(unique_name: Callable[[str], str]) -> str:
    """A topic name no other test uses."""
    return unique_name("topic")


@pytest.fixture
def table_name(unique_name: Callable[[str], str]) -> str:
    """A table name no other test uses."""
    return unique_name("tbl")


@pytest.fixture
def clean_prepared_xacts(pg_dsn: str) -> Iterator[str]:
    """For two-phase-commit tests: rolls back every prepared transaction left in the test
    database, before and after the test, and yields the DSN. (Against an external server, use a
    database of its own: this touches every prepared transaction in it.)"""
    _rollback_prepared(pg_dsn)
    yield pg_dsn
    _rollback_prepared(pg_dsn)


def _rollback_prepared(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        gids = [
            row[0]
            for row in conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
            )
        ]
        for gid in gids:
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))


@pytest.fixture
def postgres_factory(laminar_servers: Servers) -> Iterator[Callable[..., EphemeralPostgres]]:
    """Makes private `EphemeralPostgres` servers (for tests that stop, kill or restart one);
    all are stopped after the test."""
    made: list[EphemeralPostgres] = []

    def make(**kwargs: Any) -> EphemeralPostgres:
        kwargs.setdefault(
            "log_path", laminar_servers.log_dir / f"postgres-{uuid.uuid4().hex[:8]}.log"
        )
        server = EphemeralPostgres(**kwargs)
        made.append(server)
        try:
            return server.start()
        except EmbeddedServerError as e:
            unavailable(f"embedded PostgreSQL could not be started: {e}")

    yield make
    for server in made:
        server.stop()


@pytest.fixture
def broker_factory(laminar_servers: Servers) -> Iterator[Callable[..., KafkaBroker]]:
    """Makes private Apache Kafka brokers (for tests that stop, kill or restart one); their data
    survives `restart`/`kill` + `start` on their own log directory. ``durable`` is accepted for
    the Tansu factory's callers (an Apache Kafka broker always is). All are stopped after the
    test."""
    made: list[KafkaBroker] = []

    def make(*, durable: bool = True, **kwargs: Any) -> KafkaBroker:
        kwargs.setdefault("log_path", laminar_servers.log_dir / f"kafka-{uuid.uuid4().hex[:8]}.log")
        broker = KafkaBroker(**kwargs)
        made.append(broker)
        try:
            return broker.start()
        except EmbeddedServerError as e:
            unavailable(f"embedded Apache Kafka broker could not be started: {e}")

    yield make
    for server in reversed(made):
        server.stop()


@pytest.fixture
def tansu_broker_factory(laminar_servers: Servers) -> Iterator[Callable[..., TansuBroker]]:
    """Makes private `TansuBroker` servers (for tests that stop, kill or restart one);
    ``make(durable=True)`` backs one with a local S3 store so its data survives restarts.
    All are stopped after the test."""
    made: list[TansuBroker | S3Server] = []

    def make(*, durable: bool = False, **kwargs: Any) -> TansuBroker:
        tag = uuid.uuid4().hex[:8]
        kwargs.setdefault("log_path", laminar_servers.log_dir / f"tansu-{tag}.log")
        if durable:
            s3 = S3Server(log_path=laminar_servers.log_dir / f"s3-{tag}.log")
            made.append(s3)
            kwargs["s3"] = s3
        broker = TansuBroker(**kwargs)
        made.append(broker)
        try:
            return broker.start()
        except EmbeddedServerError as e:
            unavailable(f"embedded Tansu broker could not be started: {e}")

    yield make
    for server in reversed(made):
        server.stop()
