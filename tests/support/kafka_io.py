"""Small helpers the tests use to put records into, and read them back from, real clusters."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from kbackup.sandbox.kafka import LocalKafkaCluster

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp: int | None = None
    partition: int | None = None
    offset: int | None = None
    topic: str | None = None
    timestamp_type: int | None = None

    @property
    def consumed_offset(self) -> int:
        """The offset of a record read from a cluster (a record to produce has none)."""
        assert self.offset is not None, f"{self} was not read from a cluster: it has no offset"
        return self.offset


@dataclass
class Batch:
    records: list[Record] = field(default_factory=list)


def admin(cluster: LocalKafkaCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def create_topic(
    cluster: LocalKafkaCluster, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    client = admin(cluster)  # must outlive the futures: a collected client cancels them
    futures = client.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    for future in futures.values():
        future.result(30)


def produce(cluster: LocalKafkaCluster, topic: str, records: Iterable[Record], **props: object) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True, **props})
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for record in records:
        kwargs: dict[str, Any] = {"key": record.key, "value": record.value, "on_delivery": on_delivery}
        if record.headers:
            kwargs["headers"] = list(record.headers)
        if record.timestamp is not None:
            kwargs["timestamp"] = record.timestamp
        if record.partition is not None:
            kwargs["partition"] = record.partition
        producer.produce(topic, **kwargs)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records not delivered"
    assert not errors, errors


def end_offsets(cluster: LocalKafkaCluster, topic: str, partitions: Sequence[int]) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "kbackup-test-probe"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions
        }
    finally:
        consumer.close()


#: How long a reader to the end waits at a last stable offset below the high watermark.
OPEN_TRANSACTION_GRACE_SECS = 3.0


class ReadToEnd:
    """Which partitions a read_committed consumer has read to their end.

    Under read_committed a partition's end-of-partition event comes at its last stable offset.
    Just after a commit the transaction's markers may not be written yet, so an event below the
    high watermark read before the consumer started waits a little for the rest (the consumer's
    position moves past markers); only a transaction that stays open (a killed producer's) ends
    the read there, after OPEN_TRANSACTION_GRACE_SECS.
    """

    def __init__(self, consumer: Consumer, topic: str, ends: dict[int, int]) -> None:
        self.consumer = consumer
        self.topic = topic
        self.ends = ends
        self.done = {p for p, end in ends.items() if end == 0}
        self._below_end_since: dict[int, float] = {}

    def reached(self, partition: int, offset: int) -> None:
        """An end-of-partition event at ``offset``."""
        if offset >= self.ends[partition]:
            self.done.add(partition)
            self._below_end_since.pop(partition, None)
        else:
            self._below_end_since.setdefault(partition, time.monotonic())

    def finished(self) -> bool:
        for partition, since in list(self._below_end_since.items()):
            position = self.consumer.position([TopicPartition(self.topic, partition)])[0].offset
            if position >= self.ends[partition] or time.monotonic() - since > OPEN_TRANSACTION_GRACE_SECS:
                self.done.add(partition)
                del self._below_end_since[partition]
        return len(self.done) >= len(self.ends)


def consume_all(
    cluster: LocalKafkaCluster,
    topic: str,
    partitions: Sequence[int] = (0,),
    *,
    isolation_level: str = "read_committed",
    timeout: float = 30.0,
) -> list[Record]:
    """Every record of the given partitions, from the start up to their current end, in offset order."""
    ends = end_offsets(cluster, topic, partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "kbackup-test-reader",
            "enable.auto.commit": False,
            "isolation.level": isolation_level,
            "enable.partition.eof": True,
            # A partition whose records below some offset were deleted (DeleteRecords, retention)
            # starts at its log start, not at its end.
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    records: list[Record] = []
    ended = ReadToEnd(consumer, topic, ends)
    deadline = time.monotonic() + timeout
    try:
        while not ended.finished():
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} took longer than {timeout}s")
            message: Any = consumer.poll(
                0.2
            )  # Any: the stubs type headers() as str values or a dict; it is a list of (str, bytes | None)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF
                    ended.reached(message.partition(), message.offset() or 0)
                    continue
                raise KafkaException(message.error())
            ts_type, ts = message.timestamp()
            records.append(
                Record(
                    key=message.key(),
                    value=message.value(),
                    headers=tuple(message.headers() or ()),
                    timestamp=ts,
                    partition=message.partition(),
                    offset=message.offset(),
                    topic=message.topic(),
                    timestamp_type=ts_type,
                )
            )
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r.partition, r.offset))


def commit_group(cluster: LocalKafkaCluster, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def batch(start: int, count: int, partitions: int) -> list[Record]:
    return [
        Record(key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % partitions)
        for i in range(start, start + count)
    ]


def group_position(cluster: LocalKafkaCluster, group: str, topic: str, partition: int) -> int | None:
    """The group's committed offset of the partition; None when it has none."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        committed = consumer.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
    finally:
        consumer.close()
    return committed if committed >= 0 else None


def group_positions(
    cluster: LocalKafkaCluster, group: str, topic: str, partitions: list[int]
) -> dict[int, int | None]:
    """The group's committed offsets of the partitions; None for one where it has none."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
    finally:
        consumer.close()
    return {item.partition: item.offset if item.offset >= 0 else None for item in found}


def target_topics(cluster: LocalKafkaCluster) -> set[str]:
    return set(AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=10).topics)
