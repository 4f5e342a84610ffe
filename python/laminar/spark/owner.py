"""The streaming query a writer belongs to (its ``owner``): ``spark:<query id>``, read from the
query's checkpoint, so that the checkpoint-reset guard (docs/protocol.md §5) knows a new query."""

from __future__ import annotations

import json
from typing import Any

from laminar.errors import ConfigError

__all__ = ["OWNER_PREFIX", "query_owner"]

#: Prefix of the owner string that identifies a streaming query (``spark:<query id>``).
OWNER_PREFIX = "spark:"


def query_owner(session: Any, checkpoint_location: str) -> str:
    """``spark:<query id>``: the id Spark keeps in ``<checkpoint_location>/metadata`` (the same
    across restarts from that checkpoint, new for a new checkpoint), read through ``session``
    so that any Hadoop file system works."""
    path = checkpoint_location.rstrip("/") + "/metadata"
    try:
        rows = session.read.text(path).collect()
    except Exception as e:
        raise ConfigError(
            f"could not read the streaming query's id from {path} ({_first_line(e)}); is "
            "checkpoint_location the query's checkpointLocation option?"
        ) from e
    text = "".join(str(row[0]) for row in rows)
    try:
        query_id = json.loads(text)["id"]
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(
            f"{path} does not hold a streaming query id ({text[:200]!r}); is "
            "checkpoint_location the query's checkpointLocation option?"
        ) from e
    return f"{OWNER_PREFIX}{query_id}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
