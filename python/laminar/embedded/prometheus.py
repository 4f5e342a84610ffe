"""A real Prometheus server on a free loopback port, with its own data directory, scraping the
targets it is given and evaluating rule files at short intervals: the alert rules' integration
test (docs/operations.md, "Metrics and alerts") and ``laminar demo --keep`` users' own.

Prometheus is not shipped with Laminar: ``scripts/bootstrap.sh`` installs Debian's
``prometheus`` package (``/usr/bin/prometheus`` and ``promtool``; its service is not used), or
``$LAMINAR_PROMETHEUS_BIN`` names another ``prometheus`` binary (``promtool`` is looked up
beside it). Nothing is downloaded here.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from laminar.embedded._process import (
    EmbeddedServerError,
    ServerProcess,
    free_port,
)
from laminar.embedded._server import EmbeddedServer

__all__ = ["PrometheusServer", "find_prometheus", "find_promtool"]


def find_prometheus() -> Path:
    """The ``prometheus`` binary: ``$LAMINAR_PROMETHEUS_BIN``, else the one on ``PATH``."""
    env = os.environ.get("LAMINAR_PROMETHEUS_BIN")
    found = env or shutil.which("prometheus")
    if not found or not os.access(found, os.X_OK):
        where = f"$LAMINAR_PROMETHEUS_BIN ({env})" if env else "PATH"
        raise EmbeddedServerError(
            f"no prometheus binary on {where}: run scripts/bootstrap.sh (it installs Debian's "
            "prometheus package), or set LAMINAR_PROMETHEUS_BIN"
        )
    return Path(found)


def find_promtool() -> Path:
    """``promtool``: beside `find_prometheus`'s binary, else on ``PATH``."""
    beside = find_prometheus().with_name("promtool")
    found = str(beside) if beside.exists() else shutil.which("promtool")
    if not found:
        raise EmbeddedServerError(
            "no promtool beside prometheus nor on PATH: run scripts/bootstrap.sh (Debian's "
            "prometheus package ships it)"
        )
    return Path(found)


class PrometheusServer(EmbeddedServer):
    """Prometheus on 127.0.0.1 scraping ``targets`` (``host:port`` of ``/metrics`` endpoints,
    job ``job``) every ``scrape_interval_s`` and evaluating ``rule_files`` every
    ``evaluation_interval_s``::

        with PrometheusServer(targets=["127.0.0.1:9464"], rule_files=[rules]) as prometheus:
            firing = [a for a in prometheus.alerts() if a["state"] == "firing"]

    Its data directory is a scratch directory of its own: `stop` keeps it (a `start` after it
    resumes), `close` removes it.
    """

    _NAME = "Prometheus"
    _LOG_NAME = "prometheus.log"

    def __init__(
        self,
        *,
        targets: Sequence[str] = (),
        rule_files: Sequence[str | os.PathLike[str]] = (),
        job: str = "laminar",
        scrape_interval_s: float = 1.0,
        evaluation_interval_s: float = 1.0,
        port: int | None = None,
        binary: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        """Configure the server; nothing runs until `start`."""
        self.host = "127.0.0.1"
        self.port = port or 0
        self.targets = list(targets)
        self.rule_files = [Path(f).resolve() for f in rule_files]
        self.job = job
        self.scrape_interval_s = scrape_interval_s
        self.evaluation_interval_s = evaluation_interval_s
        self._binary = Path(binary) if binary is not None else None
        self._log_path_arg = Path(log_path) if log_path is not None else None
        self.startup_timeout = startup_timeout
        self._dir: Path | None = None
        self._process: ServerProcess | None = None

    @property
    def url(self) -> str:
        """The server's root (``http://127.0.0.1:<port>``)."""
        if not self.port:
            raise EmbeddedServerError("Prometheus has not been started")
        return f"http://{self.host}:{self.port}"

    def _config(self) -> str:
        # JSON is YAML: no YAML writer needed
        return json.dumps(
            {
                "global": {
                    "scrape_interval": _duration(self.scrape_interval_s),
                    "scrape_timeout": _duration(self.scrape_interval_s),
                    "evaluation_interval": _duration(self.evaluation_interval_s),
                },
                "rule_files": [str(f) for f in self.rule_files],
                "scrape_configs": [
                    {"job_name": self.job, "static_configs": [{"targets": self.targets}]}
                ],
            },
            indent=2,
        )

    def start(self) -> PrometheusServer:
        """Start Prometheus (again, on the same port and data, after `stop`/`kill`) and wait
        until it is ready; return ``self``."""
        if self.is_running():
            return self
        binary = self._binary or find_prometheus()
        self._binary = binary
        if self._dir is None:
            self._own_dir(Path(tempfile.mkdtemp(prefix="laminar-prometheus-")))
        directory = self._started_dir()
        if not self.port:
            self.port = free_port(self.host)
        config = directory / "prometheus.yml"
        config.write_text(self._config())
        argv = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address={self.host}:{self.port}",
            "--log.level=warn",
        ]
        process = ServerProcess(argv, log_path=self.log_path, name="Prometheus", cwd=directory)
        self._adopt(process)
        self._await(process, self._ready, f"Prometheus on {self.host}:{self.port}")
        return self

    def stop(self, *, timeout: float = 30.0) -> None:
        """Stop Prometheus (SIGTERM; SIGKILL after ``timeout``); its data directory stays."""
        self._end_process(timeout)

    def restart(self) -> None:
        """Stop Prometheus and start it again on the same port and data."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop Prometheus and remove its data directory."""
        self.stop()
        self._forget_dir()

    # -- the HTTP API ---------------------------------------------------------------------------

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>`` with ``params``; the answer's ``data``."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"{self.url}/api/v1/{path}{query}"
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own http://
            answer = json.loads(response.read())
        if answer.get("status") != "success":
            raise EmbeddedServerError(f"Prometheus {path}: {answer}")
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector (``[{"metric": {...}, "value": [t, "v"]}, ...]``)."""
        data = self.api("query", query=expr)
        return list(data.get("result") or [])

    def alerts(self) -> list[dict[str, Any]]:
        """Every active alert (``pending`` or ``firing``) with its labels and state."""
        return list(self.api("alerts").get("alerts") or [])

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:  # noqa: S310
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        where = f"{self.host}:{self.port}" if self.port else "no port yet"
        return f"PrometheusServer({where}, {len(self.targets)} target(s), {state})"


def _duration(seconds: float) -> str:
    """A Prometheus duration (``1s``, ``500ms``)."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"
