"""A Spark Connect server in its own JVM, from the installed ``pyspark`` (4.x ships its jars)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from laminar.embedded._process import (
    EmbeddedServerError,
    ServerProcess,
    free_port,
    port_accepts,
    wait_until,
)
from laminar.embedded._server import EmbeddedServer
from laminar.embedded.kafka import laminar_cache_dir

__all__ = ["SPARK_KAFKA_VERSION", "SparkConnectServer", "find_spark_home", "find_spark_kafka_jars"]

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

#: The ``spark-sql-kafka-0-10_2.13`` version bootstrap resolves (``<spark.kafka.version>`` in
#: ``scripts/kafka/spark/pom.xml``; a unit test keeps the two equal). The newest served to this
#: project; it runs on the pyspark 4.x the project installs.
SPARK_KAFKA_VERSION = "4.2.0"

#: The connector's jars: Spark's Kafka source and sink, and what they need that pyspark lacks.
SPARK_KAFKA_ARTIFACTS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
)


def find_spark_home() -> Path:
    """``$SPARK_HOME`` if set, else the installed ``pyspark`` package (pip installs ship
    ``bin/spark-submit`` and ``jars/``, the Spark Connect server's included)."""
    env = os.environ.get("SPARK_HOME")
    if env:
        home = Path(env)
    else:
        try:
            # In-function: pyspark is optional; absent, $SPARK_HOME must name Spark.
            import pyspark
        except ImportError as e:
            raise EmbeddedServerError(
                "Spark Connect needs pyspark: pip install 'pyspark[connect]>=4' (laminar's "
                "`spark`, `demo` and `dev` extras)"
            ) from e
        home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-submit").is_file():
        raise EmbeddedServerError(f"{home} has no bin/spark-submit; set SPARK_HOME to a Spark 4")
    if not any((home / "jars").glob("spark-connect_*.jar")):
        raise EmbeddedServerError(
            f"{home}/jars has no spark-connect jar: Spark 4 (pyspark>=4) ships it; older Spark "
            "needs --packages, which this environment cannot download"
        )
    return home


def find_spark_kafka_jars() -> list[Path]:
    """The jars of Spark's Kafka connector (``format("kafka")``), as ``scripts/bootstrap.sh``
    resolves them into ``<cache>/spark-sql-kafka-<SPARK_KAFKA_VERSION>/jars``, or
    ``$LAMINAR_SPARK_KAFKA_JARS`` (a directory). Nothing is fetched here: Spark's ``--packages``
    (Ivy) is never used."""

    env = os.environ.get("LAMINAR_SPARK_KAFKA_JARS")
    directory = (
        Path(env)
        if env
        else laminar_cache_dir() / f"spark-sql-kafka-{SPARK_KAFKA_VERSION}" / "jars"
    )
    jars = sorted(directory.glob("*.jar"))
    missing = [
        a for a in SPARK_KAFKA_ARTIFACTS if not any(j.name.startswith(f"{a}-") for j in jars)
    ]
    if missing:
        raise EmbeddedServerError(
            f"Spark's Kafka connector is incomplete in {directory} (missing {', '.join(missing)}): "
            "run scripts/bootstrap.sh (it resolves scripts/kafka/spark/pom.xml with Maven), or set "
            "LAMINAR_SPARK_KAFKA_JARS to a directory holding those jars"
        )
    return jars


#: The spark-avro version bootstrap resolves (``<spark.avro.version>`` in
#: ``scripts/avro/spark/pom.xml``): Spark's ``from_avro``/``to_avro``, the Avro tests' reader.
SPARK_AVRO_VERSION = "4.2.0"


def find_spark_avro_jars() -> list[Path]:
    """The spark-avro jar as ``scripts/bootstrap.sh`` resolves it into
    ``<cache>/spark-avro-<SPARK_AVRO_VERSION>/jars`` (empty when bootstrap has not: a server
    without ``from_avro``; the Avro tests that need it say so)."""
    directory = laminar_cache_dir() / f"spark-avro-{SPARK_AVRO_VERSION}" / "jars"
    return sorted(directory.glob("spark-avro_2.13-*.jar"))


class SparkConnectServer(EmbeddedServer):
    """A Spark Connect server (``local[N]``) on a free port of 127.0.0.1, in its own JVM.

    Server-side Python (the ``foreachBatch`` function, UDFs) runs with ``python`` — by default
    this interpreter — so whatever is importable here (``laminar`` included) is importable
    there. `kill` SIGKILLs the JVM together with its Python workers, as a crash would; `start`
    brings a fresh server up on the same port.

        with SparkConnectServer() as server:
            spark = SparkSession.builder.remote(server.remote_url).getOrCreate()
    """

    _NAME = "the Spark Connect server"
    _LOG_NAME = "spark-connect.log"

    def __init__(
        self,
        *,
        port: int | None = None,
        master: str = "local[2]",
        python: str | os.PathLike[str] | None = None,
        driver_memory: str = "1g",
        conf: Mapping[str, str] | None = None,
        jars: Sequence[str | os.PathLike[str]] = (),
        kafka_connector: bool = False,
        avro_functions: bool = False,
        env: Mapping[str, str] | None = None,
        spark_home: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 180.0,
    ) -> None:
        """Configure the server; nothing runs until `start`.

        ``conf`` adds Spark settings (``--conf k=v``), ``jars`` adds jars to the driver's class
        path (e.g. a JDBC driver), ``kafka_connector`` adds Spark's Kafka source and sink
        (`find_spark_kafka_jars`; an `EmbeddedServerError` at `start` when bootstrap has not
        fetched them), ``avro_functions`` adds spark-avro (``from_avro``/``to_avro``:
        `find_spark_avro_jars`), ``env`` adds environment variables for the server and its
        Python workers.
        """
        self.host = "127.0.0.1"
        self._requested_port = port
        self.port = port or 0
        self.master = master
        self.python = str(python) if python is not None else sys.executable
        self.driver_memory = driver_memory
        self._conf = dict(conf or {})
        self._jars = [str(j) for j in jars]
        self.kafka_connector = kafka_connector
        #: spark-avro (from_avro, to_avro) on the class path: `find_spark_avro_jars`
        self.avro_functions = avro_functions
        self._env = dict(env or {})
        self._spark_home = Path(spark_home) if spark_home is not None else None
        self._log_path_arg = Path(log_path) if log_path is not None else None
        self.startup_timeout = startup_timeout
        self._dir: Path | None = None
        self._process: ServerProcess | None = None
        #: Seconds the last `start` took until a client query succeeded.
        self.startup_seconds: float | None = None

    @property
    def remote_url(self) -> str:
        """The Spark Connect URL for ``SparkSession.builder.remote(...)``."""
        if not self.port:
            raise EmbeddedServerError("the Spark Connect server has not been started")
        return f"sc://{self.host}:{self.port}"

    @property
    def work_dir(self) -> Path:
        """The server's scratch directory (spark.local.dir, warehouse), removed by `stop`."""
        return self._started_dir()

    def start(self) -> SparkConnectServer:
        """Start the server and wait until a client query succeeds; return ``self``."""
        if self.is_running():
            return self
        home = self._spark_home or find_spark_home()
        self._spark_home = home
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise EmbeddedServerError(
                "Spark needs Java 17+: install it (Debian: apt-get install "
                "openjdk-17-jre-headless, or run scripts/bootstrap.sh) or set JAVA_HOME"
            )
        work = self._dir or self._own_dir(Path(tempfile.mkdtemp(prefix="laminar-spark-")))
        if not self.port:
            self.port = free_port(self.host)
        started = time.monotonic()
        process = ServerProcess(
            self._argv(home, work),
            log_path=self.log_path,
            name="Spark Connect server",
            cwd=work,
            env=self._child_env(home),
        )
        self._adopt(process)
        what = f"Spark Connect server on {self.host}:{self.port}"
        try:
            wait_until(
                lambda: port_accepts(self.host, self.port),
                timeout=self.startup_timeout,
                what=what,
                interval=0.25,
                abort=process.exit_reason,
            )
            remaining = max(10.0, self.startup_timeout - (time.monotonic() - started))
            wait_until(
                self._answers_query,
                timeout=remaining,
                what=what,
                interval=0.5,
                abort=process.exit_reason,
            )
        except EmbeddedServerError as e:
            raise self._start_failed(process, e) from None
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self, *, keep_dir: bool = False, timeout: float = 30.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``) and, unless ``keep_dir``,
        remove its scratch directory and forget its port."""
        self._end_process(timeout)
        if not keep_dir:
            self._forget_dir()
            self.port = self._requested_port or 0

    def restart(self) -> None:
        """Stop the server and start a fresh one on the same port (sessions are lost)."""
        self.stop(keep_dir=True)
        self.start()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"SparkConnectServer({self.host}:{self.port}, master={self.master!r}, {state})"

    # -- internals ---------------------------------------------------------------------------

    def _argv(self, home: Path, work: Path) -> list[str]:
        conf = {
            "spark.connect.grpc.binding.address": self.host,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": self.host,
            "spark.driver.bindAddress": self.host,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.catalogImplementation": "in-memory",
            "spark.local.dir": str(work / "local"),
            "spark.sql.warehouse.dir": str(work / "warehouse"),
            "spark.pyspark.python": self.python,
            "spark.pyspark.driver.python": self.python,
            "spark.python.worker.faulthandler.enabled": "true",
        }
        conf.update(self._conf)
        argv = [
            str(home / "bin" / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--name",
            "laminar-spark-connect",
            "--master",
            self.master,
            "--driver-memory",
            self.driver_memory,
        ]
        jars = list(self._jars)
        if self.kafka_connector:
            jars += [str(j) for j in find_spark_kafka_jars()]
        if self.avro_functions:
            jars += [str(j) for j in find_spark_avro_jars()]
        if jars:
            argv += ["--jars", ",".join(jars)]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        return argv

    def _child_env(self, home: Path) -> dict[str, str]:
        env = dict(os.environ)
        # A client-side setting here would make the server try to be a client.
        for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_SUBMIT_ARGS"):
            env.pop(name, None)
        env.update(
            {
                "SPARK_HOME": str(home),
                "PYSPARK_PYTHON": self.python,
                "PYSPARK_DRIVER_PYTHON": self.python,
                "SPARK_LOCAL_IP": self.host,
                "SPARK_CONNECT_MODE": "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self._env)
        return env

    def _answers_query(self) -> bool:
        # In-function: pyspark is optional (only a started server needs it).
        from pyspark.sql import SparkSession

        try:
            session = SparkSession.builder.remote(self.remote_url).create()
        except Exception:
            return False
        try:
            return session.range(1).count() == 1
        except Exception:
            return False
        finally:
            # The readiness answer stands even if closing the probe session fails.
            with contextlib.suppress(Exception):
                session.stop()
