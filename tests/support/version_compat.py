"""The compatibility data set (tests/integration/test_kafka_versions.py): a few topics and groups put on a
source cluster of any Kafka version, and the oracle of their copy on a target after a three-phase restore.

The oracle knows every value, header and timestamp the test produced; the source cluster tells only
at which source offset each value landed (transactions leave control records and aborted records
between them), never the product's own headers or reports.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupType, Producer, TopicPartition

from kbackup.offsets.translate import RestoredRecord
from kbackup.sandbox.jars import kafka_libs
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.config_files import config_file
from tests.support.kafka_io import Header, Record, admin, consume_all, create_topic, group_positions, produce
from tests.support.oracles import reference_position
from tests.support.restore_checks import own_headers

#: An hour ago: inside the target's retention, and not "now" (a timestamp of 0 means "now" to librdkafka).
FIRST_TIMESTAMP = int(time.time() * 1000) - 3_600_000
#: The prefix of the groups the three-phase restore writes on the target.
MOVED = "moved-"


@contextlib.contextmanager
def clusters_of_versions(versions: Mapping[str, str], base: Path) -> Iterator[dict[str, LocalKafkaCluster]]:
    """One single-node cluster per name, of the Kafka version given for it, with the sandbox's usual
    properties; every JVM is launched before any is awaited, and all stop on exit."""
    clusters = {
        name: LocalKafkaCluster(name=name, work_dir=base / name, libs=kafka_libs(version))
        for name, version in versions.items()
    }
    try:
        for cluster in clusters.values():
            cluster.launch()
        for cluster in clusters.values():
            cluster.wait_ready_choosing_again()
        yield clusters
    finally:
        for cluster in clusters.values():
            cluster.stop()


@dataclass
class ProducedTopic:
    """What the test wrote into one source topic that a read_committed consumer sees, per partition."""

    name: str
    partitions: int
    records: dict[int, list[Record]] = field(default_factory=dict)

    def add(self, record: Record) -> None:
        assert record.partition is not None
        self.records.setdefault(record.partition, []).append(record)


@dataclass
class CompatDataSet:
    """The topics, and the groups' committed source offsets (group -> (topic, partition) -> offset)."""

    topics: dict[str, ProducedTopic]
    groups: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)

    def restored_name(self, topic: str) -> str:
        return f"{topic}-restored"


def _stamp(index: int) -> int:
    return FIRST_TIMESTAMP + 7 * index


def _headers(index: int) -> tuple[Header, ...]:
    """Every other record has headers: a repeated name, a null value and an empty one among them."""
    if index % 2:
        return ()
    return (("trace", f"t{index}".encode()), ("dup", b"1"), ("dup", b"2"), ("null", None), ("empty", b""))


def _produce_plain(
    source: LocalKafkaCluster,
    topic: ProducedTopic,
    count: int,
    *,
    distinct_keys: int | None = None,
    with_headers: bool = False,
    config: dict[str, str] | None = None,
) -> None:
    """``count`` records spread over the topic's partitions, each with its own timestamp; keys repeat
    when ``distinct_keys`` is given, every other record has headers ``with_headers``."""
    create_topic(source, topic.name, partitions=topic.partitions, config=config)
    for i in range(count):
        topic.add(
            Record(
                key=f"k{i if distinct_keys is None else i % distinct_keys}".encode(),
                value=f"{topic.name}-v{i}".encode(),
                headers=_headers(i) if with_headers else (),
                timestamp=_stamp(i),
                partition=i % topic.partitions,
            )
        )
    produce(source, topic.name, [r for records in topic.records.values() for r in records])


#: The payments' transactions: how many records each writes, and whether it commits.
TRANSACTIONS = ((10, True), (6, False), (10, True))


