"""Building backups for tests and benchmarks, through the format writer (no backup stage needed).

``BackupBuilder`` writes in-memory (or streamed) records of each topic-partition
as segments with :class:`PartitionSegmentWriter` and commits a manifest with
:func:`commit_manifest`, exactly as the backup stage will; a second builder on
the same backup id adds the next increment. ``backup_from_cluster`` takes what
a real topic holds (read_committed, as a backup does) into a backup, so tests
can compare a restored target with its source record by record.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource

from kbackup.format.catalog import BackupCatalog
from kbackup.format.layout import new_run_id
from kbackup.format.manifest import (
    ConsumerGroupsSnapshot,
    Manifest,
    PartitionEntry,
    SegmentEntry,
    SourceInfo,
    TopicEntry,
    utc_now_iso,
)
from kbackup.format.schema import confluent_to_kafka_timestamp_type
from kbackup.format.segments import PartitionSegmentWriter, SegmentLimits
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import Storage
from tests.support.kafka_io import consume_all, end_offsets

Header = tuple[str, bytes | None]
#: An hour ago: older records would be deleted by a target topic's default 7-day retention.
DEFAULT_TIMESTAMP = int(time.time() * 1000) - 3_600_000


@dataclass(frozen=True)
class BackupRecord:
    """One source record as a backup holds it."""

    offset: int
    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] = ()
    timestamp: int = DEFAULT_TIMESTAMP
    #: Kafka's ids: 0 CreateTime, 1 LogAppendTime, -1 none.
    timestamp_type: int = 0


@dataclass
class _PartitionWritten:
    entry: PartitionEntry
    segments: list[SegmentEntry] = field(default_factory=list)


class BackupBuilder:
    """Writes one increment of a backup: topics, partitions' records, then the manifest."""

    def __init__(
        self,
        storage: Storage,
        backup_id: str,
        *,
        source_cluster: str = "source-cluster",
        scratch_dir: Path | None = None,
        limits: SegmentLimits | None = None,
    ) -> None:
        self.storage = storage
        self.backup_id = backup_id
        self.source_cluster = source_cluster
        self.scratch_dir = scratch_dir or Path(tempfile.mkdtemp(prefix="kbackup-builder-"))
        self.limits = limits or SegmentLimits()
        self.run_id = new_run_id()
        self.started_at = utc_now_iso()
        catalog = BackupCatalog(storage)
        self.previous = catalog.load(backup_id).manifests if catalog.exists(backup_id) else []
        self.topics: dict[str, TopicEntry] = {}
        self.partitions: dict[tuple[str, int], _PartitionWritten] = {}

    def topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> BackupBuilder:
        self.topics[name] = TopicEntry(name=name, partitions=partitions, configs=configs or {})
        return self

    def _previous_end(self, topic: str, partition: int) -> int | None:
        end = None
        for manifest in self.previous:
            for entry in manifest.partitions:
                if (entry.topic, entry.partition) == (topic, partition):
                    end = entry.end_offset
        return end

    def partition(
        self,
        topic: str,
        partition: int,
        records: Iterable[BackupRecord],
        *,
        start_offset: int | None = None,
        end_offset: int | None = None,
        log_start_offset: int | None = None,
    ) -> BackupBuilder:
        """Write a partition's records (streamed: any number) in offset order as segments."""
        if topic not in self.topics:
            raise ValueError(f"declare topic {topic} with .topic() first")
        writer = PartitionSegmentWriter(
            self.storage,
            backup_id=self.backup_id,
            run_id=self.run_id,
            source_cluster=self.source_cluster,
            topic=topic,
            partition=partition,
            limits=self.limits,
            scratch_dir=self.scratch_dir,
        )
        count = 0
        first = last = None
        low_ts = high_ts = None
        for record in records:
            writer.append(
                record.offset,
                record.timestamp,
                record.timestamp_type,
                record.key,
                record.value,
                list(record.headers),
            )
            count += 1
            first = record.offset if first is None else first
            last = record.offset
            low_ts = record.timestamp if low_ts is None else min(low_ts, record.timestamp)
            high_ts = record.timestamp if high_ts is None else max(high_ts, record.timestamp)
        segments = writer.finish()
        previous_end = self._previous_end(topic, partition)
        start = start_offset if start_offset is not None else previous_end
        if start is None:
            start = first if first is not None else 0
        end = end_offset if end_offset is not None else (last + 1 if last is not None else start)
        self.partitions[(topic, partition)] = _PartitionWritten(
            entry=PartitionEntry(
                topic=topic,
                partition=partition,
                start_offset=start,
                end_offset=end,
                log_start_offset=log_start_offset if log_start_offset is not None else start,
                record_count=count,
                first_offset=first,
                last_offset=last,
                min_timestamp=low_ts,
                max_timestamp=high_ts,
            ),
            segments=segments,
        )
        return self

    def commit(self, consumer_groups: ConsumerGroupsSnapshot | None = None) -> Manifest:
        """Write the manifest: the increment exists from now on."""
        from kbackup.format.catalog import commit_manifest

        manifest = Manifest(
            backup_id=self.backup_id,
            increment=len(self.previous),
            run_id=self.run_id,
            previous_run_id=self.previous[-1].run_id if self.previous else None,
            tool_version="test-builder",
            started_at=self.started_at,
            finished_at=utc_now_iso(),
            source=SourceInfo(cluster_id=self.source_cluster),
            settings={"isolation_level": "read_committed", "compression": self.limits.compression},
            topics=list(self.topics.values()),
            partitions=[written.entry for written in self.partitions.values()],
            segments=[segment for written in self.partitions.values() for segment in written.segments],
            consumer_groups=consumer_groups,
        )
        commit_manifest(self.storage, manifest)
        return manifest


