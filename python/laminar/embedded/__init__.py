"""Real servers on free loopback ports, started and torn down from Python.

Used by Laminar's own tests and benchmarks, and by ``laminar demo``:

- `EphemeralPostgres` — a throw-away PostgreSQL cluster (``max_prepared_transactions`` > 0).
- `KafkaBroker` — a real Apache Kafka broker (single-node KRaft, jars fetched by bootstrap).
- `KafkaCluster` — a replicated Apache Kafka cluster (3 KRaft nodes, replication factor 3,
  ``min.insync.replicas=2``) whose nodes are killed and restarted by role (failover tests).
- `TansuBroker` — a Kafka-protocol broker (Tansu), in memory or on durable storage.
- `S3Server` — a local S3-compatible object store, the durable storage for `TansuBroker`.
- `SparkConnectServer` — a Spark Connect server in its own JVM, ``local[2]``.
- `SparkCluster` — a Spark standalone cluster: a master, workers and a Spark Connect server on
  it, each its own JVM (executors and their Python workers too), with handles to SIGKILL an
  executor or a task's Python worker and to restart a worker.
- `PrometheusServer` — a Prometheus server (Debian's package) scraping given targets and
  evaluating rule files at short intervals.
- `probe_broker` — measures which exactly-once features a broker really provides.

Every server runs as a child process in its own process group, logs to a file, and offers
``stop()`` (clean), ``kill()`` (SIGKILL, as a crash) and ``restart()``.
"""

from laminar.embedded._process import EmbeddedServerError, free_port
from laminar.embedded.kafka import KafkaBroker, find_kafka_libs
from laminar.embedded.kafka_cluster import KafkaCluster
from laminar.embedded.postgres import EphemeralPostgres, find_pg_bindir
from laminar.embedded.probe import BrokerCapabilities, probe_broker
from laminar.embedded.prometheus import PrometheusServer, find_prometheus, find_promtool
from laminar.embedded.spark import SparkConnectServer
from laminar.embedded.spark_cluster import ExecutorProcess, SparkCluster
from laminar.embedded.tansu import S3Server, TansuBroker, find_tansu_binary

__all__ = [
    "BrokerCapabilities",
    "EmbeddedServerError",
    "EphemeralPostgres",
    "ExecutorProcess",
    "KafkaBroker",
    "KafkaCluster",
    "PrometheusServer",
    "S3Server",
    "SparkCluster",
    "SparkConnectServer",
    "TansuBroker",
    "find_kafka_libs",
    "find_pg_bindir",
    "find_prometheus",
    "find_promtool",
    "find_tansu_binary",
    "free_port",
    "probe_broker",
]
