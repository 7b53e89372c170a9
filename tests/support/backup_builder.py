"""Backups for tests, built with :mod:`kbackup.sandbox.synthetic_backup` (no backup stage needed).

``backup_from_cluster`` takes what a real topic holds (read_committed, as a backup does) into a
backup, so tests can compare a restored target with its source record by record;
``write_increment`` writes an increment of numbered records of topic ``t`` at fixed times.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource

from kbackup.format.manifest import (
    ConsumerGroupsSnapshot,
    GroupOffset,
    GroupSnapshot,
    Manifest,
    SourceInfo,
)
from kbackup.format.schema import confluent_to_kafka_timestamp_type
from kbackup.format.segments import SegmentLimits
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import Storage
from tests.support.kafka_io import consume_all, end_offsets


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


def write_increment(
    storage: Storage,
    scratch: Path,
    increment: int,
    ranges: dict[int, tuple[int, int]],
    *,
    groups: dict[str, dict[int, int]] | None = None,
    backup_id: str = "b",
) -> Manifest:
    """An increment of topic ``t``: partition -> (start, end) with a record at every offset."""
    builder = BackupBuilder(
        storage,
        backup_id,
        source_cluster="src",
        scratch_dir=scratch,
        limits=SegmentLimits(max_records=7),
        run_id=f"run{increment}",
    )
    builder.topic("t", len(ranges), {"cleanup.policy": "compact"})
    for partition, (start, end) in sorted(ranges.items()):
        records = (
            BackupRecord(offset, b"v%d" % offset, key=b"k", headers=(("h", None),), timestamp=1_000 + offset)
            for offset in range(start, end)
        )
        builder.partition("t", partition, records, start_offset=start, end_offset=end, log_start_offset=0)
    snapshot = None
    if groups is not None:
        snapshot = ConsumerGroupsSnapshot(
            taken_at="2026-01-01T00:00:00.000Z",
            groups=[
                GroupSnapshot(
                    group_id=name,
                    state="Empty",
                    offsets=[
                        GroupOffset(topic="t", partition=p, offset=o) for p, o in sorted(offsets.items())
                    ],
                )
                for name, offsets in groups.items()
            ],
        )
    return builder.commit(
        snapshot,
        increment=increment,
        previous_run_id=f"run{increment - 1}" if increment else None,
        tool_version="test",
        started_at=f"2026-01-0{increment + 1}T00:00:00.000Z",
        finished_at=f"2026-01-0{increment + 1}T00:01:00.000Z",
        source=SourceInfo(cluster_id="src", kafka_cluster_id="K"),
        settings={"mode": "snapshot"},
    )
