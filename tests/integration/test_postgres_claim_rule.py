"""The claim of an epoch in ``laminar.sink_epochs`` (the SQL of ``laminar.engine.records``)
takes exactly the epochs the core's replay rule (``protocol::records::epoch_committed``) says are
not committed yet: the rule is written once in Rust and once as SQL, and this keeps them equal
(docs/engine.md, "The sink's transaction")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from laminar._core import epoch_committed
from laminar.engine.records import claim_epoch, committed_epoch
from laminar.metadata import ensure_schema

pytestmark = pytest.mark.integration


def test_the_claim_takes_what_the_replay_rule_says_is_not_committed(
    postgres: Any, unique_name: Callable[[str], str]
) -> None:
    dsn = str(postgres.create_database(unique_name("db")))
    with psycopg.connect(dsn) as conn:
        ensure_schema(conn)
        conn.commit()
        for last in (None, 0, 3, 5):
            sink_id = f"claim-rule-{last}"
            if last is not None:
                assert claim_epoch(conn, sink_id, last)
                conn.commit()
            assert committed_epoch(conn, sink_id) == last
            for epoch in range(7):
                claimed = claim_epoch(conn, sink_id, epoch)
                conn.rollback()
                assert claimed == (not epoch_committed(last, epoch)), (last, epoch)
