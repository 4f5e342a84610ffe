"""What a ``format("laminar")`` query run's start-up left, kept for the run's later commits
(docs/protocol.md §4, "A run's start-up, once"; docs/spark.md, "Per batch and per run").

Spark calls the data source's ``commit`` in a driver-side Python process that may be a fresh
one for every micro-batch, so what the first ``commit`` of a run learnt — the group's generation
after its start-up fenced older coordinators, and the epoch base the owner guard kept — is kept
on the driver's local disk, one small JSON file per group, keyed by the query (its owner,
``spark:<query id>``) and the run (Spark's run id, the batch's job group, which the tasks send in
their commit messages). A later ``commit`` of the same run resumes from it, and the core checks it
against the group's rows before anything is decided (``AtomicGroupMachine.commit_collected``
with ``resume``): the memo only saves work, it never decides.

- `remember` after a ``commit`` that returned; `forget` on ``abort`` and on a ``commit`` that
  failed (Spark then fails the query: its next run has a new run id and starts up anyway).
- A file that is missing, unreadable or of another version, query or run is no memo: the commit
  starts up, as it did for every batch before.
- Nothing secret is written (a group id, an owner, a run id, two numbers). The directory is
  ``$LAMINAR_RUN_MEMO_DIR``, else ``<temp dir>/laminar-<uid>/runs``, created with mode 0700.
- The directory stays small on a driver that runs queries for months: a run's ``commit``
  rewrites its group's file, so a file untouched for `STALE_S` belongs to a run that ended (or
  commits less often than that, and then only starts up again); `remember` deletes such files
  whenever it creates a group's file — only files named as it names them (``<32 hex>.json``, and
  the ``.memo-…`` scratch files of a killed writer), never another file of the directory.
- The default directory is in the shared temp directory, so it is used only if it and its
  parent are real directories (not links) owned by this user and writable by nobody else;
  otherwise there is no memo (logged once), and every commit starts up as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import stat
import tempfile
import time
from pathlib import Path

from laminar import __version__

__all__ = ["ENV", "forget", "recall", "remember"]

#: The environment variable naming the memo directory (default: under the temp directory).
ENV = "LAMINAR_RUN_MEMO_DIR"

#: A memo file not rewritten for this long is dropped when another group's file is created.
STALE_S = 24 * 3600.0

log = logging.getLogger("laminar.spark.source")


#: The names `remember` gives files: a group's memo, and a writer's scratch file (`mkstemp`).
_OURS = re.compile(r"[0-9a-f]{32}\.json|\.memo-[A-Za-z0-9_]+")


def _directory() -> Path:
    chosen = os.environ.get(ENV)
    if chosen:
        return Path(chosen)
    return Path(tempfile.gettempdir()) / f"laminar-{os.getuid()}" / "runs"


def _path(group_id: str) -> Path:
    name = hashlib.sha256(group_id.encode()).hexdigest()[:32]
    return _directory() / f"{name}.json"


def _private(directory: Path) -> bool:
    """Whether the default ``directory`` and its parent are this user's alone: real directories
    (a link planted in the shared temp directory is refused), owned by this user, writable by
    nobody else. A directory the user chose (`ENV`) is theirs to choose."""
    if os.environ.get(ENV):
        return True
    for path in (directory.parent, directory):
        try:
            info = os.lstat(path)
        except OSError:
            return False
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            log.warning(
                "%s is not a private directory of this user (a link, another owner, or writable "
                "by others): the runs' starts are not kept there; set %s to a directory of yours",
                path,
                ENV,
            )
            return False
    return True


def recall(group_id: str, owner: str, run: str) -> tuple[int, int] | None:
    """``(generation, epoch_base)`` the run ``run`` of ``owner`` started ``group_id`` with, or
    None (no memo of that query and run)."""
    path = _path(group_id)
    if not _private(path.parent):
        return None
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
        memo = (int(found["generation"]), int(found["epoch_base"]))
        same = (found["version"], found["group"], found["owner"], found["run"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if same != (__version__, group_id, owner, run):
        return None
    return memo


def remember(group_id: str, owner: str, run: str, generation: int, epoch_base: int) -> None:
    """Keep the start of ``owner``'s run ``run`` for its next ``commit`` (replacing whatever the
    group's file held); a file that cannot be written is no memo (logged)."""
    path = _path(group_id)
    memo = {
        "version": __version__,
        "group": group_id,
        "owner": owner,
        "run": run,
        "generation": generation,
        "epoch_base": epoch_base,
    }
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(path.parent):
            return
        if not path.exists():
            _drop_stale(path.parent)
        fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=".memo-")
    except OSError as e:
        log.info("%s: the run's start is not kept (%s); each commit starts up", group_id, e)
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(memo, f)
        os.replace(scratch, path)  # whole or not at all: a reader never sees half a file
    except OSError as e:
        log.info("%s: the run's start is not kept (%s); each commit starts up", group_id, e)
        with contextlib.suppress(OSError):
            os.unlink(scratch)


def _drop_stale(directory: Path) -> None:
    """Delete the memo files (and scratch files a killed writer left) not written to for
    `STALE_S`: their runs ended."""
    cutoff = time.time() - STALE_S
    try:
        entries = list(directory.iterdir())
    except OSError as e:  # a side job: the memo is written all the same
        log.info("%s: old memos not dropped (%s)", directory, e)
        return
    for entry in entries:
        if not _OURS.fullmatch(entry.name):
            continue  # not ours
        with contextlib.suppress(OSError):  # another driver may have dropped it first
            if entry.lstat().st_mtime < cutoff:
                entry.unlink()


def forget(group_id: str) -> None:
    """Drop the group's memo (an ``abort``, a failed ``commit``): the next commit starts up."""
    try:
        _path(group_id).unlink(missing_ok=True)
    except OSError as e:
        log.warning("%s: could not drop the run's memo (%s)", group_id, e)