def topic_configs(cluster: LocalKafkaCluster, topic: str) -> dict[str, str]:
    """The topic's configs that are not broker defaults (what a backup records)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {
        name: str(entry.value)
        for name, entry in entries.items()
        if not entry.is_default and entry.value is not None and not entry.is_sensitive
    }


def partition_count(cluster: LocalKafkaCluster, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    return len(admin.list_topics(topic=topic, timeout=30).topics[topic].partitions)


def start_offsets(cluster: LocalKafkaCluster, topic: str, partitions: Sequence[int]) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "kbackup-test-probe"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[0] for p in partitions
        }
    finally:
        consumer.close()


def backup_from_cluster(
    cluster: LocalKafkaCluster,
    topics: Sequence[str],
    storage: Storage,
    backup_id: str,
    *,
    source_cluster: str | None = None,
    scratch_dir: Path | None = None,
    limits: SegmentLimits | None = None,
) -> Manifest:
    """Back up what the topics hold now (committed records), as the backup stage would."""
    builder = BackupBuilder(
        storage,
        backup_id,
        source_cluster=source_cluster or cluster.cluster_id,
        scratch_dir=scratch_dir,
        limits=limits,
    )
    for topic in topics:
        count = partition_count(cluster, topic)
        builder.topic(topic, count, topic_configs(cluster, topic))
        partitions = list(range(count))
        ends = end_offsets(cluster, topic, partitions)
        lows = start_offsets(cluster, topic, partitions)
        records = consume_all(cluster, topic, partitions)
        for partition in partitions:
            mine = [r for r in records if r.partition == partition]
            builder.partition(
                topic,
                partition,
                (
                    BackupRecord(
                        offset=r.offset or 0,
                        value=r.value,
                        key=r.key,
                        headers=tuple(r.headers),
                        timestamp=r.timestamp if r.timestamp is not None else -1,
                        timestamp_type=confluent_to_kafka_timestamp_type(r.timestamp_type or 0),
                    )
                    for r in mine
                ),
                start_offset=lows[partition],
                end_offset=ends[partition],
            )
    return builder.commit()