def _produce_payments(source: LocalKafkaCluster, topic: ProducedTopic) -> None:
    """Three transactions over two partitions: 10 records committed, 6 aborted, 10 committed."""
    create_topic(source, topic.name, partitions=topic.partitions)
    producer = Producer(
        {"bootstrap.servers": source.bootstrap_servers, "transactional.id": f"{topic.name}-writer"}
    )
    producer.init_transactions(30)
    index = 0
    for count, commit in TRANSACTIONS:
        producer.begin_transaction()
        for _ in range(count):
            timestamp, partition = _stamp(index), index % topic.partitions
            record = Record(
                key=f"p{index}".encode(),
                value=f"{topic.name}-{'v' if commit else 'aborted'}{index}".encode(),
                headers=(("txn", b"yes"),),
                timestamp=timestamp,
                partition=partition,
            )
            producer.produce(
                topic.name,
                key=record.key,
                value=record.value,
                headers=list(record.headers),
                timestamp=timestamp,
                partition=partition,
            )
            if commit:
                topic.add(record)
            index += 1
        # Sent before the abort: an abort purges what the producer still queues, which never lands.
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            # Delivered first: the aborted records are in the log (holes and markers), and an
            # abort sent while they are in flight was refused (INVALID_TXN_STATE, seen in a suite run).
            producer.flush(30)
            producer.abort_transaction(30)


def fill_source(source: LocalKafkaCluster, prefix: str) -> CompatDataSet:
    """The three topics of the data set on ``source``, named after ``prefix``."""
    data = CompatDataSet(
        topics={
            "orders": ProducedTopic(f"{prefix}-orders", 2),
            "changelog": ProducedTopic(f"{prefix}-changelog", 1),
            "payments": ProducedTopic(f"{prefix}-payments", 2),
        }
    )
    _produce_plain(source, data.topics["orders"], 40, with_headers=True)
    # Compacted, 5 keys: the active segment is never cleaned, so every record stays for the backup.
    _produce_plain(
        source, data.topics["changelog"], 30, distinct_keys=5, config={"cleanup.policy": "compact"}
    )
    _produce_payments(source, data.topics["payments"])
    return data


def source_offsets(source: LocalKafkaCluster, topic: ProducedTopic) -> dict[bytes | None, int]:
    """Where each committed value landed on the source (read back from the source cluster)."""
    return {
        r.value: r.consumed_offset for r in consume_all(source, topic.name, list(range(topic.partitions)))
    }


