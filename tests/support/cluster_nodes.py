"""Helpers for tests on clusters of several nodes: replicated topics, the quorum as Kafka's own
tool describes it, and writes with acks=all that report Kafka's answer instead of retrying it."""

from __future__ import annotations

import json
import subprocess

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from kbackup.core.errors import KBackupError
from kbackup.sandbox.jars import classpath
from kbackup.sandbox.kafka import GROUP_OFFSETS_TOPIC, LocalKafkaCluster, coordinator_partition
from tests.support.cli_process import wait_for


def create_replicated_topic(
    cluster: LocalKafkaCluster, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    """A topic with the cluster's default replication factor (and ``configs``), once every broker
    describes it."""
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for future in client.create_topics([NewTopic(name, partitions, config=configs or {})]).values():
        future.result(30)
    wait_described(cluster, name, partitions)


def wait_described(cluster: LocalKafkaCluster, topic: str, partitions: int) -> None:
    """Until the cluster describes ``topic`` with ``partitions`` partitions."""

    def described() -> bool:
        try:
            return len(cluster.partitions_of(topic)) == partitions
        except KBackupError:  # UNKNOWN_TOPIC_OR_PART until the metadata spreads
            return False

    wait_for(described, f"topic {topic} to be described", timeout=30)


def offsets_topic_leaders(cluster: LocalKafkaCluster) -> dict[int, int | None]:
    """The leader of each partition of ``__consumer_offsets``, which the first FindCoordinator
    creates (one partition per node)."""
    cluster.group_coordinator("make-the-offsets-topic")
    wait_described(cluster, GROUP_OFFSETS_TOPIC, cluster.nodes)
    return {
        partition: replicas.leader
        for partition, replicas in cluster.partitions_of(GROUP_OFFSETS_TOPIC).items()
    }


def quorum_status(cluster: LocalKafkaCluster) -> tuple[list[int], int]:
    """The voters and the leader (the active controller) of the metadata quorum as Kafka's
    ``kafka-metadata-quorum describe --status`` prints them (a JVM of Kafka's own tools,
    independent of the sandbox's finders)."""
    command = [
        "java",
        "-cp",
        classpath(cluster.libs),
        "org.apache.kafka.tools.MetadataQuorumCommand",
        "--bootstrap-server",
        cluster.bootstrap_servers,
        "describe",
        "--status",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    fields = dict(line.partition(":")[::2] for line in result.stdout.splitlines())
    voters = sorted(voter["id"] for voter in json.loads(fields["CurrentVoters"]))
    return voters, int(fields["LeaderId"])


def produce_one(cluster: LocalKafkaCluster, topic: str, value: bytes) -> KafkaError | None:
    """One record with acks=all and no retry: None when written, else what the leader answered
    (NOT_ENOUGH_REPLICAS when fewer than min.insync.replicas are in sync)."""
    outcome: list[KafkaError | None] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": False,
            "retries": 0,
            "message.timeout.ms": 15000,
        }
    )
    producer.produce(topic, value=value, on_delivery=lambda error, _message: outcome.append(error))
    producer.flush(30)
    assert outcome, f"no delivery report for the record to {topic}"
    return outcome[0]


def named_led_by(cluster: LocalKafkaCluster, prefix: str, internal_topic: str, node: int) -> str:
    """A group or transactional id whose coordinator partition ``node`` leads (Kafka's hash)."""
    leaders = {p: replicas.leader for p, replicas in cluster.partitions_of(internal_topic).items()}
    return next(
        f"{prefix}-{i}"
        for i in range(1000)
        if leaders[coordinator_partition(f"{prefix}-{i}", len(leaders))] == node
    )


def start_stopped_nodes(cluster: LocalKafkaCluster) -> None:
    """Every node that a test killed or stopped started again, so the next test has them all."""
    for node in cluster.node_ids:
        if not cluster.node_alive(node):
            cluster.start_node(node)
