"""Pure parts of laminar.embedded.kafka and the Spark connector look-up: no server is started."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from laminar.embedded import EmbeddedServerError, KafkaBroker, find_kafka_libs
from laminar.embedded.kafka import (
    KAFKA_VERSION,
    SINGLE_NODE_SETTINGS,
    laminar_cache_dir,
    new_cluster_id,
)
from laminar.embedded.spark import (
    SPARK_KAFKA_VERSION,
    SparkConnectServer,
    find_spark_home,
    find_spark_kafka_jars,
)

ROOT = Path(__file__).resolve().parents[2]


def pom_property(pom: str, name: str) -> str:
    match = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", (ROOT / pom).read_text())
    assert match is not None, f"no <{name}> in {pom}"
    return match.group(1)


def test_versions_match_the_poms_bootstrap_resolves() -> None:
    assert pom_property("scripts/kafka/broker/pom.xml", "kafka.version") == KAFKA_VERSION
    assert pom_property("scripts/kafka/spark/pom.xml", "spark.kafka.version") == SPARK_KAFKA_VERSION


def test_cache_dir_follows_laminar_cache_then_xdg(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMINAR_CACHE", str(tmp_path / "c"))
    assert laminar_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("LAMINAR_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert laminar_cache_dir() == tmp_path / "xdg" / "laminar"


def test_missing_jars_name_bootstrap_and_the_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAMINAR_CACHE", str(tmp_path))
    monkeypatch.delenv("LAMINAR_KAFKA_LIBS", raising=False)
    monkeypatch.delenv("LAMINAR_SPARK_KAFKA_JARS", raising=False)
    with pytest.raises(EmbeddedServerError, match=r"scripts/bootstrap\.sh.*LAMINAR_KAFKA_LIBS"):
        find_kafka_libs()
    with pytest.raises(EmbeddedServerError, match=r"missing spark-sql-kafka-0-10_2\.13.*bootstrap"):
        find_spark_kafka_jars()
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").touch()
    monkeypatch.setenv("LAMINAR_KAFKA_LIBS", str(libs))
    assert find_kafka_libs() == libs


def test_the_spark_server_adds_the_connector_jars_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    names = [
        "spark-sql-kafka-0-10_2.13-4.2.0.jar",
        "spark-token-provider-kafka-0-10_2.13-4.2.0.jar",
        "kafka-clients-3.9.2.jar",
        "commons-pool2-2.13.1.jar",
    ]
    for name in names:
        (jars / name).touch()
    monkeypatch.setenv("LAMINAR_SPARK_KAFKA_JARS", str(jars))
    try:
        home = find_spark_home()
    except EmbeddedServerError as e:
        pytest.skip(str(e))

    def jars_of(server: SparkConnectServer) -> list[str]:
        argv = server._argv(home, tmp_path)
        return argv[argv.index("--jars") + 1].split(",") if "--jars" in argv else []

    assert jars_of(SparkConnectServer()) == []
    with_connector = jars_of(SparkConnectServer(jars=["/x/postgresql.jar"], kafka_connector=True))
    assert with_connector[0] == "/x/postgresql.jar"
    assert sorted(Path(j).name for j in with_connector[1:]) == sorted(names)


def test_settings_are_a_single_transactional_node_on_loopback() -> None:
    broker = KafkaBroker(port=9092, controller_port=9093, config={"num.io.threads": "2"})
    settings = broker.settings()
    assert settings["process.roles"] == "broker,controller"
    assert settings["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert settings["controller.quorum.voters"] == "1@127.0.0.1:9093"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor"):
        assert settings[key] == "1"
    assert settings["transaction.state.log.min.isr"] == "1"
    assert settings["group.initial.rebalance.delay.ms"] == "0"
    assert settings["num.io.threads"] == "2"  # the caller's settings win
    assert SINGLE_NODE_SETTINGS["num.io.threads"] != "2"
    assert broker.durable
    with pytest.raises(EmbeddedServerError, match="has not been started"):
        _ = KafkaBroker().bootstrap_servers
    assert "stopped" in repr(broker)


def test_cluster_ids_are_kafka_uuids() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", cluster_id)
