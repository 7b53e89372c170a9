"""The topic the Spark engine's tests back up: one large partition, cut into several slices (one
Spark task each), beside small ones; and a record's fields that a backup must keep."""

from __future__ import annotations

from typing import Any

from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import Record, create_topic, produce


def seed_sliced_topic(cluster: LocalKafkaCluster, topic: str, *, records: int, on_partition_0: int) -> None:
    """``records`` records on three partitions: the first ``on_partition_0`` on partition 0, the
    rest alternately on 1 and 2; keys repeat, values vary in length, each has a header and a time."""
    create_topic(cluster, topic, partitions=3, config={"retention.ms": "-1"})
    produce(
        cluster,
        topic,
        [
            Record(
                key=f"k{i % 17}".encode(),
                value=f"value-{i}".encode() * (1 + i % 5),
                partition=0 if i < on_partition_0 else (1 + i % 2),
                headers=(("h", f"{i}".encode()),),
                timestamp=1_700_000_000_000 + i,
            )
            for i in range(records)
        ],
    )


def kept_fields(record: Any) -> tuple[Any, ...]:
    """What a backup keeps of a record: where it was, and its key, value, headers and time."""
    return (
        record.topic,
        record.partition,
        record.offset,
        record.key,
        record.value,
        record.headers,
        record.timestamp,
    )
