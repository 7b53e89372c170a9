"""Checking the selected part of a backup before the first record is produced.

Two passes, so the cheap check fails fast: first every needed segment must be
stored with the size its manifest gives (one metadata request each), then each
segment's SHA-256 is checked (reads it whole) and the records of segments only
partly inside the selection are counted. Every problem is a
``BackupIntegrityError`` naming the object.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kbackup.core.errors import BackupIntegrityError
from kbackup.format.encryption import BackupKeys
from kbackup.format.layout import object_key
from kbackup.format.manifest import SegmentEntry
from kbackup.format.segments import open_segment
from kbackup.restore.plan import PartitionPlan
from kbackup.restore.record_filters import RecordFilter, apply_rules
from kbackup.storage import Storage


@dataclass(frozen=True)
class SegmentWork:
    """A segment a restore still has to read, and from which source offset on."""

    partition: PartitionPlan
    segment: SegmentEntry
    #: Records below this source offset are already restored (a resumed restore).
    from_offset: int


def remaining_segments(partition: PartitionPlan, next_offset: int) -> list[SegmentWork]:
    """The segments of a partition that hold selected records at or above ``next_offset``."""
    start = max(partition.offset_start, next_offset)
    return [
        SegmentWork(partition, segment, start)
        for segment in partition.segments
        if segment.last_offset >= start and start < partition.offset_end
    ]


def check_sizes(storage: Storage, backup_id: str, segments: Sequence[SegmentEntry]) -> None:
    """Every segment is stored, with its manifest size."""
    for segment in segments:
        key = object_key(backup_id, segment.key)
        size = storage.size(key)
        if size is None:
            raise BackupIntegrityError(f"segment {key} is missing from {storage.url}")
        if size != segment.size_bytes:
            raise BackupIntegrityError(
                f"segment {key} has {size} bytes in {storage.url}, the manifest says "
                f"{segment.size_bytes} (truncated or replaced)"
            )


def count_selected(
    storage: Storage,
    backup_id: str,
    work: SegmentWork,
    *,
    verify: bool,
    scratch_dir: Path | None = None,
    keys: BackupKeys | None = None,
) -> int:
    """Open a segment (checking its SHA-256 when ``verify``) and count its selected records, less
    those the filter rules drop (tombstones are produced, so counted)."""
    partition = work.partition
    record_filter: RecordFilter = partition.record_filter
    whole = partition.counted_by_manifest(work.segment) and work.from_offset <= work.segment.first_offset
    drops = [rule for rule in partition.rules if rule.action == "drop"]
    with open_segment(
        storage, backup_id, work.segment, scratch_dir=scratch_dir, verify=verify, keys=keys
    ) as parquet:
        if whole:
            return work.segment.record_count
        total = 0
        columns = ["offset", "timestamp", "key", "headers"] if drops else ["offset", "timestamp"]
        try:
            for index in range(parquet.metadata.num_row_groups):
                group = parquet.read_row_group(index, columns=columns)
                for batch in group.to_batches():
                    if not drops:
                        total += record_filter.count(batch.column(0), batch.column(1), work.from_offset)
                        continue
                    mask = record_filter.mask(batch.column(0), batch.column(1), work.from_offset)
                    selected = batch if mask is None else batch.filter(mask)
                    total += selected.num_rows - apply_rules(drops, selected).dropped
        except Exception as exc:
            key = object_key(backup_id, work.segment.key)
            raise BackupIntegrityError(f"segment {key} cannot be decoded: {exc}") from None
        return total


def verify_work(
    storage: Storage,
    backup_id: str,
    work: Sequence[SegmentWork],
    *,
    checksums: bool,
    scratch_dir: Path | None = None,
    on_segment: Callable[[SegmentWork], None] | None = None,
    keys: BackupKeys | None = None,
) -> dict[str, int]:
    """Check the segments still to read; the exact selected record count of each one checked.

    With ``checksums`` off only sizes are checked and no segment is read: the
    segments only partly selected then have no count.
    """
    check_sizes(storage, backup_id, [item.segment for item in work])
    counts: dict[str, int] = {}
    for item in work:
        whole = item.partition.counted_by_manifest(item.segment) and (
            item.from_offset <= item.segment.first_offset
        )
        if checksums:
            counts[item.segment.key] = count_selected(
                storage, backup_id, item, verify=True, scratch_dir=scratch_dir, keys=keys
            )
        elif whole:
            counts[item.segment.key] = item.segment.record_count
        if on_segment is not None:
            on_segment(item)
    return counts
