"""A three-node sandbox cluster is replicated like a production one, its nodes can be killed,
stopped and started again, and its finders name the node that leads a partition or coordinates a
group or a transactional id.

One cluster for the module: each test that takes a node down brings every node back, in sync,
before it ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer

from kbackup.core.kafka import open_admin
from kbackup.sandbox.kafka import (
    GROUP_OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    LocalKafkaCluster,
    SandboxError,
    coordinator_partition,
    local_clusters,
)
from tests.support.cli_process import wait_for
from tests.support.cluster_nodes import (
    create_replicated_topic,
    named_led_by,
    offsets_topic_leaders,
    produce_one,
    quorum_status,
    start_stopped_nodes,
)
from tests.support.kafka_io import Record, commit_group, consume_all, group_position, produce
from tests.support.node_faults import wait_in_sync_everywhere

ALL_NODES = (1, 2, 3)


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    with local_clusters(["three"], tmp_path_factory.mktemp("kafka-nodes"), nodes=3) as (cluster,):
        yield cluster


@pytest.fixture(autouse=True)
def every_node_back(three_nodes: LocalKafkaCluster) -> Iterator[None]:
    """A test that failed with a node down leaves the next one three nodes, not two."""
    yield
    start_stopped_nodes(three_nodes)


def records(first: int, count: int) -> list[Record]:
    return [Record(key=f"k{i}".encode(), value=f"v{i}".encode()) for i in range(first, first + count)]


def values(read: list[Record]) -> list[bytes | None]:
    return [record.value for record in read]


def controller_among(cluster: LocalKafkaCluster, nodes: tuple[int, ...]) -> bool:
    try:
        return cluster.active_controller() in nodes
    except SandboxError:  # between a leader's death and the next election
        return False


def transaction(cluster: LocalKafkaCluster, transactional_id: str, topic: str, value: bytes) -> None:
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=value)
    producer.commit_transaction(30)


def test_three_voters_three_brokers_and_replicated_topics(
    three_nodes: LocalKafkaCluster, unique_name: str
) -> None:
    voters, active_controller = quorum_status(three_nodes)
    assert voters == [1, 2, 3]
    assert three_nodes.active_controller() == active_controller
    assert open_admin(three_nodes.connection()).metadata().brokers == ALL_NODES
    assert len(three_nodes.bootstrap_servers.split(",")) == 3
    create_replicated_topic(three_nodes, unique_name, partitions=2)
    for replicas in three_nodes.partitions_of(unique_name).values():
        assert sorted(replicas.replicas) == [1, 2, 3]
        assert replicas.in_sync == ALL_NODES
    config = open_admin(three_nodes.connection()).topic_configs([unique_name])[unique_name]
    assert config["min.insync.replicas"].value == "2"
    commit_group(three_nodes, f"{unique_name}-group", {(unique_name, 0): 0})  # makes the offsets topic
    internal = open_admin(three_nodes.connection()).metadata().topics[GROUP_OFFSETS_TOPIC]
    assert (internal.partitions, internal.replication_factor) == (3, 3)


def test_group_coordinator_is_where_kafka_hashes_the_group(three_nodes: LocalKafkaCluster) -> None:
    """The finder (Kafka's FindCoordinator) and the partition Kafka's hash puts each group in agree:
    the same hash places transactional ids, for which no request names the coordinator."""
    leaders = offsets_topic_leaders(three_nodes)
    assert len(set(leaders.values())) > 1  # the groups below spread over more than one node
    for group in [f"hash-{i}" for i in range(12)] + ["Aa", "BB", "polygenelubricants", "ünïcode-😀"]:
        assert three_nodes.group_coordinator(group) == leaders[coordinator_partition(group, 3)], group


def test_finders_follow_a_killed_node_and_restart_brings_it_back_in_sync(
    three_nodes: LocalKafkaCluster, unique_name: str
) -> None:
    create_replicated_topic(three_nodes, unique_name)
    leader = three_nodes.partition_leader(unique_name, 0)
    offsets_topic_leaders(three_nodes)
    group = named_led_by(three_nodes, f"{unique_name}-group", GROUP_OFFSETS_TOPIC, leader)
    commit_group(three_nodes, group, {(unique_name, 0): 5})
    assert three_nodes.group_coordinator(group) == leader
    transaction(three_nodes, "warm-up", unique_name, b"t0")  # makes the transaction-state topic
    transactional_id = named_led_by(three_nodes, f"{unique_name}-tx", TRANSACTION_STATE_TOPIC, leader)
    assert three_nodes.transaction_coordinator(transactional_id) == leader

    three_nodes.kill_node(leader)
    assert not three_nodes.node_alive(leader)
    wait_for(lambda: three_nodes.partition_leader(unique_name, 0) != leader, "leadership to move", 30)
    survivors = tuple(node for node in ALL_NODES if node != leader)
    assert three_nodes.partition_leader(unique_name, 0) in survivors
    assert three_nodes.in_sync_replicas(unique_name, 0) == survivors
    assert three_nodes.group_coordinator(group) in survivors
    assert group_position(three_nodes, group, unique_name, 0) == 5  # the moved coordinator has it
    transaction(three_nodes, transactional_id, unique_name, b"t1")  # its coordinator moved too
    assert three_nodes.transaction_coordinator(transactional_id) in survivors
    wait_for(lambda: controller_among(three_nodes, survivors), "an active controller among the survivors", 30)

    three_nodes.restart_node(leader)  # stop (already down) and start on the same ports and data
    assert three_nodes.node_alive(leader)
    wait_in_sync_everywhere(three_nodes, [unique_name], timeout=60)
    assert values(consume_all(three_nodes, unique_name)) == [b"t0", b"t1"]


def test_acks_all_survives_one_node_down_and_needs_two_in_sync(
    three_nodes: LocalKafkaCluster, unique_name: str
) -> None:
    create_replicated_topic(three_nodes, unique_name)
    produce(three_nodes, unique_name, records(0, 10), acks="all")
    leader = three_nodes.partition_leader(unique_name, 0)
    three_nodes.kill_node(leader)
    produce(three_nodes, unique_name, records(10, 10), acks="all")
    assert values(consume_all(three_nodes, unique_name)) == values(records(0, 20))

    # A second node down: stopped, not killed. Two SIGKILLs would leave one of three voters, no
    # quorum to commit the ISR shrink, and writes that time out instead of being refused.
    wait_for(lambda: len(three_nodes.in_sync_replicas(unique_name, 0)) == 2, "the killed node fenced", 30)
    follower = next(
        n
        for n in three_nodes.in_sync_replicas(unique_name, 0)
        if n != three_nodes.partition_leader(unique_name, 0)
    )
    three_nodes.stop_node(follower)
    wait_for(
        lambda: len(three_nodes.in_sync_replicas(unique_name, 0)) == 1, "the stopped node out of the ISR", 30
    )
    refused = produce_one(three_nodes, unique_name, b"refused")
    assert refused is not None
    assert refused.code() == KafkaError.NOT_ENOUGH_REPLICAS, refused

    three_nodes.start_node(follower)
    wait_for(
        lambda: produce_one(three_nodes, unique_name, b"accepted") is None, "a write with two in sync", 60
    )
    three_nodes.start_node(leader)
    wait_in_sync_everywhere(three_nodes, [unique_name], timeout=60)
    # A write that timed out may have landed too; none refused did.
    assert set(values(consume_all(three_nodes, unique_name))[20:]) == {b"accepted"}
