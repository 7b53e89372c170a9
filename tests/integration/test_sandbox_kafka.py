"""The local clusters are real Kafka: records with headers and explicit timestamps go in and come back."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from kbackup.core.kafka import open_admin
from kbackup.sandbox.kafka import LocalKafkaCluster
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
