"""An ephemeral PostgreSQL cluster on a free loopback port, for tests and ``laminar demo``."""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import psycopg
from psycopg import sql

from laminar.embedded._process import (
    EmbeddedServerError,
    ServerProcess,
    UnprivilegedUser,
    chown_tree,
    free_port,
    log_tail,
    run_checked,
    unprivileged_user,
    wait_until,
)
from laminar.embedded._server import EmbeddedServer

__all__ = ["EphemeralPostgres", "find_pg_bindir"]

StopMode = Literal["smart", "fast", "immediate"]

_STOP_SIGNALS: dict[str, signal.Signals] = {
    # PostgreSQL's documented shutdown signals (the same ones pg_ctl sends).
    "smart": signal.SIGTERM,
    "fast": signal.SIGINT,
    "immediate": signal.SIGQUIT,
}


def find_pg_bindir() -> Path:
    """Locate the directory holding ``initdb`` and ``postgres``.

    Order: ``$LAMINAR_PG_BINDIR``, ``pg_config --bindir``, the newest
    ``/usr/lib/postgresql/*/bin`` (Debian/Ubuntu), then ``initdb`` on ``PATH``.
    """
    candidates: list[Path] = []
    env = os.environ.get("LAMINAR_PG_BINDIR")
    if env:
        bindir = Path(env)
        if not _has_server_binaries(bindir):
            raise EmbeddedServerError(
                f"LAMINAR_PG_BINDIR={env} has no initdb/postgres executables; point it at the "
                "PostgreSQL server's bin directory"
            )
        return bindir
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=False
            )
            if out.returncode == 0 and out.stdout.strip():
                candidates.append(Path(out.stdout.strip()))
        except (OSError, subprocess.TimeoutExpired):
            pass
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: [int(x) if x.isdigit() else 0 for x in re.findall(r"\d+", p)],
        reverse=True,
    )
    candidates.extend(Path(p) for p in debian)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    for bindir in candidates:
        if _has_server_binaries(bindir):
            return bindir
    raise EmbeddedServerError(
        "no PostgreSQL server binaries (initdb, postgres) found: install PostgreSQL "
        "(Debian: apt-get install postgresql-15, or run scripts/bootstrap.sh) or set "
        "LAMINAR_PG_BINDIR to its bin directory"
    )


def _has_server_binaries(bindir: Path) -> bool:
    return all(os.access(bindir / name, os.X_OK) for name in ("initdb", "postgres"))


