"""A real Schema Registry (Apicurio Registry, its Confluent-compatible API) on a free loopback
port, in its own JVM, with in-memory storage.

The registry is not shipped with Laminar: ``scripts/bootstrap.sh`` unpacks its published
distribution (``io.apicurio:apicurio-registry-app:<version>:zip:all``, ``scripts/registry/pom.xml``)
with Maven into ``~/.cache/laminar/apicurio-registry-<version>/app`` (``$LAMINAR_CACHE`` moves
the cache, ``$LAMINAR_REGISTRY_APP`` names another unpacked distribution). Nothing is downloaded
here. Its Confluent-compatible API (``/apis/ccompat/v7``: subjects, versions, schema ids,
compatibility) is what the Avro sink and confluent-kafka's ``AvroSerializer`` /
``AvroDeserializer`` use (docs/kafka.md, "Avro with a Schema Registry").

The storage lives in the JVM's memory (H2): a `kill` or `stop` loses every schema, so a test that
stops the registry to make it unreachable and then starts it again must expect fresh ids.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from laminar.embedded._process import (
    EmbeddedServerError,
    ServerProcess,
    free_port,
)
from laminar.embedded._server import EmbeddedServer
from laminar.embedded.kafka import find_java, laminar_cache_dir

__all__ = ["APICURIO_VERSION", "SchemaRegistry", "find_registry_app"]

#: The Apicurio Registry version bootstrap unpacks (``<apicurio.version>`` in
#: ``scripts/registry/pom.xml``; a unit test keeps the two equal).
APICURIO_VERSION = "2.6.13.Final"

#: The path of the Confluent-compatible API under the registry's root.
CCOMPAT_PATH = "/apis/ccompat/v7"


def find_registry_app() -> Path:
    """The unpacked registry distribution (its ``*-runner.jar`` and ``lib/``):
    ``$LAMINAR_REGISTRY_APP``, else ``<cache>/apicurio-registry-<APICURIO_VERSION>/app``."""
    env = os.environ.get("LAMINAR_REGISTRY_APP")
    app = (
        Path(env) if env else laminar_cache_dir() / f"apicurio-registry-{APICURIO_VERSION}" / "app"
    )
    if not any(app.glob("apicurio-registry-app-*-runner.jar")):
        where = "LAMINAR_REGISTRY_APP" if env else "the bootstrap cache"
        raise EmbeddedServerError(
            f"no Apicurio Registry distribution in {app} ({where}): run scripts/bootstrap.sh "
            "(it unpacks scripts/registry/pom.xml's io.apicurio:apicurio-registry-app zip with "
            "Maven), or set LAMINAR_REGISTRY_APP to an unpacked distribution"
        )
    return app


class SchemaRegistry(EmbeddedServer):
    """An Apicurio Registry on 127.0.0.1, in memory; ``url`` is its Confluent-compatible root,
    the ``url`` a Schema Registry client takes::

        with SchemaRegistry() as registry:
            registry.set_compatibility("orders-value", "BACKWARD")
            client = SchemaRegistryClient({"url": registry.url})
    """

    _NAME = "the schema registry"
    _LOG_NAME = "registry.log"

    def __init__(
        self,
        *,
        port: int | None = None,
        heap: str = "384m",
        app: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        """Configure the registry; nothing runs until `start`."""
        self.host = "127.0.0.1"
        self._requested_port = port
        self.port = port or 0
        self.heap = heap
        self._app = Path(app) if app is not None else None
        self._log_path_arg = Path(log_path) if log_path is not None else None
        self.startup_timeout = startup_timeout
        self._dir: Path | None = None
        self._process: ServerProcess | None = None

    @property
    def url(self) -> str:
        """The Confluent-compatible API's root (``http://127.0.0.1:<port>/apis/ccompat/v7``)."""
        if not self.port:
            raise EmbeddedServerError("the schema registry has not been started")
        return f"http://{self.host}:{self.port}{CCOMPAT_PATH}"

    def start(self) -> SchemaRegistry:
        """Start the registry (again, on the same port, after `stop`/`kill`: empty) and wait
        until its Confluent-compatible API answers; return ``self``."""
        if self.is_running():
            return self
        java = find_java()
        app = self._app or find_registry_app()
        self._app = app
        if self._dir is None:
            self._own_dir(Path(tempfile.mkdtemp(prefix="laminar-registry-")))
        if not self.port:
            self.port = free_port(self.host)
        runner = next(app.glob("apicurio-registry-app-*-runner.jar"))
        argv = [
            java,
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # starts in about half the time; the tests are light
            "-Djava.awt.headless=true",
            f"-Dquarkus.http.port={self.port}",
            f"-Dquarkus.http.host={self.host}",
            # The tests' clients use the Confluent API: no authentication, no UI, no telemetry.
            "-Dregistry.auth.enabled=false",
            "-Dquarkus.log.level=WARN",
            '-Dquarkus.log.category."io.apicurio".level=WARN',
            f"-Djava.io.tmpdir={self._dir}",
            "-jar",
            str(runner),
        ]
        process = ServerProcess(argv, log_path=self.log_path, name="Apicurio Registry", cwd=app)
        self._adopt(process)
        self._await(process, self._answers, f"the schema registry on {self.host}:{self.port}")
        return self

    def stop(self, *, timeout: float = 30.0) -> None:
        """Stop the registry (SIGTERM; SIGKILL after ``timeout``); its schemas are lost."""
        self._end_process(timeout)

    def restart(self) -> None:
        """Stop the registry and start it again on the same port (empty)."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the registry and remove its scratch directory."""
        self.stop()
        self._forget_dir()

    # -- admin calls (the Confluent-compatible API) -----------------------------------------

    def set_compatibility(self, subject: str | None, level: str) -> None:
        """Set a subject's compatibility level (``None``: the registry's default), e.g.
        ``"BACKWARD"``; Apicurio's default is ``NONE`` (Confluent's is ``BACKWARD``)."""
        path = f"/config/{subject}" if subject else "/config"
        self._call("PUT", path, {"compatibility": level})

    def subjects(self) -> list[str]:
        """Every subject with a registered schema."""
        answer = self._call("GET", "/subjects")
        return [str(s) for s in answer] if isinstance(answer, list) else []

    def versions(self, subject: str) -> list[int]:
        """The versions registered under ``subject``."""
        answer = self._call("GET", f"/subjects/{subject}/versions")
        return [int(v) for v in answer] if isinstance(answer, list) else []

    def _call(self, method: str, path: str, body: object = None) -> object:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310 - our own http:// URL
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return json.loads(response.read() or b"null")

    def _answers(self) -> bool:
        try:
            self._call("GET", "/subjects")
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return True

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        where = f"{self.host}:{self.port}" if self.port else "no port yet"
        return f"SchemaRegistry({where}, Apicurio Registry {APICURIO_VERSION}, {state})"
