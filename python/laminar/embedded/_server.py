"""What the embedded servers share: one child process behind ``pid``/``is_running``/``kill``, a
context manager over ``start``/``stop``, and (for the brokers) the admin helpers: `KafkaAdmin`,
`create_topic`, `answers_metadata`.

Each server keeps its own ``start``/``stop``/``restart``: what survives a stop (data, ports, the
scratch directory) differs from one to the next, and each says so in its docstrings.
"""

from __future__ import annotations

import shutil
import signal
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, TypeVar

from laminar.embedded._process import EmbeddedServerError, ServerProcess, log_tail, wait_until

__all__ = ["EmbeddedServer", "KafkaAdmin"]

_S = TypeVar("_S", bound="EmbeddedServer")  # typing.Self needs 3.11; the wheel supports 3.10


class EmbeddedServer:
    """Base of the embedded servers: ``with server:`` starts it and stops it on the way out."""

    _process: ServerProcess | None
    _dir: Path | None
    _process_finalizer: weakref.finalize[..., Any] | None = None
    _dir_finalizer: weakref.finalize[..., Any] | None = None
    _log_path_arg: Path | None = None
    #: What errors call the server, and its log's file name in its scratch directory.
    _NAME: ClassVar[str] = "the server"
    _LOG_NAME: ClassVar[str] = "server.log"

    def start(self: _S) -> _S:  # pragma: no cover - every server overrides it
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - every server overrides it
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process is not None and self._process.alive() else None

    @property
    def log_path(self) -> Path:
        """The server's log (its stdout and stderr): ``log_path=`` if given, else a file in its
        scratch directory."""
        if self._log_path_arg is not None:
            return self._log_path_arg
        return self._started_dir() / self._LOG_NAME

    def _started_dir(self) -> Path:
        """The scratch directory; an `EmbeddedServerError` before the first `start`."""
        if self._dir is None:
            raise EmbeddedServerError(f"{self._NAME} has not been started")
        return self._dir

    def is_running(self) -> bool:
        """Whether the server's process is running."""
        return self._process is not None and self._process.alive()

    def pause(self) -> None:
        """SIGSTOP the server's process group: a hung server (its sockets stay open, nothing
        answers); `resume` lets it go on. Tests that pause resume in a ``finally``."""
        if self._process is None or not self._process.alive():
            raise EmbeddedServerError(f"{self._NAME} is not running")
        self._process.pause()

    def resume(self) -> None:
        """SIGCONT the server's process group after `pause`."""
        if self._process is not None:
            self._process.resume()

    @property
    def paused(self) -> bool:
        """Whether the server is paused (`pause`)."""
        return self._process is not None and self._process.paused

    def kill(self) -> None:
        """SIGKILL the server's process group, as a crash would; `start` brings it back (what
        survives is the server's own: see its class)."""
        if self._process is not None:
            self._process.kill()
            self._process = None

    # -- for the servers' start/stop ---------------------------------------------------------

    def _own_dir(self, directory: Path) -> Path:
        """Take ``directory`` as the server's scratch directory, removed by `_forget_dir` or,
        as a safety net, when the server object is collected or the interpreter exits."""
        self._dir = directory
        self._dir_finalizer = weakref.finalize(self, shutil.rmtree, directory, True)
        return directory

    def _adopt(self, process: ServerProcess) -> None:
        """Make ``process`` the server's; it is stopped (SIGTERM) if the server object is
        collected or the interpreter exits while it still runs."""
        self._process = process
        if self._process_finalizer is not None:
            self._process_finalizer.detach()
        self._process_finalizer = weakref.finalize(self, _terminate, process)

    def _start_failed(
        self, process: ServerProcess, error: EmbeddedServerError
    ) -> EmbeddedServerError:
        """SIGKILL a server that did not come up; the error to raise, with its log's tail."""
        process.kill()
        self._process = None
        tail = log_tail(self.log_path, 40)
        return EmbeddedServerError(f"{error.message}\nlog {self.log_path}:\n{tail}")

    def _await(self, process: ServerProcess, ready: Callable[[], bool], what: str) -> None:
        """Wait until ``ready()`` (up to ``self.startup_timeout``); on a timeout or the process's
        exit, kill it and raise an `EmbeddedServerError` with the tail of its log."""
        try:
            wait_until(
                ready,
                timeout=float(getattr(self, "startup_timeout", 60.0)),
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

    def _end_process(self, timeout: float) -> None:
        """SIGTERM the process (SIGKILL after ``timeout``) and drop its safety net."""
        if self._process is not None:
            self._process.terminate(signal.SIGTERM, timeout=timeout)
            self._process = None
        if self._process_finalizer is not None:
            self._process_finalizer.detach()
            self._process_finalizer = None

    def _forget_dir(self) -> None:
        """Remove the scratch directory (the server's data with it)."""
        if self._dir_finalizer is not None:
            self._dir_finalizer()
            self._dir_finalizer = None
        self._dir = None

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class KafkaAdmin:
    """The admin helpers of an embedded broker (Apache Kafka, Tansu): needs `bootstrap_servers`."""

    host: str
    port: int
    #: The replication factor of the topics `create_topic` creates.
    replication_factor: int = 1

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for the Kafka clients' ``bootstrap.servers``."""
        if not self.port:
            raise EmbeddedServerError("the broker has not been started")
        return f"{self.host}:{self.port}"

    def admin_client(self, **config: Any) -> Any:
        """A confluent-kafka ``AdminClient`` for this broker."""
        from confluent_kafka.admin import AdminClient  # kept off `import laminar.embedded`

        return AdminClient({"bootstrap.servers": self.bootstrap_servers, **config})

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        timeout: float = 15.0,
    ) -> None:
        """Create a topic and wait until its metadata shows every partition."""
        create_topic(
            self.bootstrap_servers,
            name,
            partitions,
            config=config,
            timeout=timeout,
            replication_factor=self.replication_factor,
        )