class EphemeralPostgres(EmbeddedServer):
    """A throw-away PostgreSQL cluster: ``initdb`` into a temporary directory, ``postgres`` on a
    free port of 127.0.0.1, removed again by `stop`.

    It is configured for the two-phase-commit tests and the demo (``max_prepared_transactions``
    > 0) and for speed (``fsync`` off unless asked for). Authentication is ``trust`` unless a
    ``password`` is given, in which case TCP connections need it (SCRAM).

    When the process runs as root, the cluster runs as an unprivileged account (``laminar``,
    created on first use), because PostgreSQL refuses to run as root.

    Use as a context manager, or call `start` and `stop`::

        with EphemeralPostgres() as pg:
            psycopg.connect(pg.dsn)
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        database: str = "laminar",
        user: str = "postgres",
        password: str | None = None,
        fsync: bool = False,
        max_prepared_transactions: int = 64,
        max_connections: int = 100,
        settings: Mapping[str, str] | None = None,
        bindir: str | os.PathLike[str] | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        """Configure the cluster; nothing runs until `start`.

        ``settings`` are extra ``postgresql.conf`` parameters (``-c name=value``). ``base_dir``
        is where the temporary directory is made (default: the system temp dir; it must be
        reachable by the unprivileged account when running as root). ``log_path`` keeps the
        server log outside the temporary directory, so it survives `stop`.
        """
        self._requested_port = port
        self.port = port or 0
        self.host = "127.0.0.1"
        self.database = database
        self.user = user
        self._password = password
        self._fsync = fsync
        self._settings: dict[str, str] = {
            "listen_addresses": self.host,
            "max_prepared_transactions": str(max_prepared_transactions),
            "max_connections": str(max_connections),
            "fsync": "on" if fsync else "off",
            "full_page_writes": "on" if fsync else "off",
            "shared_buffers": "64MB",
            "log_min_messages": "warning",
            "log_line_prefix": "%m [%p] ",
        }
        self._settings.update(settings or {})
        self._bindir = Path(bindir) if bindir is not None else None
        self._base_dir = Path(base_dir) if base_dir is not None else None
        self._log_path_arg = Path(log_path) if log_path is not None else None
        self.startup_timeout = startup_timeout
        self._root: Path | None = None
        self._os_user: UnprivilegedUser | None = None
        self._process: ServerProcess | None = None
        self._finalizer: weakref.finalize[..., Any] | None = None

    # -- public surface ---------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """A libpq connection URI for the default database (includes the password, if any)."""
        return self.dsn_for(self.database)

    def dsn_for(self, database: str) -> str:
        """A libpq connection URI for another database on this cluster."""
        self._require_started()
        auth = quote(self.user, safe="")
        if self._password is not None:
            auth += ":" + quote(self._password, safe="")
        return f"postgresql://{auth}@{self.host}:{self.port}/{quote(database, safe='')}"

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory (``PGDATA``)."""
        return self._require_started() / "data"

    @property
    def socket_dir(self) -> Path:
        """The directory holding the server's Unix-domain socket."""
        return self._require_started()

    @property
    def log_path(self) -> Path:
        """The server log (stdout and stderr of ``postgres``)."""
        if self._log_path_arg is not None:
            return self._log_path_arg
        return self._require_started() / "postgres.log"

    def start(self) -> EphemeralPostgres:
        """Create the cluster (first call only) and start the server; return ``self``.

        A cluster that was stopped with `stop` (keep_data=True), `kill` or `restart` is started
        again on the same port with its data.
        """
        if self.is_running():
            return self
        if self._root is None:
            self._create_cluster()
            first_start = True
        else:
            first_start = False
        attempts = 1 if self._requested_port or not first_start else 3
        for attempt in range(attempts):
            if not self.port:
                self.port = free_port(self.host)
            try:
                self._launch()
                break
            except EmbeddedServerError:
                port_taken = "could not bind" in log_tail(self.log_path, 15)
                if attempt + 1 < attempts and port_taken:
                    self.port = 0  # another process took the port meanwhile; pick another
                    continue
                raise
        if first_start:
            self._create_database()
        return self

    def stop(self, mode: StopMode = "fast", *, keep_data: bool = False) -> None:
        """Shut the server down (``fast`` rolls back open sessions; ``immediate`` is a crash that
        needs recovery on the next start) and, unless ``keep_data``, remove the cluster."""
        if self._process is not None:
            self._process.terminate(_STOP_SIGNALS[mode], timeout=30)
            self._process = None
        if not keep_data:
            self._cleanup()

    def kill(self) -> None:
        """SIGKILL the postmaster and all its backends, keeping the data (a machine crash)."""
        if self._process is not None:
            self._process.kill()
            self._process = None
        _remove_stale_pid(self._root)

    def restart(self, mode: StopMode = "fast") -> None:
        """Stop the server (``mode`` as for `stop`) and start it again with the same data and port.

        Open connections are cut; prepared transactions survive.
        """
        self.stop(mode, keep_data=True)
        self.start()

    def create_database(self, name: str) -> str:
        """Create another database on the cluster and return its DSN."""

        with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.dsn_for(name)

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"EphemeralPostgres({self.host}:{self.port}, database={self.database!r}, {state})"

    # -- internals ---------------------------------------------------------------------------

    def _require_started(self) -> Path:
        if self._root is None:
            raise EmbeddedServerError("the ephemeral PostgreSQL cluster has not been started")
        return self._root

    def _create_cluster(self) -> None:
        bindir = self._bindir or find_pg_bindir()
        self._bindir = bindir
        self._os_user = unprivileged_user()
        root = Path(tempfile.mkdtemp(prefix="laminar-pg-", dir=self._base_dir))
        self._root = root
        self._finalizer = weakref.finalize(self, _finalize, None, root)
        argv = [
            str(bindir / "initdb"),
            "--pgdata",
            str(root / "data"),
            "--username",
            self.user,
            "--encoding",
            "UTF8",
            "--no-locale",
            "--no-sync",
            "--auth-local",
            "trust",
        ]
        if self._password is not None:
            pwfile = root / "pwfile"
            pwfile.write_text(self._password + "\n")
            pwfile.chmod(0o600)
            argv += ["--pwfile", str(pwfile), "--auth-host", "scram-sha-256"]
        else:
            argv += ["--auth-host", "trust"]
        if self._os_user is not None:
            chown_tree(root, self._os_user)
        try:
            run_checked(
                argv, what="initdb", user=self._os_user, cwd=root, env=self._child_env(root)
            )
        except EmbeddedServerError:
            self._cleanup()
            raise
        finally:
            (root / "pwfile").unlink(missing_ok=True)

    def _child_env(self, root: Path) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(root),
            "LC_ALL": "C",
            "LANG": "C",
            "TZ": "UTC",
        }
        return env

    def _launch(self) -> None:
        root = self._require_started()
        assert self._bindir is not None
        argv = [str(self._bindir / "postgres"), "-D", str(root / "data"), "-p", str(self.port)]
        argv += ["-c", f"unix_socket_directories={root}"]
        for name, value in self._settings.items():
            argv += ["-c", f"{name}={value}"]
        process = ServerProcess(
            argv,
            log_path=self.log_path,
            name="postgres",
            user=self._os_user,
            cwd=root,
            env=self._child_env(root),
        )
        self._process = process
        if self._finalizer is not None:
            self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _finalize, process, root)
        try:
            wait_until(
                self._accepts_connections,
                timeout=self.startup_timeout,
                what=f"PostgreSQL on {self.host}:{self.port}",
                interval=0.05,
                abort=process.exit_reason,
            )
        except EmbeddedServerError as e:
            process.terminate(signal.SIGQUIT, timeout=5)
            self._process = None
            raise EmbeddedServerError(
                f"{e.message}\nlog {self.log_path}:\n{log_tail(self.log_path)}"
            ) from None

    def _accepts_connections(self) -> bool:
        try:
            with psycopg.connect(self.dsn_for("postgres"), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def _create_database(self) -> None:
        if self.database in ("postgres", "template0", "template1"):
            return
        self.create_database(self.database)

    def _cleanup(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._root = None
        self.port = self._requested_port or 0


def _remove_stale_pid(root: Path | None) -> None:
    # After SIGKILL the postmaster.pid stays behind; PostgreSQL copes with it, but a stale file
    # whose pid now belongs to another process would block the start.
    if root is not None:
        (root / "data" / "postmaster.pid").unlink(missing_ok=True)


def _finalize(process: ServerProcess | None, root: Path) -> None:
    # Runs on stop() and, as a safety net, at interpreter exit or garbage collection.
    if process is not None:
        process.terminate(signal.SIGINT, timeout=30)
    shutil.rmtree(root, ignore_errors=True)
