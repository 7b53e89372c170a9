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
from dataclasses import dataclass, field

from kbackup.core.kafka import Admin, KafkaClients, PartitionReader
from kbackup.core.logs import get_logger
from kbackup.core.types import TopicPartitionKey
from kbackup.format.origin import parse_origin
from kbackup.restore.plan import PartitionPlan

log = get_logger("restore.resume")

FIRST_WINDOW = 500


@dataclass
class LandedRecords:
    """For each source partition: per target partition, the highest source offset found there."""

    by_source: dict[TopicPartitionKey, dict[int, int]] = field(default_factory=dict)
    #: Target records read while looking.
    scanned: int = 0

    def last_offsets(self, source: TopicPartitionKey) -> dict[int, int]:
        return self.by_source.get(source, {})


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
    # Partitions not created yet hold nothing: they are left out of the answer.
    admin = Admin(clients)
    ends = admin.list_offsets(feeders, "latest", read_committed=False, missing_ok=True)
    starts = admin.list_offsets(ends, "earliest", read_committed=False, missing_ok=True)
    deadline = time.monotonic() + timeout
    with PartitionReader(clients) as reader:
        for (topic, partition), wanted in sorted(feeders.items()):
            if (topic, partition) not in ends or (topic, partition) not in starts:
                continue
            low, high = starts[(topic, partition)], ends[(topic, partition)]
            found: dict[TopicPartitionKey, int] = {}
            window_end, size = high, FIRST_WINDOW
            while window_end > low and not wanted <= found.keys():
                window_start = max(low, window_end - size)
                seen: dict[TopicPartitionKey, int] = {}
                for batch in reader.batches(
                    topic,
                    partition,
                    window_start,
                    window_end,
                    timeout_secs=max(0.0, deadline - time.monotonic()),
                ):
                    landed.scanned += len(batch)
                    for message in batch:
                        headers = message.headers()
                        origin = parse_origin(headers if isinstance(headers, list) else None)
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
    return landed
