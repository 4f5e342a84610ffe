"""A Spark standalone cluster on loopback — a master, workers, a Spark Connect server on it — each
its own JVM, from the installed ``pyspark``'s jars; and the handles to crash its parts.

``pyspark`` 4.x ships Spark's jars and ``bin/spark-class``, which runs the standalone daemons
(``org.apache.spark.deploy.master.Master``, ``org.apache.spark.deploy.worker.Worker``). The
Spark Connect server (`SparkConnectServer`, ``master=spark://…``) is the application's driver;
each worker launches the application's executor as a JVM of its own
(``org.apache.spark.executor.CoarseGrainedExecutorBackend``), and each executor forks Python
workers from its ``pyspark.daemon``. Everything runs with this interpreter (``PYSPARK_PYTHON``),
so the executors' Python imports whatever this one does (``laminar`` included).

Memory is kept small for a shared test machine: the daemons get ``SPARK_DAEMON_MEMORY`` (256 MiB
heaps), each executor 512 MiB and one core (``spark.executor.cores=1``; a worker offers one core
by default, so each worker runs one executor).

`SparkCluster.executors` finds the executor JVMs under each worker, `ExecutorProcess.python_workers`
the Python workers an executor forked; `kill_executor` and `kill_python_worker` SIGKILL one, as a
lost machine or an out-of-memory kill would; `restart_worker` stops a worker (its executors
with it) and starts it again. The master launches a replacement executor by itself when one is
lost (standalone's own recovery).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from laminar.embedded._process import EmbeddedServerError, free_port, process_tree, wait_until
from laminar.embedded._server import EmbeddedServer
from laminar.embedded.kafka import find_java
from laminar.embedded.spark import SparkConnectServer, find_spark_home
from laminar.embedded.spark_standalone import (
    ExecutorProcess,
    SparkMaster,
    SparkWorker,
    get_json,
    is_alive,
)

__all__ = ["ExecutorProcess", "SparkCluster", "SparkMaster", "SparkWorker"]


class SparkCluster(EmbeddedServer):
    """A Spark standalone cluster on 127.0.0.1: a master, ``workers`` workers and a Spark
    Connect server whose application runs on them — each its own JVM, from ``pyspark``'s jars.

        with SparkCluster(workers=2, env={"ORDERS_PG_DSN": dsn}) as cluster:
            spark = SparkSession.builder.remote(cluster.remote_url).getOrCreate()
            victim = cluster.executors()[0]
            cluster.kill_executor(victim)

    ``env`` is the environment of the workers (and so of their executors and Python workers)
    and of the Spark Connect server: how a deployment gives every node a variable
    (``spark-env.sh``), which Spark never shows in its UI; ``driver_env`` adds variables for the
    Connect server (the driver) only. ``conf`` adds Spark settings of the application
    (``--conf``), e.g. ``spark.executorEnv.NAME``. The driver's web UI is on
    (``ui_url``: its REST API is ``/api/v1``), on a free port.

    Start-up takes the master, then the workers, then the Connect server (which waits until a
    query ran on an executor); `startup_seconds` is the whole, `SparkConnectServer.startup_seconds`
    the last part.
    """

    _NAME = "the Spark cluster"
    _LOG_NAME = "spark-cluster"

    def __init__(
        self,
        *,
        workers: int = 2,
        worker_cores: int = 1,
        worker_memory: str = "640m",
        executor_memory: str = "512m",
        driver_memory: str = "768m",
        daemon_memory: str = "256m",
        python: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        driver_env: Mapping[str, str] | None = None,
        conf: Mapping[str, str] | None = None,
        kafka_connector: bool = False,
        spark_home: str | os.PathLike[str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        startup_timeout: float = 240.0,
    ) -> None:
        """Configure the cluster; nothing runs until `start`. Logs go to ``log_dir`` (default:
        the scratch directory): ``spark-master.log``, ``spark-worker-<i>.log``,
        ``spark-connect.log``, and each executor's ``stderr`` under
        ``worker-<i>-executors/<app id>/<executor id>/``."""
        if workers < 1:
            raise EmbeddedServerError(f"a Spark cluster needs at least one worker, not {workers}")
        self.worker_count = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.executor_memory = executor_memory
        self.driver_memory = driver_memory
        self.daemon_memory = daemon_memory
        self.python = str(python) if python is not None else sys.executable
        self._env = dict(env or {})
        self._driver_env = dict(driver_env or {})
        self._conf = dict(conf or {})
        self.kafka_connector = kafka_connector
        self._spark_home = Path(spark_home) if spark_home is not None else None
        self._log_dir_arg = Path(log_dir) if log_dir is not None else None
        self.startup_timeout = startup_timeout
        self._process = None
        self._dir: Path | None = None
        self.master: SparkMaster | None = None
        self.workers: list[SparkWorker] = []
        self.connect: SparkConnectServer | None = None
        self.ui_port = 0
        #: Seconds the last `start` took, master to a query answered on the executors.
        self.startup_seconds: float | None = None

    # -- where things are ------------------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        """Where the cluster's processes log."""
        return self._log_dir_arg if self._log_dir_arg is not None else self._started_dir()

    @property
    def log_path(self) -> Path:
        """The Spark Connect server's (the driver's) log."""
        return self.log_dir / "spark-connect.log"

    @property
    def master_url(self) -> str:
        """``spark://host:port`` of the master."""
        return self._master().url

    @property
    def remote_url(self) -> str:
        """``sc://host:port`` for ``SparkSession.builder.remote(...)``."""
        if self.connect is None:
            raise EmbeddedServerError("the Spark cluster has not been started")
        return self.connect.remote_url

    @property
    def ui_url(self) -> str:
        """The driver's web UI; its REST API is ``<ui_url>/api/v1`` (docs/spark.md: what it
        shows of ``spark.executorEnv.*``)."""
        if not self.ui_port:
            raise EmbeddedServerError("the Spark cluster has not been started")
        return f"http://127.0.0.1:{self.ui_port}"

    @property
    def pid(self) -> int | None:
        """The master's pid while it runs."""
        return self.master.pid if self.master is not None else None

    def is_running(self) -> bool:
        """Whether the master, every worker and the Connect server run."""
        parts: list[EmbeddedServer | None] = [self.master, *self.workers, self.connect]
        return bool(self.workers) and all(p is not None and p.is_running() for p in parts)

    # -- life cycle ------------------------------------------------------------------------------

    def start(self) -> SparkCluster:
        """Start the master, the workers and the Connect server; return ``self`` once a query
        ran on the cluster's executors."""
        if self.is_running():
            return self
        home = self._spark_home or find_spark_home()
        self._spark_home = home
        find_java()  # the clear error when Java is missing
        if self._dir is None:
            self._own_dir(Path(tempfile.mkdtemp(prefix="laminar-spark-cluster-")))
        work = self._started_dir()
        logs = self.log_dir
        logs.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        env = {"PYSPARK_PYTHON": self.python, "PYSPARK_DRIVER_PYTHON": self.python, **self._env}
        common: dict[str, Any] = {
            "spark_home": home,
            "env": env,
            "daemon_memory": self.daemon_memory,
            "startup_timeout": self.startup_timeout,
        }
        try:
            if self.master is None:
                self.master = SparkMaster(
                    work_dir=work / "master", log_path=logs / "spark-master.log", **common
                )
            self.master.start()
            if not self.workers:
                self.workers = [
                    SparkWorker(
                        self.master,
                        cores=self.worker_cores,
                        memory=self.worker_memory,
                        work_dir=work / f"worker-{i}",
                        executor_logs=logs / f"worker-{i}-executors",
                        log_path=logs / f"spark-worker-{i}.log",
                        **common,
                    )
                    for i in range(self.worker_count)
                ]
            for worker in self.workers:
                worker.spawn()
            for worker in self.workers:
                worker.wait_ready()
            if not self.ui_port:
                self.ui_port = free_port()
            if self.connect is None:
                self.connect = SparkConnectServer(
                    master=self.master.url,
                    python=self.python,
                    driver_memory=self.driver_memory,
                    conf=self._application_conf(),
                    kafka_connector=self.kafka_connector,
                    env={**self._env, **self._driver_env},
                    spark_home=home,
                    log_path=logs / "spark-connect.log",
                    startup_timeout=self.startup_timeout,
                )
            self.connect.start()
        except BaseException:
            self.stop(keep_dir=True)
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self, *, keep_dir: bool = False, timeout: float = 30.0) -> None:
        """Stop the Connect server, the workers (their executors with them) and the master;
        unless ``keep_dir``, remove the scratch directory (logs kept when ``log_dir`` is
        elsewhere)."""
        if self.connect is not None:
            self.connect.stop(keep_dir=keep_dir, timeout=timeout)
        for worker in reversed(self.workers):
            worker.stop(timeout=timeout)
        if self.master is not None:
            self.master.stop(timeout=timeout)
        if not keep_dir:
            self.connect, self.workers, self.master, self.ui_port = None, [], None, 0
            self._forget_dir()

    def kill(self) -> None:
        """SIGKILL every process of the cluster, as a machine crash would."""
        for part in [self.connect, *self.workers, self.master]:
            if part is not None:
                part.kill()

    def restart_worker(self, index: int, *, timeout: float = 30.0) -> SparkWorker:
        """Stop worker ``index`` (SIGTERM; its executors end with it) and start it again on the
        same ports; the master then gives the application an executor there again."""
        worker = self.workers[index]
        worker.stop(timeout=timeout)
        return worker.start()

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` with its executors and their Python workers; `start_worker`
        brings it back."""
        self.workers[index].kill()

    def start_worker(self, index: int) -> SparkWorker:
        """Start worker ``index`` again (after `kill_worker`)."""
        return self.workers[index].start()

    # -- executors and Python workers ------------------------------------------------------------

    def executors(self) -> list[ExecutorProcess]:
        """Every executor JVM running now, worker by worker."""
        return [e for i, w in enumerate(self.workers) for e in w.executors(i)]

    def executor_of(self, pid: int) -> ExecutorProcess | None:
        """The executor whose process tree holds ``pid`` (a Python worker, its daemon)."""
        for executor in self.executors():
            if pid in process_tree(executor.pid):
                return executor
        return None

    def wait_for_executors(self, count: int | None = None, timeout: float = 120.0) -> None:
        """Wait until ``count`` executors run (default: one per worker), e.g. after a kill."""
        want = self.worker_count if count is None else count
        wait_until(
            lambda: len(self.executors()) >= want,
            timeout=timeout,
            what=f"{want} Spark executor(s)",
            interval=0.5,
        )

    def kill_executor(self, executor: ExecutorProcess | int) -> ExecutorProcess:
        """SIGKILL one executor JVM (an `ExecutorProcess`, or the pid of it or of any process
        under it); its Python daemon then shuts its workers down (standard input closed). The
        master launches a replacement. Returns the executor killed."""
        victim = executor if isinstance(executor, ExecutorProcess) else self.executor_of(executor)
        if victim is None or not victim.alive():
            raise EmbeddedServerError(f"no running executor holds {executor!r}")
        os.kill(victim.pid, signal.SIGKILL)
        wait_until(lambda: not victim.alive(), timeout=30, what=f"executor {victim.pid} to die")
        return victim

    def kill_python_worker(self, pid: int) -> None:
        """SIGKILL one Python worker of an executor (e.g. the one running a task): Spark fails
        that task attempt and retries it; the executor stays."""
        executor = self.executor_of(pid)
        if executor is None or pid not in executor.python_workers():
            raise EmbeddedServerError(f"{pid} is not a Python worker of a running executor")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not is_alive(pid), timeout=30, what=f"Python worker {pid} to die")

    # -- the driver's REST API -------------------------------------------------------------------

    def application_id(self) -> str:
        """The Connect server's application id (the driver's REST API)."""
        apps = self.rest("applications")
        if not apps:
            raise EmbeddedServerError("the driver's REST API lists no application")
        return str(apps[0]["id"])

    def rest(self, path: str) -> Any:
        """``GET <ui_url>/api/v1/<path>``, decoded JSON (``applications/<id>/environment``: the
        Spark properties as Spark shows them, redacted by ``spark.redaction.regex``)."""
        return get_json(f"{self.ui_url}/api/v1/{path.lstrip('/')}")

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        master = self.master.url if self.master is not None and self.master.port else "no master"
        return f"SparkCluster({master}, workers={self.worker_count}, {state})"

    # -- internals -------------------------------------------------------------------------------

    def _master(self) -> SparkMaster:
        if self.master is None:
            raise EmbeddedServerError("the Spark cluster has not been started")
        return self.master

    def _application_conf(self) -> dict[str, str]:
        conf = {
            "spark.executor.memory": self.executor_memory,
            "spark.executor.cores": "1",
            "spark.cores.max": str(self.worker_count * self.worker_cores),
            "spark.ui.enabled": "true",
            "spark.ui.port": str(self.ui_port),
            "spark.ui.showConsoleProgress": "false",
            "spark.executorEnv.PYSPARK_PYTHON": self.python,
            "spark.executorEnv.PYTHONUNBUFFERED": "1",
            "spark.executor.extraJavaOptions": "-XX:+UseSerialGC",
        }
        conf.update(self._conf)
        return conf
