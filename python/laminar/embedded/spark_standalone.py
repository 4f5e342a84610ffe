"""The standalone daemons of a Spark cluster — `SparkMaster`, `SparkWorker` — each a JVM run by
the installed ``pyspark``'s ``bin/spark-class``, and the executor JVMs a worker launches
(`ExecutorProcess`: found by their command line, with the Python workers they fork).

`laminar.embedded.spark_cluster.SparkCluster` puts them together with a Spark Connect server.
"""

from __future__ import annotations

import contextlib
import json
import os
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
    port_accepts,
    process_tree,
    wait_until,
)
from laminar.embedded._server import EmbeddedServer

__all__ = [
    "EXECUTOR_CLASS",
    "ExecutorProcess",
    "SparkMaster",
    "SparkWorker",
    "get_json",
    "is_alive",
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


def is_alive(pid: int) -> bool:
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


def get_json(url: str, timeout: float = 30.0) -> Any:
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
        return is_alive(self.pid)

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
            if pid == self.pid or not is_alive(pid):
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

    def state(self, timeout: float = 30.0) -> dict[str, Any]:
        """The daemon's ``/json/`` page (the master's lists workers and applications)."""
        data: dict[str, Any] = get_json(f"{self.webui_url}/json/", timeout)
        return data

    def stop(self, *, timeout: float = 30.0) -> None:
        """SIGTERM the daemon (SIGKILL after ``timeout``; what it started goes with it). Its
        ports and directory stay, for `start` to bring it back the same."""
        self._end_process(timeout)

    def restart(self) -> None:
        """Stop the daemon and start it again on the same ports."""
        self.stop()
        self.start()

    def _address_args(self) -> list[str]:
        """``--host``, ``--port``, ``--webui-port``: free ports on first use, the same after."""
        if not self.port:
            self.port = free_port(self.host)
        if not self.webui_port:
            self.webui_port = free_port(self.host)
        return ["--host", self.host, "--port", str(self.port), "--webui-port", str(self.webui_port)]

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
            raise self._start_failed(process, e) from None
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
        self._launch(self._address_args(), "Spark master", self._elected)
        return self

    def alive_workers(self) -> list[dict[str, Any]]:
        """The workers registered and ALIVE, as the master's ``/json/`` lists them."""
        workers = self.state().get("workers", [])
        return [w for w in workers if w.get("state") == "ALIVE"]

    def _elected(self) -> bool:
        try:
            return self.state(timeout=5.0).get("status") == "ALIVE"
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
            for worker in self.master.state(timeout=5.0).get("workers", []):
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
        args = [
            *self._address_args(),
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
            if EXECUTOR_CLASS in argv and is_alive(pid):
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
