"""Writing topics that look exactly like a restore's output, and reading their origins back.

Used by mapping/reset tests that need restored data with precise holes before
(or besides) going through the restore stage itself.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_STORED, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kbackup.format.origin import Origin, origin_headers, parse_origin
from kbackup.offsets.translate import RestoredRecord
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import ReadToEnd, consume_all, end_offsets


@dataclass(frozen=True)
class Restored:
    """One record to write: into target ``partition``, from source ``(source_partition, source_offset)``."""

    partition: int
    source_partition: int
    source_offset: int


def write_restored(
    cluster: LocalKafkaCluster,
    topic: str,
    source_topic: str,
    source_cluster: str,
    batches: Sequence[tuple[Sequence[Restored], bool]],
    transactional_id: str,
) -> None:
    """Produce each batch in its own transaction, committed (True) or aborted (False).

    Every transaction leaves a control record (marker) in each partition it wrote to,
    so target offsets have holes exactly where a transactional restore leaves them.
    """
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id, "linger.ms": 5}
    )
    producer.init_transactions(30)
    for records, commit in batches:
        producer.begin_transaction()
        for record in records:
            origin = Origin(
                source_cluster, source_topic, record.source_partition, record.source_offset, 1_700_000
            )
            producer.produce(
                topic,
                key=f"k{record.source_offset}".encode(),
                value=b"v",
                partition=record.partition,
                headers=[("app", b"own header"), *origin_headers(origin)],
            )
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)


def restored_records(
    cluster: LocalKafkaCluster, topic: str, partition: int, source_cluster: str
) -> list[RestoredRecord]:
    """What the target partition holds of a restore from ``source_cluster`` (read_committed)."""
    records = []
    for record in consume_all(cluster, topic, [partition]):
        origin = parse_origin(record.headers)
        if origin is not None and origin.cluster == source_cluster:
            assert record.offset is not None
            records.append(RestoredRecord(record.offset, origin.topic, origin.partition, origin.offset))
    return records


def read_as_group(
    cluster: LocalKafkaCluster,
    group: str,
    topic: str,
    partitions: Sequence[int],
    source_cluster: str,
    timeout: float = 30.0,
) -> dict[int, list[RestoredRecord]]:
    """What a consumer of ``group`` reads on the target: from the group's committed offsets to the end.

    Each partition is assigned at its stored (committed) offset, exactly where a restarted
    application resumes; a partition without a committed offset is an error, not a silent
    fallback to the start.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_STORED) for p in partitions])
    read: dict[int, list[RestoredRecord]] = {p: [] for p in partitions}
    ended = ReadToEnd(consumer, topic, end_offsets(cluster, topic, partitions))
    deadline = time.monotonic() + timeout
    try:
        while not ended.finished():
            if time.monotonic() > deadline:
                raise TimeoutError(f"group {group} did not reach the end of {topic} within {timeout}s")
            message: Any = consumer.poll(
                0.5
            )  # Any: the stubs type headers() as str values or a dict; it is a list of (str, bytes | None)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    ended.reached(message.partition(), message.offset() or 0)
                    continue
                raise KafkaException(error)
            origin = parse_origin(message.headers())
            if origin is not None and origin.cluster == source_cluster:
                offset = message.offset()
                assert offset is not None
                read[message.partition()].append(
                    RestoredRecord(offset, origin.topic, origin.partition, origin.offset)
                )
    finally:
        consumer.close()
    return read
