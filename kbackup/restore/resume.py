"""Where a restore without transactions (the idempotent mode) continues: the target's origin headers.

For each target partition the restore writes to, the records at its end are
read backwards, in growing windows, until the last restored record of every
source partition that feeds it is found (or the partition's start is reached).
Records of one source partition reach each target partition in source order
from one idempotent producer, so a target partition holds a *prefix* of the
records routed to it: a record whose source offset is at or below the last one
found there has landed, every later one has not. Limits: docs/restore.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from kbackup.core.errors import KafkaOperationError
from kbackup.core.kafka.clients import KafkaClients, translate_kafka_error
from kbackup.core.logs import get_logger
from kbackup.core.types import TopicPartitionKey
from kbackup.format.origin import parse_origin
from kbackup.restore.plan import PartitionPlan

log = get_logger("restore.resume")

FIRST_WINDOW = 500
_NO_SUCH_PARTITION = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
}


@dataclass
class LandedRecords:
    """For each source partition: per target partition, the highest source offset found there."""

    by_source: dict[TopicPartitionKey, dict[int, int]] = field(default_factory=dict)
    #: Target records read while looking.
    scanned: int = 0

    def last_offsets(self, source: TopicPartitionKey) -> dict[int, int]:
        return self.by_source.get(source, {})


def _read_window(
    consumer: object,
    topic: str,
    partition: int,
    start: int,
    end: int,
    deadline: float,
) -> Iterable[tuple[int, list[tuple[str, bytes | None]] | None]]:
    """(offset, headers) of the committed records in ``[start, end)``."""
    consumer.assign([TopicPartition(topic, partition, start)])  # type: ignore[attr-defined]
    while True:
        if time.monotonic() > deadline:
            raise KafkaOperationError(
                f"reading the end of {topic}/{partition} to find where the restore stopped took too long",
                hint="raise restore.timeout_secs",
                retryable=True,
            )
        message = consumer.poll(0.2)  # type: ignore[attr-defined]
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return
            raise KafkaOperationError(f"reading {topic}/{partition} failed: {error.name()}: {error.str()}")
        offset = message.offset()
        if offset >= end:
            return
        yield offset, message.headers()
        if offset >= end - 1:
            return


def find_landed(
    clients: KafkaClients,
    partitions: list[PartitionPlan],
    source_cluster: str,
    *,
    timeout: float,
    missing_topics: frozenset[str] = frozenset(),
) -> LandedRecords:
    """Scan the end of every target partition the plan writes to for this restore's origin headers.

    ``missing_topics`` (the plan creates them) hold nothing and are not read.
    """
    feeders: dict[tuple[str, int], set[TopicPartitionKey]] = {}
    for plan in partitions:
        if plan.target_topic in missing_topics:
            continue
        for target_partition in plan.target_partitions_fed():
            feeders.setdefault((plan.target_topic, target_partition), set()).add(
                (plan.source_topic, plan.source_partition)
            )
    landed = LandedRecords()
    connection = clients.connection
    props: dict[str, Any] = {"isolation.level": "read_committed", "enable.partition.eof": True}
    consumer = clients.consumer(**props)
    deadline = time.monotonic() + timeout
    try:
        for (topic, partition), wanted in sorted(feeders.items()):
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=connection.connect_timeout_secs
                )
            except Exception as exc:
                error = getattr(exc, "args", [None])[0]
                if isinstance(error, KafkaError) and error.code() in _NO_SUCH_PARTITION:
                    continue  # not created yet: nothing landed
                raise translate_kafka_error(
                    exc, action=f"read the end offsets of {topic}", connection=connection
                ) from None
            found: dict[TopicPartitionKey, int] = {}
            window_end, size = high, FIRST_WINDOW
            while window_end > low and not wanted <= found.keys():
                window_start = max(low, window_end - size)
                seen: dict[TopicPartitionKey, int] = {}
                for _offset, headers in _read_window(
                    consumer, topic, partition, window_start, window_end, deadline
                ):
                    landed.scanned += 1
                    origin = parse_origin(headers)
                    if origin is None or origin.cluster != source_cluster:
                        continue
                    source = (origin.topic, origin.partition)
                    if source in wanted:
                        seen[source] = max(seen.get(source, -1), origin.offset)
                for source, offset in seen.items():
                    if source not in found:
                        found[source] = offset
                window_end, size = window_start, size * 4
            for source, offset in found.items():
                landed.by_source.setdefault(source, {})[partition] = offset
            log.info(
                "%s/%s: last restored source offsets %s (scanned back to %s)",
                topic,
                partition,
                found,
                window_end,
            )
    finally:
        consumer.close()
    return landed
