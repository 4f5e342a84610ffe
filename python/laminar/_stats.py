"""The atomic groups' commit statistics in ``laminar.commit_stats`` (docs/formats.md §3, version
4): the writer counts each epoch's outcome after it, ``laminar exporter`` reads them as counters
and a latency histogram (docs/operations.md, "Metrics and alerts").

Counting is best effort and never fails a write (a role without the grant is warned about
once): it runs after the epoch's outcome is settled (a committed epoch: after step 8; an aborted
one: after its roll-back), as one statement in its own transaction on the group's decision
connection. A process killed between the two loses that
one count; an epoch completed later by recovery (``laminar recover``, the next start) is not
counted as a commit. The counters are for rates and alerts, not for exactly-once proofs — those
read the stores.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

__all__ = ["BUCKETS_S", "bucket_counts", "count"]

log = logging.getLogger("laminar.stats")

#: Upper bounds (seconds) of the commit latency histogram's buckets; ``latency_buckets[i]``
#: counts the commits with ``BUCKETS_S[i-1] < latency <= BUCKETS_S[i]``, the last element those
#: above every bound. Fixed by the format (docs/formats.md §3): a change is a new migration.
BUCKETS_S: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


def bucket_counts(latency_s: float) -> list[int]:
    """One commit of ``latency_s`` as the histogram's per-bucket counts to add."""
    counts = [0] * (len(BUCKETS_S) + 1)
    counts[bisect.bisect_left(BUCKETS_S, latency_s)] = 1
    return counts


def count(
    conn: psycopg.Connection[Any] | None,
    group_id: str,
    *,
    committed_s: float | None = None,
    aborted: int = 0,
) -> None:
    """Add an epoch's outcome to the group's row: a commit that took ``committed_s`` seconds
    (steps 1-8), and/or ``aborted`` attempts rolled back. Runs and commits on ``conn`` when it
    has no transaction open (otherwise nothing is counted); any error is logged at DEBUG and
    swallowed (module docstring)."""
    if conn is None or (committed_s is None and aborted <= 0):
        return
    # in-function: this module is imported by the data source's light driver-side entry points
    # (laminar.spark.source); the statements live with every other one (records.py)
    import psycopg

    from laminar.engine import records as _records  # (see above)

    try:
        if conn.closed or conn.broken:
            return
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return
        _records.count_outcome(
            conn,
            group_id,
            commits=0 if committed_s is None else 1,
            aborts=max(0, aborted),
            latency_s=0.0 if committed_s is None else committed_s,
            buckets=bucket_counts(committed_s) if committed_s is not None else [],
        )
        conn.commit()
    except psycopg.Error as e:
        if e.sqlstate == "42501" and group_id not in _UNPRIVILEGED:
            # the one grant a writer can lack and still write: say it once (docs/operations.md)
            _UNPRIVILEGED.add(group_id)
            log.warning(
                "laminar.commit_stats: the writer's role may not count group %r's commits (%s): "
                "laminar exporter's commit metrics stay empty; GRANT SELECT, INSERT, UPDATE ON "
                'laminar.commit_stats TO the role (docs/operations.md, "Least privilege")',
                group_id,
                e.diag.message_primary or e,
            )
        else:
            log.debug("laminar.commit_stats: not counted for group %r: %s", group_id, e)
        with contextlib.suppress(psycopg.Error):
            conn.rollback()


#: Groups whose writer was refused ``laminar.commit_stats`` (warned once per process).
_UNPRIVILEGED: set[str] = set()
