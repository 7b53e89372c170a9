"""Backups of made-up records, written through the format's own writer (no source cluster, no backup stage).

Tests and benchmarks need backups of exactly chosen records (holes, headers, timestamps, millions of
them); taking them with a real backup would need a cluster and measure the backup too.
``BackupBuilder`` writes each topic-partition's records as segments with
:class:`~kbackup.format.segments.PartitionSegmentWriter` and commits a manifest with
:func:`~kbackup.format.catalog.commit_manifest`, exactly as the backup stage does; a second builder
on the same backup id adds the next increment. ``write_synthetic_backup`` is one increment of one
topic of generated records (the benchmarks' backups).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbackup.format.catalog import BackupCatalog, commit_manifest
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
from kbackup.format.segments import PartitionSegmentWriter, SegmentLimits
from kbackup.storage import Storage

Header = tuple[str, bytes | None]
#: (offset, timestamp ms, timestamp type, key, value, headers): the segment writer's ``append``.
SegmentRow = tuple[int, int, int, bytes | None, bytes | None, list[Header]]
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
        run_id: str | None = None,
    ) -> None:
        self.storage = storage
        self.backup_id = backup_id
        self.source_cluster = source_cluster
        self.scratch_dir = scratch_dir or Path(tempfile.mkdtemp(prefix="kbackup-builder-"))
        self.limits = limits or SegmentLimits()
        self.run_id = run_id or new_run_id()
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
        rows = ((r.offset, r.timestamp, r.timestamp_type, r.key, r.value, list(r.headers)) for r in records)
        return self.partition_rows(
            topic,
            partition,
            rows,
            start_offset=start_offset,
            end_offset=end_offset,
            log_start_offset=log_start_offset,
        )

    def partition_rows(
        self,
        topic: str,
        partition: int,
        rows: Iterable[SegmentRow],
        *,
        start_offset: int | None = None,
        end_offset: int | None = None,
        log_start_offset: int | None = None,
    ) -> BackupBuilder:
        """:meth:`partition` of rows as the segment writer takes them: no record object each, which
        costs seconds over the millions of records of a benchmark's backup."""
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
        for row in rows:
            writer.append(*row)
            offset, timestamp = row[0], row[1]
            count += 1
            first = offset if first is None else first
            last = offset
            low_ts = timestamp if low_ts is None else min(low_ts, timestamp)
            high_ts = timestamp if high_ts is None else max(high_ts, timestamp)
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

    def commit(
        self, consumer_groups: ConsumerGroupsSnapshot | None = None, **manifest_fields: Any
    ) -> Manifest:
        """Write the manifest: the increment exists from now on. ``manifest_fields`` (``tool_version``,
        ``settings``, ``source``, times, ...) replace what the builder would write in them."""
        fields: dict[str, Any] = {
            "backup_id": self.backup_id,
            "increment": len(self.previous),
            "run_id": self.run_id,
            "previous_run_id": self.previous[-1].run_id if self.previous else None,
            "tool_version": "test-builder",
            "started_at": self.started_at,
            "finished_at": utc_now_iso(),
            "source": SourceInfo(cluster_id=self.source_cluster),
            "settings": {"isolation_level": "read_committed", "compression": self.limits.compression},
            "topics": list(self.topics.values()),
            "partitions": [written.entry for written in self.partitions.values()],
            "segments": [segment for written in self.partitions.values() for segment in written.segments],
            "consumer_groups": consumer_groups,
        }
        manifest = Manifest(**(fields | manifest_fields))
        commit_manifest(self.storage, manifest)
        return manifest


#: (offset, timestamp ms, value) of one generated record; keys and headers are empty.
GeneratedRecord = tuple[int, int, bytes]


def write_synthetic_backup(
    storage: Storage,
    backup_id: str,
    *,
    topic: str,
    partitions: int,
    records_of: Callable[[int], Iterable[GeneratedRecord]],
    source_cluster: str,
    scratch_dir: Path,
) -> Manifest:
    """One increment holding ``records_of(partition)`` of every partition of ``topic`` (CreateTime)."""
    builder = BackupBuilder(storage, backup_id, source_cluster=source_cluster, scratch_dir=scratch_dir)
    builder.topic(topic, partitions)
    for partition in range(partitions):
        generated = records_of(partition)
        rows: Iterator[SegmentRow] = (
            (offset, time_ms, 0, None, value, []) for offset, time_ms, value in generated
        )
        builder.partition_rows(topic, partition, rows)  # 0: CreateTime
    return builder.commit(tool_version="bench-synthetic")
