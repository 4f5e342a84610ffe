"""Shared plumbing for the embedded servers: free ports, child processes, logs, privilege drop."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from laminar._redact import redact_text
from laminar.errors import LaminarError

__all__ = [
    "EmbeddedServerError",
    "ServerProcess",
    "UnprivilegedUser",
    "free_port",
    "port_accepts",
    "unprivileged_user",
    "wait_until",
]

#: Name of the system account that runs servers which refuse to run as root (PostgreSQL).
SERVICE_ACCOUNT = "laminar"


class EmbeddedServerError(LaminarError):
    """An embedded server (PostgreSQL, the broker, Spark Connect) could not start or stop."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free right now (the kernel picks it).

    Another process may still take it before the caller binds it; callers that can retry on
    "address in use" should.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether a TCP connection to ``host:port`` is accepted."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    abort: Callable[[], str | None] | None = None,
) -> None:
    """Poll ``condition`` until it is true; raise `EmbeddedServerError` after ``timeout`` seconds.

    ``abort`` is checked on every round; a non-``None`` string ends the wait at once with that
    reason (e.g. "the process exited with code 1"), so a crashed server fails fast instead of
    running into the timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if abort is not None:
            reason = abort()
            if reason is not None:
                raise EmbeddedServerError(f"{what}: {reason}")
        if time.monotonic() >= deadline:
            raise EmbeddedServerError(f"{what}: not ready after {timeout:.0f} s")
        time.sleep(interval)


@dataclass(frozen=True)
class UnprivilegedUser:
    """The account a server runs as when Laminar itself runs as root."""

    name: str
    uid: int
    gid: int


def unprivileged_user() -> UnprivilegedUser | None:
    """The account to drop to when running as root, creating it on first use; ``None`` otherwise.

    PostgreSQL refuses to run as root. A dedicated system account ``laminar`` is created with
    ``useradd`` when missing (concurrent creation by another process is fine); if that is not
    possible, ``nobody`` is used.
    """
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVICE_ACCOUNT)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        if os.path.exists(useradd):
            subprocess.run(
                [
                    useradd,
                    "--system",
                    "--user-group",
                    "--no-create-home",
                    "--home-dir",
                    "/nonexistent",
                    "--shell",
                    "/usr/sbin/nologin",
                    SERVICE_ACCOUNT,
                ],
                check=False,
                capture_output=True,
            )
        try:
            entry = pwd.getpwnam(SERVICE_ACCOUNT)
        except KeyError:
            entry = pwd.getpwnam("nobody")
    return UnprivilegedUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def chown_tree(path: Path, user: UnprivilegedUser) -> None:
    """Give ``path`` and everything below it to ``user``."""
    os.chown(path, user.uid, user.gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), user.uid, user.gid, follow_symlinks=False)


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file, for error messages ("" if there is none), with
    URL passwords masked (servers such as Tansu log their storage URL)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return redact_text("\n".join(text.splitlines()[-lines:]))


def as_user(argv: Sequence[str], user: UnprivilegedUser | None) -> list[str]:
    """``argv`` run as ``user`` by ``setpriv`` (util-linux), or unchanged when ``user`` is None.

    Dropping privileges inside the exec'd command, rather than with ``Popen(user=...)``, lets
    CPython start the child with vfork: a plain fork() in a process that holds gRPC threads (a Spark
    Connect client, as in the tests and the demo) runs gRPC's fork handlers in the child, which can
    abort it (SIGABRT) before it ever execs.
    """
    if user is None:
        return list(argv)
    return [
        "setpriv",
        f"--reuid={user.uid}",
        f"--regid={user.gid}",
        "--clear-groups",
        "--",
        *argv,
    ]


def run_checked(
    argv: Sequence[str],
    *,
    what: str,
    user: UnprivilegedUser | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> str:
    """Run a short command to completion; raise `EmbeddedServerError` with its output on failure."""
    try:
        proc = subprocess.run(
            as_user(argv, user),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EmbeddedServerError(f"{what} failed: {e}") from e
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise EmbeddedServerError(f"{what} failed with exit code {proc.returncode}:\n{output}")
    return proc.stdout


class ServerProcess:
    """One long-running child process in its own process group, its output going to a log file.

    `kill` takes down every helper the server spawned (PostgreSQL backends, Spark's Python
    workers) together with it, as a machine crash would.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        name: str,
        user: UnprivilegedUser | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._swept = False  # the group got its final SIGKILL; never signal its id again
        self._paused = False
        self.argv = list(argv)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - the child keeps writing to it
        try:
            # the command line may carry a DSN (a Spark setting): its password is masked
            log.write(f"--- {name}: {redact_text(' '.join(self.argv))}\n".encode())
            log.flush()
            self._popen: subprocess.Popen[bytes] = subprocess.Popen(
                as_user(self.argv, user),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                start_new_session=True,  # PostgreSQL refuses root: as_user() drops privileges
            )
        except OSError as e:
            raise EmbeddedServerError(f"could not start {name} ({self.argv[0]}): {e}") from e
        finally:
            log.close()

    @property
    def pid(self) -> int:
        """The process id of the server (the group leader)."""
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has ended, else ``None``."""
        return self._popen.poll()

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self._popen.poll() is None

    def exit_reason(self) -> str | None:
        """``None`` while running; otherwise a sentence with the exit code."""
        code = self._popen.poll()
        if code is None:
            return None
        return f"{self.name} exited with code {code}"

    @property
    def paused(self) -> bool:
        """Whether `pause` stopped the process group (and `resume` has not let it go on)."""
        return self._paused

    def pause(self) -> None:
        """SIGSTOP the whole process group: a hung server — its sockets stay open and the kernel
        still accepts and acknowledges connections, but nothing answers. `resume` (SIGCONT)
        lets it go on where it stood."""
        self.signal_group(signal.SIGSTOP)
        self._paused = self.alive()

    def resume(self) -> None:
        """SIGCONT the process group after `pause` (harmless when it is not stopped)."""
        self.signal_group(signal.SIGCONT)
        self._paused = False

    def signal_group(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the whole process group (ignoring a group that is already gone)."""
        if self._swept:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._popen.pid, sig)

    def terminate(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 20.0) -> int | None:
        """Ask the server to stop with ``sig``; SIGKILL it if it is still running after
        ``timeout`` seconds. Helpers it leaves behind are killed. Returns the exit code."""
        tree = process_tree(self._popen.pid) if self.alive() else {}
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(sig)
            if self._paused:  # a stopped process handles the signal once it goes on
                self.resume()
            try:
                self._popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._sweep(tree)
        return self._popen.returncode

    def kill(self) -> int | None:
        """SIGKILL the server and every process it started, as a crash would.

        Helpers may sit in process groups of their own (Spark's Python daemon makes one for its
        workers), so the whole process tree is frozen with SIGSTOP first — nothing can fork
        away — then killed together with the server's group.
        """
        frozen: dict[int, int] = {}
        for _ in range(20):
            if not self.alive():
                break
            new = {pid: t for pid, t in process_tree(self._popen.pid).items() if pid not in frozen}
            if not new:
                break
            for pid, started in new.items():
                _signal_if_same(pid, started, signal.SIGSTOP)
            frozen.update(new)
        self.signal_group(signal.SIGKILL)
        self._sweep(frozen)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=30)
        return self._popen.returncode

    def _sweep(self, tree: Mapping[int, int]) -> None:
        # Kill what the server left behind: its group, once, right after the leader ended (later
        # the group id may belong to an unrelated process), and the processes of its tree as
        # recorded before (each only if it is still the same process).
        self.signal_group(signal.SIGKILL)
        self._swept = True
        for pid, started in tree.items():
            if pid != self._popen.pid:
                _signal_if_same(pid, started, signal.SIGKILL)


def _process_table() -> dict[int, tuple[int, int]]:
    """pid → (parent pid, start time) of every process, from /proc ({} where there is none)."""
    table: dict[int, tuple[int, int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if entry.isdigit():
            stat = _read_stat(int(entry))
            if stat is not None:
                table[int(entry)] = stat
    return table


def _read_stat(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid ... starttime(22nd field)"; comm may hold spaces and parentheses.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def process_tree(root: int) -> dict[int, int]:
    """``root`` and all its descendants: pid → start time (Linux; ``{}`` elsewhere)."""
    table = _process_table()
    if root not in table:
        return {}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    tree: dict[int, int] = {}
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in table and pid not in tree:
            tree[pid] = table[pid][1]
            stack.extend(children.get(pid, ()))
    return tree


def _signal_if_same(pid: int, started: int, sig: signal.Signals) -> None:
    # The start time tells a recorded process from a new one that reused its pid.
    stat = _read_stat(pid)
    if stat is not None and stat[1] == started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
