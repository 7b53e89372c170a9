"""A backup of generated records, written through the backup format's own writer (no source cluster).

The restore benchmark needs backups of millions of records of a chosen size; taking them with a
real backup would measure the backup too. Segments are written by
:class:`kbackup.format.segments.PartitionSegmentWriter` and the manifest by
:func:`kbackup.format.catalog.commit_manifest`, as the backup stage writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from kbackup.format.catalog import commit_manifest
from kbackup.format.layout import new_run_id
from kbackup.format.manifest import (
    Manifest,
    PartitionEntry,
    SegmentEntry,
    SourceInfo,
    TopicEntry,
    utc_now_iso,
)
from kbackup.format.segments import PartitionSegmentWriter, SegmentLimits
from kbackup.storage import Storage

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
    """One increment holding ``records_of(partition)`` of every partition of ``topic``."""
    run_id = new_run_id()
    started_at = utc_now_iso()
    entries: list[PartitionEntry] = []
    segments: list[SegmentEntry] = []
    limits = SegmentLimits()
    for partition in range(partitions):
        writer = PartitionSegmentWriter(
            storage,
            backup_id=backup_id,
            run_id=run_id,
            source_cluster=source_cluster,
            topic=topic,
            partition=partition,
            limits=limits,
            scratch_dir=scratch_dir,
        )
        count, first, last, low, high = 0, None, None, None, None
        for offset, timestamp, value in records_of(partition):
            writer.append(offset, timestamp, 0, None, value, [])  # 0: CreateTime
            count += 1
            first = offset if first is None else first
            last = offset
            low = timestamp if low is None else min(low, timestamp)
            high = timestamp if high is None else max(high, timestamp)
        segments += writer.finish()
        start = first if first is not None else 0
        entries.append(
            PartitionEntry(
                topic=topic,
                partition=partition,
                start_offset=start,
                end_offset=last + 1 if last is not None else start,
                log_start_offset=start,
                record_count=count,
                first_offset=first,
                last_offset=last,
                min_timestamp=low,
                max_timestamp=high,
            )
        )
    manifest = Manifest(
        backup_id=backup_id,
        increment=0,
        run_id=run_id,
        previous_run_id=None,
        tool_version="bench-synthetic",
        started_at=started_at,
        finished_at=utc_now_iso(),
        source=SourceInfo(cluster_id=source_cluster),
        settings={"isolation_level": "read_committed", "compression": limits.compression},
        topics=[TopicEntry(name=topic, partitions=partitions, configs={})],
        partitions=entries,
        segments=segments,
    )
    commit_manifest(storage, manifest)
    return manifest
