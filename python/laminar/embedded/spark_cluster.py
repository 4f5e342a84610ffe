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

import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from laminar.embedded._process import (
    EmbeddedServerError,
    ServerProcess,
    free_port,
    log_tail,
    port_accepts,
    process_tree,
    wait_until,
)
from laminar.embedded._server import EmbeddedServer
from laminar.embedded.kafka import find_java
from laminar.embedded.spark import SparkConnectServer, find_spark_home

__all__ = [
    "EXECUTOR_CLASS",
    "ExecutorProcess",
    "SparkCluster",
    "SparkMaster",
    "SparkWorker",
]

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: The class of a standalone executor's JVM (the worker runs one per application).
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
#: The module of the Python daemon an executor forks its Python workers from.
PYTHON_DAEMON_MODULE = "pyspark.daemon"


def _cmdline(pid: int) -> list[str]:
    """The command line of ``pid`` (``[]`` once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not count)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def _argument(argv: list[str], flag: str) -> str | None:
    with contextlib.suppress(ValueError, IndexError):
        return argv[argv.index(flag) + 1]
    return None


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback http)
        return json.loads(response.read().decode())


def _is_python_daemon(argv: list[str]) -> bool:
    """Whether a command line is Spark's Python daemon (``python -m pyspark.daemon …``)."""
    return PYTHON_DAEMON_MODULE in argv


@dataclass(frozen=True)
class ExecutorProcess:
    """One executor JVM of the cluster, as ``ps`` shows it."""

    pid: int
    #: Spark's executor id (``--executor-id``) and application id (``--app-id``).
    executor_id: str
    app_id: str
    #: The index of the worker that launched it (`SparkCluster.workers`).
    worker: int

    def alive(self) -> bool:
        """Whether the JVM still runs."""
        return _alive(self.pid)

    def python_daemon(self) -> int | None:
        """The pid of the executor's ``pyspark.daemon`` (forked Python workers' parent), if any."""
        for pid in process_tree(self.pid):
            if _parent(pid) == self.pid and _is_python_daemon(_cmdline(pid)):
                return pid
        return None

    def python_workers(self) -> list[int]:
        """The pids of the Python workers this executor runs (each serves one task at a time):
        the daemon's forked children, or Python processes the JVM started directly when the
        daemon is off (``spark.python.use.daemon=false``)."""
        workers = []
        for pid in process_tree(self.pid):
            if pid == self.pid or not _alive(pid):
                continue
            argv = _cmdline(pid)
            if not argv or "python" not in Path(argv[0]).name:
                continue
            if _parent(pid) == self.pid and _is_python_daemon(argv):
                continue  # the daemon itself only forks
            workers.append(pid)
        return sorted(workers)


