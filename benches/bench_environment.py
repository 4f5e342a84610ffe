"""Baselines of the test environment itself: what one round trip to each embedded server costs.

The sinks' own benchmarks (bench_core.py and later) are read against these: a Kafka-only sink
cannot commit an epoch faster than one broker transaction, nor a Postgres sink faster than one
database round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer

from laminar.embedded import TansuBroker
from tests.fixtures import ExternalBroker


@pytest.fixture
def pg_connection(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


def bench_postgres_round_trip(benchmark: Any, pg_connection: psycopg.Connection[Any]) -> None:
    result = benchmark(lambda: pg_connection.execute("SELECT 1").fetchone())
    assert result == (1,)


def bench_kafka_one_record_transaction(
    benchmark: Any,
    kafka_broker: TansuBroker | ExternalBroker,
    topic_name: str,
    unique_name: Callable[[str], str],
) -> None:
    kafka_broker.create_topic(topic_name, partitions=1)
    producer = Producer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "transactional.id": unique_name("bench"),
            "linger.ms": 0,
        }
    )
    producer.init_transactions(15)

    def one_transaction() -> int:
        producer.begin_transaction()
        producer.produce(topic_name, value=b"x", partition=0)
        producer.commit_transaction(15)
        return 1

    assert benchmark(one_transaction) == 1