def answers_metadata(
    bootstrap_servers: str, *, need_brokers: bool = False, cluster_id: str | None = None
) -> bool:
    """Whether the broker answers a metadata request (within 2 s); with ``need_brokers``, also
    whether the answer names at least one broker (a KRaft broker that has not registered with
    its controller yet answers with none) and every partition has a leader; with
    ``cluster_id``, whether it is that cluster (and not another server that holds the port)."""

    from confluent_kafka import KafkaException  # kept off `import laminar.embedded._server`
    from confluent_kafka.admin import AdminClient  # the same

    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "logger": _QUIET}
    try:
        admin = AdminClient(config)
        metadata = admin.list_topics(timeout=2)
    except KafkaException:
        return False
    if cluster_id is not None and metadata.cluster_id != cluster_id:
        return False
    if not need_brokers:
        return True
    # Every partition led (after a restart, leaders come back shortly after the broker does).
    partitions = [p for topic in metadata.topics.values() for p in topic.partitions.values()]
    return bool(metadata.brokers) and all(p.leader >= 0 and p.error is None for p in partitions)


def create_topic(
    bootstrap_servers: str,
    name: str,
    partitions: int = 1,
    *,
    config: Mapping[str, str] | None = None,
    timeout: float = 15.0,
    replication_factor: int = 1,
) -> None:
    """Create a topic on any Kafka-protocol broker and wait until its partitions show up."""
    from confluent_kafka import KafkaException  # kept off `import laminar.embedded._server`
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # same

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    topic = NewTopic(name, partitions, replication_factor, config=dict(config or {}))
    futures = admin.create_topics([topic], operation_timeout=timeout)
    try:
        futures[name].result(timeout)
    except KafkaException as e:
        raise EmbeddedServerError(f"could not create topic {name!r}: {e}") from e

    def ready() -> bool:
        topic = admin.list_topics(name, timeout=5).topics.get(name)
        return topic is not None and topic.error is None and len(topic.partitions) == partitions

    wait_until(ready, timeout=timeout, what=f"topic {name!r} metadata", interval=0.1)


class _QuietLogger:
    """Swallows librdkafka's connection-refused chatter while a broker starts."""

    def log(self, *args: object, **kwargs: object) -> None:
        pass


_QUIET = _QuietLogger()


def _terminate(process: ServerProcess) -> None:
    process.terminate(signal.SIGTERM, timeout=30)
