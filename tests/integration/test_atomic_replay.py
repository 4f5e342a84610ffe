"""Replayed epochs in an atomic group (real PostgreSQL, real broker).

A replayed epoch (``epoch <= last committed``) is skipped, not written twice. When the writer
knows its query (``owner=``, as ``laminar.spark`` sets it), an epoch *older* than the last
committed one is refused instead: Spark only replays its last batch, so it can only come from a
reset or foreign checkpoint (docs/protocol.md §5).
"""

from __future__ import annotations

from typing import Any

import pytest

import laminar
from tests.integration.atomic_helpers import (
    assert_exactly_once,
    create_table,
    epoch_table,
    make_group,
)


def _group_with_three_epochs(
    kafka_broker: Any, kafka_bootstrap: str, pg_dsn: str, unique_name: Any, **kw: Any
) -> tuple[laminar.ExactlyOnceWriter, str, str]:
    topic, table = unique_name("topic"), unique_name("tbl")
    kafka_broker.create_topic(topic, partitions=1)
    create_table(pg_dsn, table)
    writer = make_group(kafka_bootstrap, topic, pg_dsn, table, f"tid-{topic}", **kw)
    for epoch in range(3):
        assert writer.write_epoch(epoch, epoch_table(epoch)).committed
    return writer, topic, table


def test_replays_of_any_committed_epoch_are_skipped_without_an_owner(
    kafka_broker: Any, kafka_bootstrap: str, pg_dsn: str, unique_name: Any
) -> None:
    writer, topic, table = _group_with_three_epochs(
        kafka_broker, kafka_bootstrap, pg_dsn, unique_name
    )
    for epoch in (2, 0, 1):
        assert writer.write_epoch(epoch, epoch_table(epoch)).skipped
    assert writer.write_epoch(3, epoch_table(3)).committed
    writer.close()
    assert_exactly_once(kafka_bootstrap, topic, pg_dsn, table, 4)


def test_with_an_owner_only_the_last_epoch_replays_and_older_ones_are_refused(
    kafka_broker: Any, kafka_bootstrap: str, pg_dsn: str, unique_name: Any
) -> None:
    writer, topic, table = _group_with_three_epochs(
        kafka_broker, kafka_bootstrap, pg_dsn, unique_name, owner="query-1"
    )
    assert writer.write_epoch(2, epoch_table(2)).skipped  # Spark's legitimate replay
    with pytest.raises(laminar.ConfigError, match=r"epoch 0 is older than epoch 2"):
        writer.write_epoch(0, epoch_table(0))
    assert writer.write_epoch(3, epoch_table(3)).committed
    writer.close()
    assert_exactly_once(kafka_bootstrap, topic, pg_dsn, table, 4)
