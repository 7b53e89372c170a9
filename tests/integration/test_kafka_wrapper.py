"""The Kafka wrapper on a real broker: the one partition reader and the admin requests every stage uses."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kbackup.core.errors import KafkaOperationError
from kbackup.core.kafka import Admin, KafkaClients, PartitionReader, TopicSpec, open_admin
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import Record, create_topic, produce


def _offsets(
    reader: PartitionReader, topic: str, start: int, end: int | None, timeout_secs: float = 30, **options: Any
) -> list[int]:
    return [
        offset
        for batch in reader.batches(topic, 0, start, end, timeout_secs=timeout_secs, **options)
        for offset in (message.offset() for message in batch)
        if offset is not None
    ]


def test_reader_reads_exactly_the_range_then_to_the_partition_end(
    target_cluster: LocalKafkaCluster, unique_name: str
) -> None:
    create_topic(target_cluster, unique_name)
    produce(target_cluster, unique_name, [Record(None, b"v%d" % i) for i in range(50)])
    with PartitionReader(KafkaClients(target_cluster.connection())) as reader:
        assert _offsets(reader, unique_name, 10, 30) == list(range(10, 30))
        assert (reader.reached, reader.at_partition_end) == (30, False)
        # A read that starts where the last one stopped keeps the assignment and reads on.
        assert _offsets(reader, unique_name, 30, None) == list(range(30, 50))
        assert (reader.reached, reader.at_partition_end) == (50, True)
        assert _offsets(reader, unique_name, 45, None, batch_records=2) == list(range(45, 50))


def test_reader_skips_aborted_records_and_stops_or_waits_at_an_open_transaction(
    target_cluster: LocalKafkaCluster, unique_name: str
) -> None:
    create_topic(target_cluster, unique_name)
    producer = Producer(
        {"bootstrap.servers": target_cluster.bootstrap_servers, "transactional.id": unique_name}
    )
    producer.init_transactions(30)
    for records, commit in ((5, True), (3, False), (4, True)):
        producer.begin_transaction()
        for i in range(records):
            producer.produce(unique_name, b"v%d" % i, partition=0)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    producer.begin_transaction()
    producer.produce(unique_name, b"open", partition=0)
    producer.flush(30)  # left open: the last stable offset stays below the high watermark
    try:
        admin = open_admin(target_cluster.connection())
        key = (unique_name, 0)
        stable = admin.list_offsets([key], "latest")[key]
        high = admin.list_offsets([key], "latest", read_committed=False)[key]
        assert stable < high
        with PartitionReader(KafkaClients(target_cluster.connection())) as reader:
            # 5 committed, a marker, 3 aborted and their marker, 4 committed and a marker.
            assert _offsets(reader, unique_name, 0, high) == [0, 1, 2, 3, 4, 10, 11, 12, 13]
            assert reader.at_partition_end
            assert reader.reached == stable
            waited = _offsets(
                reader, unique_name, 0, high, 1.0, stop_at_partition_end=False, raise_on_timeout=False
            )
            assert waited == [0, 1, 2, 3, 4, 10, 11, 12, 13]
            assert reader.reached < high
            with pytest.raises(KafkaOperationError, match="took longer than") as caught:
                list(reader.batches(unique_name, 0, 0, high, timeout_secs=0.5, stop_at_partition_end=False))
            assert caught.value.retryable
    finally:
        producer.abort_transaction(30)


def test_admin_topics_offsets_configs_and_groups(target_cluster: LocalKafkaCluster, unique_name: str) -> None:
    admin = open_admin(target_cluster.connection())
    spec = TopicSpec(unique_name, 2, 1, configs={"retention.ms": "86400000"})
    assert admin.create_topics([spec]) == {unique_name: None}
    again = admin.create_topics([spec])[unique_name]
    assert again is not None
    assert again.code_name == "TOPIC_ALREADY_EXISTS"
    refused = admin.create_topics([TopicSpec(f"{unique_name}-bad", 1, 1, configs={"cleanup.policy": "x"})])
    bad = refused[f"{unique_name}-bad"]
    assert bad is not None
    assert bad.code_name == "INVALID_CONFIG"
    assert admin.partition_counts([unique_name]) == {unique_name: 2}

    produce(target_cluster, unique_name, [Record(None, b"v", partition=1) for _ in range(7)])
    keys = [(unique_name, 0), (unique_name, 1)]
    assert admin.list_offsets(keys, "earliest") == {keys[0]: 0, keys[1]: 0}
    assert admin.list_offsets(keys, "latest") == {keys[0]: 0, keys[1]: 7}
    missing = (f"{unique_name}-absent", 0)
    assert admin.list_offsets([*keys, missing], "latest", missing_ok=True) == {keys[0]: 0, keys[1]: 7}
    with pytest.raises(KafkaOperationError):  # (a missing topic is retried a while: it may be new)
        Admin(KafkaClients(target_cluster.connection()), retry_secs=1).list_offsets([missing], "latest")

    configs = admin.topic_configs([unique_name])[unique_name]
    assert configs["retention.ms"].value == "86400000"
    assert configs["retention.ms"].set_on_topic
    assert not configs["segment.bytes"].set_on_topic

    group = f"{unique_name}-group"
    admin.alter_offsets(group, {keys[1]: 5})
    assert admin.committed_offsets_of([group, f"{unique_name}-never"]) == {
        group: {keys[1]: 5},
        f"{unique_name}-never": {},
    }
    assert group in admin.list_groups()


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_group_offsets_in_an_open_transaction_are_read_once_it_ends(
    target_cluster: LocalKafkaCluster, unique_name: str, ending: str
) -> None:
    """Offsets a transactional producer sends for a group (an exactly-once application's
    ``sendOffsetsToTransaction``) are the group's offsets only if the transaction commits: a read
    while it is open waits for its end (Kafka says UNSTABLE_OFFSET_COMMIT meanwhile), and one that
    waits longer than its retry time is one retryable line naming the group and the partition."""
    create_topic(target_cluster, unique_name, partitions=2)
    group, keys = f"{unique_name}-eos", [(unique_name, 0), (unique_name, 1)]
    admin = open_admin(target_cluster.connection())
    admin.alter_offsets(group, {keys[0]: 5, keys[1]: 6})
    producer = Producer(
        {"bootstrap.servers": target_cluster.bootstrap_servers, "transactional.id": unique_name}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(unique_name, b"processed", partition=0)
    consumer = Consumer({"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": group})
    try:
        producer.send_offsets_to_transaction(
            [TopicPartition(unique_name, 0, 50)], consumer.consumer_group_metadata(), 30
        )
        impatient = Admin(KafkaClients(target_cluster.connection()), retry_secs=1)
        with pytest.raises(KafkaOperationError) as caught:
            impatient.committed_offsets_of([group])
        assert caught.value.retryable
        assert caught.value.code_name == "UNSTABLE_OFFSET_COMMIT"
        assert f"group {group} has offsets on {unique_name}/0 committed in a transaction still open" in str(
            caught.value
        )

        ends = threading.Timer(
            2.0, producer.commit_transaction if ending == "commit" else producer.abort_transaction
        )
        ends.start()
        try:
            read = admin.committed_offsets_of([group])
        finally:
            ends.join()
    finally:
        consumer.close()
    assert read == {group: {keys[0]: 50 if ending == "commit" else 5, keys[1]: 6}}
