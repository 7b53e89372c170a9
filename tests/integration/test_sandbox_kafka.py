"""The local clusters are real Kafka: records with headers and explicit timestamps go in and come back."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from kbackup.core.kafka import open_admin
from kbackup.sandbox import kafka as sandbox_kafka
from kbackup.sandbox.jars import kafka_libs
from kbackup.sandbox.kafka import PORT_TAKEN, LocalKafkaCluster, SandboxError
from kbackup.sandbox.kafka import free_port as real_free_port
from tests.support.kafka_io import Record, consume_all, create_topic, produce


def roundtrip(cluster: LocalKafkaCluster, topic: str) -> None:
    create_topic(cluster, topic, partitions=2)
    sent = [
        Record(
            key=f"key-{i}".encode() if i % 3 else None,
            value=None if i == 7 else f"value-{i}".encode(),
            headers=(("trace", f"t{i}".encode()), ("dup", b"1"), ("dup", None), ("bin", bytes([0, 255, i]))),
            timestamp=1_700_000_000_000 + i * 1000,
            partition=i % 2,
        )
        for i in range(20)
    ]
    produce(cluster, topic, sent)
    got = consume_all(cluster, topic, partitions=[0, 1])
    assert len(got) == 20
    by_partition = {p: [r for r in sent if r.partition == p] for p in (0, 1)}
    for p in (0, 1):
        received = [r for r in got if r.partition == p]
        assert [r.offset for r in received] == list(range(10))
        for want, have in zip(by_partition[p], received, strict=True):
            assert (have.key, have.value, have.headers, have.timestamp) == (
                want.key,
                want.value,
                want.headers,
                want.timestamp,
            )
            assert have.timestamp_type == 1  # CreateTime: the explicit timestamp was kept


def test_produce_and_consume_on_source(source_cluster: LocalKafkaCluster, unique_name: str) -> None:
    roundtrip(source_cluster, unique_name)


def test_produce_and_consume_on_target(target_cluster: LocalKafkaCluster, unique_name: str) -> None:
    roundtrip(target_cluster, unique_name)


def test_clusters_are_independent(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster
) -> None:
    source_info = open_admin(source_cluster.connection()).metadata()
    target_info = open_admin(target_cluster.connection()).metadata()
    assert source_info.cluster_id == source_cluster.cluster_id
    assert target_info.cluster_id == target_cluster.cluster_id
    assert source_info.cluster_id != target_info.cluster_id
    assert source_cluster.port != target_cluster.port


def test_topic_on_one_cluster_is_absent_on_the_other(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str
) -> None:
    create_topic(source_cluster, unique_name)
    topics = (
        AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers}).list_topics(timeout=10).topics
    )
    assert unique_name not in topics


def _holding_free_port(monkeypatch: pytest.MonkeyPatch, held: socket.socket, at_call: int) -> list[int]:
    """Make the sandbox's port choice hand out the port ``held`` listens on at its ``at_call``-th
    call (as if another process took it between choice and bind); the ports handed out, returned."""
    handed: list[int] = []

    def choose() -> int:
        port = held.getsockname()[1] if len(handed) + 1 == at_call else real_free_port()
        handed.append(port)
        return port

    monkeypatch.setattr(sandbox_kafka, "free_port", choose)
    return handed


def test_a_port_taken_between_choice_and_bind_is_chosen_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suite run once lost a cluster start to a port another process bound first: the start
    chooses the lost ports again and launches again, and the cluster works on its new ports."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", real_free_port()))
        held.listen()
        handed = _holding_free_port(monkeypatch, held, at_call=2)  # node 1's controller port
        cluster = LocalKafkaCluster(name="taken", work_dir=tmp_path, libs=kafka_libs())
        try:
            cluster.start(timeout=120)
            assert held.getsockname()[1] in handed
            assert held.getsockname()[1] not in (cluster.port, cluster.controller_port)
            assert PORT_TAKEN in (tmp_path / "stdout.log").read_text() + (tmp_path / "server.log").read_text()
            roundtrip(cluster, "after-a-taken-port")
            cluster.restart(timeout=120)  # bound ports are kept
            assert consume_all(cluster, "after-a-taken-port", partitions=[0, 1])
        finally:
            cluster.stop()


def test_a_taken_port_fails_the_start_once_the_attempts_are_spent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", real_free_port()))
        held.listen()
        _holding_free_port(monkeypatch, held, at_call=1)
        monkeypatch.setattr(sandbox_kafka, "PORT_ATTEMPTS", 1)
        cluster = LocalKafkaCluster(name="taken", work_dir=tmp_path, libs=kafka_libs())
        try:
            with pytest.raises(SandboxError, match=PORT_TAKEN):
                cluster.start(timeout=120)
        finally:
            cluster.stop()
