"""Proving a restore: for every group and partition, did it land where it stopped on the source?

Reads every restored record of the target partitions (with its origin
headers) once, reads each group's committed position on the target, and
counts, per the reference definition, the records the group would skip
(unprocessed on the source, before its position: data loss) and those it
would re-read (processed on the source, at or after its position).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kbackup.core.config import KafkaConnection
from kbackup.core.kafka import KafkaClients, PartitionReader, open_admin
from kbackup.core.types import TopicPartitionKey
from kbackup.format.origin import parse_origin
from kbackup.offsets.translate import RestoredRecord, measure


@dataclass(frozen=True)
class PartitionVerdict:
    group_id: str
    target_topic: str
    target_partition: int
    #: The group's committed offset on the target (None: it has none).
    position: int | None
    restored_records: int
    skipped: int
    reprocessed: int


@dataclass
class Verification:
    verdicts: list[PartitionVerdict] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return sum(verdict.skipped for verdict in self.verdicts)

    @property
    def reprocessed(self) -> int:
        return sum(verdict.reprocessed for verdict in self.verdicts)

    @property
    def records_read_back(self) -> int:
        """Restored records read from the target, each once (a partition is read once for all groups)."""
        per_partition = {(v.target_topic, v.target_partition): v.restored_records for v in self.verdicts}
        return sum(per_partition.values())

    @property
    def records_compared(self) -> int:
        """Records compared with a group's position: once per group that reads the record's partition."""
        return sum(verdict.restored_records for verdict in self.verdicts)

    def per_group(self) -> dict[str, dict[str, int]]:
        totals: dict[str, dict[str, int]] = {}
        for verdict in self.verdicts:
            entry = totals.setdefault(verdict.group_id, {"skipped": 0, "reprocessed": 0, "partitions": 0})
            entry["skipped"] += verdict.skipped
            entry["reprocessed"] += verdict.reprocessed
            entry["partitions"] += 1
        return totals


def read_restored(
    connection: KafkaConnection,
    partitions: Iterable[TopicPartitionKey],
    source_cluster: str,
    timeout: float = 300.0,
) -> dict[TopicPartitionKey, list[RestoredRecord]]:
    """Every restored record (origin cluster = ``source_cluster``) of the given target partitions."""
    keys = sorted(set(partitions))
    ranges = open_admin(connection).partition_ranges(keys)
    result: dict[TopicPartitionKey, list[RestoredRecord]] = {key: [] for key in keys}
    deadline = time.monotonic() + timeout
    clients = KafkaClients(connection, client_id="kafka-backup-drill-verify")
    with PartitionReader(clients) as reader:
        for key in keys:
            span = ranges[key]
            if span.log_end <= span.log_start:
                continue
            for batch in reader.batches(
                key[0],
                key[1],
                span.log_start,
                span.log_end,
                timeout_secs=max(0.0, deadline - time.monotonic()),
            ):
                for message in batch:
                    headers = message.headers()
                    origin = parse_origin(headers if isinstance(headers, list) else None)
                    if origin is not None and origin.cluster == source_cluster:
                        offset = message.offset()
                        assert offset is not None  # the reader hands over records only
                        result[key].append(
                            RestoredRecord(offset, origin.topic, origin.partition, origin.offset)
                        )
    return result


def verify_positions(
    connection: KafkaConnection,
    *,
    source_cluster: str,
    groups: Mapping[str, Mapping[TopicPartitionKey, int]],
    target_partitions_of: Mapping[str, list[TopicPartitionKey]],
) -> Verification:
    """Judge every group's committed position on the target.

    ``groups`` maps each target group id to its committed source offsets;
    ``target_partitions_of`` maps it to the target partitions it reads.
    A source partition missing from a group's offsets counts as nothing processed.
    """
    admin = open_admin(connection)
    all_partitions = {key for keys in target_partitions_of.values() for key in keys}
    restored = read_restored(connection, all_partitions, source_cluster)
    verification = Verification()
    for group_id, committed in groups.items():
        positions = admin.committed_offsets(group_id)
        for key in sorted(target_partitions_of.get(group_id, [])):
            records = restored[key]
            position = positions.get(key)
            thresholds = {source: committed.get(source, 0) for source in {r.source for r in records}}
            # No committed position: the consumer starts wherever auto.offset.reset says; judge the worst.
            outcome = measure(records, thresholds, position if position is not None else 1 << 62)
            verification.verdicts.append(
                PartitionVerdict(
                    group_id=group_id,
                    target_topic=key[0],
                    target_partition=key[1],
                    position=position,
                    restored_records=len(records),
                    skipped=outcome.skipped,
                    reprocessed=outcome.reprocessed,
                )
            )
    return verification