def commit_classic_groups(source: LocalKafkaCluster, data: CompatDataSet, prefix: str) -> None:
    """Two classic groups. ``billing`` committed payments/0 at the control record that closed the first
    transaction, so its next record is past the aborted ones."""
    orders, changelog, payments = (data.topics[name] for name in ("orders", "changelog", "payments"))
    payment_offsets = source_offsets(source, payments)
    # The first transaction wrote every other of its records to partition 0.
    last_of_first_transaction = payments.records[0][TRANSACTIONS[0][0] // 2 - 1]
    first_transaction_end = payment_offsets[last_of_first_transaction.value]
    data.groups[f"{prefix}-billing"] = {
        (orders.name, 0): 7,
        (orders.name, 1): 20,  # its end: nothing left to read
        (payments.name, 0): first_transaction_end + 1,
    }
    data.groups[f"{prefix}-audit"] = {(changelog.name, 0): 12, (payments.name, 1): 0}
    for group, offsets in data.groups.items():
        consumer = Consumer({"bootstrap.servers": source.bootstrap_servers, "group.id": group})
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
        consumer.close()


def commit_consumer_protocol_group(source: LocalKafkaCluster, data: CompatDataSet, group: str) -> None:
    """A KIP-848 group (``group.protocol=consumer``): it joins, reads, and commits orders 5 and 9."""
    orders = data.topics["orders"]
    consumer = Consumer(
        {
            "bootstrap.servers": source.bootstrap_servers,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([orders.name])
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < orders.partitions:
            assert time.monotonic() < deadline, "the KIP-848 group was never assigned both partitions"
            consumer.poll(0.2)
        offsets = {(orders.name, 0): 5, (orders.name, 1): 9}
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
        data.groups[group] = offsets
    finally:
        consumer.close()


def write_compat_config(path: Path, target: LocalKafkaCluster, store: Path, data: CompatDataSet) -> Path:
    """A three-phase restore of every topic of ``data`` into ``<topic>-restored``, moving its groups."""
    return config_file(
        path,
        backup_id="nightly",
        target={"bootstrap_servers": target.bootstrap_servers},
        storage={"url": str(store)},
        restore={
            "topic_mapping": {t.name: data.restored_name(t.name) for t in data.topics.values()},
            "transaction_max_records": 8,
        },
        offset_reset={"snapshot_dir": str(path.parent / "snapshots"), "groups": sorted(data.groups)},
        three_phase={
            "state_dir": str(path.parent / "state"),
            "build_mapping": "when-needed",
            "group_prefix": MOVED,
        },
    )


def check_records(target: LocalKafkaCluster, data: CompatDataSet) -> None:
    """Every committed record once, in order per partition, with its key, headers and timestamp; no
    aborted record."""
    for topic in data.topics.values():
        for partition, produced in topic.records.items():
            restored = consume_all(target, data.restored_name(topic.name), [partition])
            where = f"{topic.name}/{partition}"
            assert [r.value for r in restored] == [r.value for r in produced], where
            assert [r.key for r in restored] == [r.key for r in produced], where
            assert [own_headers(r.headers) for r in restored] == [list(r.headers) for r in produced], where
            assert [r.timestamp for r in restored] == [r.timestamp for r in produced], where


def expected_positions(
    source: LocalKafkaCluster, target: LocalKafkaCluster, data: CompatDataSet
) -> dict[tuple[str, str, int], int | None]:
    """(group, restored topic, partition) -> the reference position, by brute force over the restored
    records matched to their source offsets by value, for every partition of each topic a group
    committed on (a partition it never committed on counts as nothing processed)."""
    expected: dict[tuple[str, str, int], int | None] = {}
    for topic in data.topics.values():
        at_source = source_offsets(source, topic)
        restored_topic = data.restored_name(topic.name)
        for partition in range(topic.partitions):
            restored = [
                RestoredRecord(r.consumed_offset, topic.name, partition, at_source[r.value])
                for r in consume_all(target, restored_topic, [partition])
            ]
            for group, committed in data.groups.items():
                if any(t == topic.name for t, _ in committed):
                    expected[(group, restored_topic, partition)] = reference_position(restored, committed)
    return expected


def moved_positions(
    target: LocalKafkaCluster, expected: Mapping[tuple[str, str, int], int | None]
) -> dict[tuple[str, str, int], int | None]:
    """The committed offsets of the moved groups on the target, keyed as ``expected``."""
    found: dict[tuple[str, str, int], int | None] = {}
    for group, topic, partition in expected:
        found[(group, topic, partition)] = group_positions(target, MOVED + group, topic, [partition])[
            partition
        ]
    return found


def check_resumes(
    target: LocalKafkaCluster,
    data: CompatDataSet,
    group: str,
    topic: ProducedTopic,
    expected: Mapping[tuple[str, str, int], int | None],
) -> None:
    """A KIP-848 member of the moved ``group`` reads first, on each partition of ``topic``, the restored
    record at the group's reference position."""
    restored = data.restored_name(topic.name)
    partitions = list(range(topic.partitions))
    values = {(r.partition, r.offset): r.value for r in consume_all(target, restored, partitions)}
    wanted = {p: values[(p, expected[(group, restored, p)])] for p in partitions}
    assert first_values_read(target, MOVED + group, restored, topic.partitions) == wanted, group


def first_values_read(
    target: LocalKafkaCluster, group: str, topic: str, partitions: int
) -> dict[int, bytes | None]:
    """The first value a KIP-848 member of ``group`` reads from each partition: where it resumes."""
    consumer = Consumer(
        {
            "bootstrap.servers": target.bootstrap_servers,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    first: dict[int, bytes | None] = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(first) < partitions:
            assert time.monotonic() < deadline, f"{group} read {sorted(first)} of {partitions} partitions"
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                first.setdefault(message.partition() or 0, message.value())
    finally:
        consumer.close()
    return first


def group_type(cluster: LocalKafkaCluster, group: str) -> ConsumerGroupType:
    """CONSUMER for a KIP-848 group, CLASSIC for the others (the broker's answer)."""
    client = admin(cluster)  # must outlive the future
    description = client.describe_consumer_groups([group])[group].result(30)
    found: ConsumerGroupType = description.type
    return found