class _SparkDaemon(EmbeddedServer):
    """A standalone daemon (master or worker) run by ``bin/spark-class``: its RPC port, its web
    UI's port (``/json/`` tells its state) and its log."""

    _CLASS: str = ""

    def __init__(
        self,
        *,
        spark_home: Path,
        work_dir: Path,
        log_path: Path,
        env: Mapping[str, str],
        daemon_memory: str,
        startup_timeout: float,
    ) -> None:
        self.host = "127.0.0.1"
        self.port = 0
        self.webui_port = 0
        self._spark_home = spark_home
        self._work = work_dir
        self._log_path_arg = log_path
        self._env = dict(env)
        self.daemon_memory = daemon_memory
        self.startup_timeout = startup_timeout
        self._process: ServerProcess | None = None
        self._dir = work_dir
        self._started_at: float | None = None
        self._ready: Callable[[], bool] = lambda: True
        self._what = self._NAME
        #: Seconds the last `start` took until the daemon was ready.
        self.startup_seconds: float | None = None

    @property
    def webui_url(self) -> str:
        """The daemon's web UI (``/json/`` is its state as JSON)."""
        return f"http://{self.host}:{self.webui_port}"

    def state(self) -> dict[str, Any]:
        """The daemon's ``/json/`` page (the master's lists workers and applications)."""
        data: dict[str, Any] = _get_json(f"{self.webui_url}/json/")
        return data

    def stop(self, *, timeout: float = 30.0) -> None:
        """SIGTERM the daemon (SIGKILL after ``timeout``; what it started goes with it). Its
        ports and directory stay, for `start` to bring it back the same."""
        self._end_process(timeout)

    def restart(self) -> None:
        """Stop the daemon and start it again on the same ports."""
        self.stop()
        self.start()

    def _launch(self, args: list[str], name: str, ready: Callable[[], bool]) -> None:
        """`_spawn` then `wait_ready`."""
        self._spawn(args, name, ready)
        self.wait_ready()

    def _spawn(self, args: list[str], name: str, ready: Callable[[], bool]) -> None:
        """Start the daemon's JVM (not waiting: the cluster starts its workers together)."""
        if self.is_running():
            return
        self._work.mkdir(parents=True, exist_ok=True)
        argv = [str(self._spark_home / "bin" / "spark-class"), self._CLASS, *args]
        env = dict(os.environ)
        for var in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_SUBMIT_ARGS"):
            env.pop(var, None)
        env.update(
            {
                "SPARK_HOME": str(self._spark_home),
                "SPARK_DAEMON_MEMORY": self.daemon_memory,
                "SPARK_LOCAL_IP": self.host,
                "SPARK_LOCAL_DIRS": str(self._work / "local"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self._env)
        self._started_at = time.monotonic()
        self._ready = ready
        self._what = f"{name} on {self.host}:{self.port}"
        self._adopt(ServerProcess(argv, log_path=self.log_path, name=name, cwd=self._work, env=env))

    def wait_ready(self) -> None:
        """After the spawn: wait until the daemon answers and is ready (`_spawn`'s ``ready``);
        on failure kill it and raise `EmbeddedServerError` with its log's tail."""
        process = self._process
        if process is None:
            raise EmbeddedServerError(f"{self._NAME} has not been started")
        ready = self._ready
        try:
            wait_until(
                lambda: port_accepts(self.host, self.port) and ready(),
                timeout=self.startup_timeout,
                what=self._what,
                interval=0.25,
                abort=process.exit_reason,
            )
        except EmbeddedServerError as e:
            process.kill()
            self._process = None
            raise EmbeddedServerError(
                f"{e.message}\nlog {self.log_path}:\n{log_tail(self.log_path, 40)}"
            ) from None
        if self._started_at is not None:
            self.startup_seconds = time.monotonic() - self._started_at
            self._started_at = None


class SparkMaster(_SparkDaemon):
    """The standalone master (``spark://127.0.0.1:<port>``), ready once its UI says ALIVE."""

    _NAME = "the Spark master"
    _LOG_NAME = "spark-master.log"
    _CLASS = MASTER_CLASS

    @property
    def url(self) -> str:
        """``spark://host:port``: the ``master`` of applications and workers."""
        if not self.port:
            raise EmbeddedServerError("the Spark master has not been started")
        return f"spark://{self.host}:{self.port}"

    def start(self) -> SparkMaster:
        """Start the master and wait until it is the ALIVE leader; return ``self``."""
        if not self.port:
            self.port = free_port(self.host)
        if not self.webui_port:
            self.webui_port = free_port(self.host)
        args = [
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui_port),
        ]
        self._launch(args, "Spark master", self._alive)
        return self

    def alive_workers(self) -> list[dict[str, Any]]:
        """The workers registered and ALIVE, as the master's ``/json/`` lists them."""
        workers = self.state().get("workers", [])
        return [w for w in workers if w.get("state") == "ALIVE"]

    def _alive(self) -> bool:
        try:
            return self.state().get("status") == "ALIVE"
        except OSError:
            return False

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"SparkMaster({self.host}:{self.port}, {state})"


class SparkWorker(_SparkDaemon):
    """A standalone worker: ``cores`` and ``memory`` to offer to executors, registered with the
    master at ``master_url``. Executors it launches are its child processes and log under
    ``executor_logs/<app id>/<executor id>/``."""

    _NAME = "a Spark worker"
    _LOG_NAME = "spark-worker.log"
    _CLASS = WORKER_CLASS

    def __init__(
        self,
        master: SparkMaster,
        *,
        cores: int,
        memory: str,
        spark_home: Path,
        work_dir: Path,
        executor_logs: Path,
        log_path: Path,
        env: Mapping[str, str],
        daemon_memory: str,
        startup_timeout: float,
    ) -> None:
        super().__init__(
            spark_home=spark_home,
            work_dir=work_dir,
            log_path=log_path,
            env=env,
            daemon_memory=daemon_memory,
            startup_timeout=startup_timeout,
        )
        self.master = master
        self.cores = cores
        self.memory = memory
        #: The worker's ``--work-dir``: each executor's ``<app id>/<executor id>/stderr``.
        self.executor_logs = executor_logs

    @property
    def worker_id(self) -> str | None:
        """The id the master gave this worker (``worker-<time>-<host>-<port>``), once registered."""
        with contextlib.suppress(OSError):
            for worker in self.master.state().get("workers", []):
                if worker.get("port") == self.port and worker.get("state") == "ALIVE":
                    return str(worker.get("id"))
        return None

    def start(self) -> SparkWorker:
        """Start the worker and wait until the master lists it ALIVE; return ``self``."""
        self.spawn()
        self.wait_ready()
        return self

    def spawn(self) -> None:
        """Start the worker's JVM without waiting (`start` waits; the cluster starts its
        workers together, then waits for each)."""
        if not self.port:
            self.port = free_port(self.host)
        if not self.webui_port:
            self.webui_port = free_port(self.host)
        args = [
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui_port),
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            str(self.executor_logs),
            self.master.url,
        ]
        self._spawn(args, "Spark worker", lambda: self.worker_id is not None)

    def executors(self, worker_index: int = 0) -> list[ExecutorProcess]:
        """The executor JVMs this worker runs now."""
        if self._process is None or not self._process.alive():
            return []
        found = []
        for pid in process_tree(self._process.pid):
            argv = _cmdline(pid)
            if EXECUTOR_CLASS in argv and _alive(pid):
                found.append(
                    ExecutorProcess(
                        pid=pid,
                        executor_id=_argument(argv, "--executor-id") or "?",
                        app_id=_argument(argv, "--app-id") or "?",
                        worker=worker_index,
                    )
                )
        return found

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"SparkWorker({self.host}:{self.port}, cores={self.cores}, {state})"


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
        wait_until(lambda: not _alive(pid), timeout=30, what=f"Python worker {pid} to die")

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
        return _get_json(f"{self.ui_url}/api/v1/{path.lstrip('/')}")

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
