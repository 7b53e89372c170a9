"""Retention generations and backup leases: what ``prune`` commits, and how a running backup says so.

A **retention generation** (``<backup id>/retention/<generation, 8 digits>.json``) moves the start of
a backup's restorable window forward without rewriting a manifest: readers take the newest
generation and read the backup through it (``apply_retention``). Manifests stay immutable, and one
create-if-absent write makes a prune's decision visible all at once; the objects it no longer
needs are deleted afterwards (docs/format.md, "Retention").

A **lease** (``<backup id>/leases/<run id>.json``) is written by a running backup and renewed at
each checkpoint; prune never removes a leased backup as a whole, nor an object that a live backup
may still be about to list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

from pydantic import Field

from kbackup.core.errors import BackupIntegrityError
from kbackup.core.times import iso_utc
from kbackup.core.types import TopicPartitionKey
from kbackup.format.documents import validate, versioned_object
from kbackup.format.layout import check_backup_id
from kbackup.format.manifest import Manifest, ManifestModel, PartitionEntry, SegmentEntry

RETENTION_FOLDER = "retention"
LEASES_FOLDER = "leases"
RETENTION_FORMAT = "kafka-backup-retention"
LEASE_FORMAT = "kafka-backup-lease"
#: Readers refuse a retention generation or lease of a higher version.
RETENTION_FORMAT_VERSION = 1
_GENERATION_NAME = re.compile(r"^(\d{8})\.json$")


class PartitionWindow(ManifestModel):
    """Where the restorable window of one source partition starts after retention."""

    topic: str
    partition: int
    #: Every record the backup still holds of this partition is at or above this offset, and every
    #: record the source held from here to the backup's end is held.
    start_offset: int


class RetentionGeneration(ManifestModel):
    format: str = RETENTION_FORMAT
    format_version: int = RETENTION_FORMAT_VERSION
    backup_id: str
    #: 1 for the first prune of a backup id, then 2, 3, ...; readers take the highest.
    generation: int
    created_at: str
    tool_version: str
    #: True: the whole backup is being removed, and no reader sees it any more.
    deleted: bool = False
    #: Manifests of lower increments are no longer read (a prune deletes them after this commit).
    first_increment: int = 0
    #: run_id of increment ``first_increment - 1``: the first manifest read must follow it.
    first_previous_run_id: str | None = None
    #: Every partition whose window start moved, cumulative over all generations.
    windows: list[PartitionWindow] = Field(default_factory=list)
    #: The policy that made this generation, as the prune was given it (informational).
    policy: dict[str, str | int | float | None] = Field(default_factory=dict)

    def window_starts(self) -> dict[TopicPartitionKey, int]:
        return {(window.topic, window.partition): window.start_offset for window in self.windows}

    def to_json_bytes(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), indent=2) + "\n").encode()


class Lease(ManifestModel):
    format: str = LEASE_FORMAT
    format_version: int = RETENTION_FORMAT_VERSION
    backup_id: str
    run_id: str
    #: Who holds it, for an operator reading a prune plan (host name and process id).
    holder: str
    acquired_at: str
    #: Unix time after which the lease no longer counts (its run died without releasing it).
    #: A finite number: NaN, which no time is later than, would make a prune take it for expired.
    expires_at: float = Field(allow_inf_nan=False)

    def live(self, now: float) -> bool:
        return self.expires_at > now

    def to_json_bytes(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), indent=2) + "\n").encode()


def retention_prefix(backup_id: str) -> str:
    return f"{check_backup_id(backup_id)}/{RETENTION_FOLDER}/"


def retention_key(backup_id: str, generation: int) -> str:
    return f"{retention_prefix(backup_id)}{generation:08d}.json"


def generation_of_key(key: str) -> int | None:
    match = _GENERATION_NAME.match(key.rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def leases_prefix(backup_id: str) -> str:
    return f"{check_backup_id(backup_id)}/{LEASES_FOLDER}/"


def lease_key(backup_id: str, run_id: str) -> str:
    return f"{leases_prefix(backup_id)}{run_id}.json"


def utc_iso(moment: float) -> str:
    return iso_utc(moment)


def _parse(data: bytes, object_name: str, expected_format: str) -> dict[str, object]:
    return versioned_object(
        data, object_name, expected_format=expected_format, max_version=RETENTION_FORMAT_VERSION
    )


def _malformed(object_name: str) -> Callable[[str], BackupIntegrityError]:
    return lambda problem: BackupIntegrityError(f"{object_name} is malformed at {problem}")


def parse_generation(data: bytes, object_name: str) -> RetentionGeneration:
    raw = _parse(data, object_name, RETENTION_FORMAT)
    return validate(RetentionGeneration, raw, _malformed(object_name))


def parse_lease(data: bytes, object_name: str) -> Lease:
    raw = _parse(data, object_name, LEASE_FORMAT)
    return validate(Lease, raw, _malformed(object_name))


# -- reading a backup through its retention ------------------------------------------------------------


def kept_segments(
    segments: Iterable[SegmentEntry], starts: dict[TopicPartitionKey, int]
) -> list[SegmentEntry]:
    """The segments that hold a record at or above their partition's window start."""
    return [s for s in segments if s.last_offset >= starts.get((s.topic, s.partition), s.last_offset)]


def apply_retention(manifests: list[Manifest], generation: RetentionGeneration) -> list[Manifest]:
    """``manifests`` as readers see them under ``generation``: increments below its first are
    left out, and each partition's records below its window start with them (segments wholly
    below go; ranges, counts and first offsets start at the window)."""
    read = [manifest for manifest in manifests if manifest.increment >= generation.first_increment]
    starts = effective_starts(read, generation)
    return [_windowed(manifest, starts) for manifest in read]


def effective_starts(
    manifests: Iterable[Manifest], generation: RetentionGeneration
) -> dict[TopicPartitionKey, int]:
    """Each window start, lowered to the first offset of a segment that straddles it: a kept segment
    is kept whole, so the window holds every record from there (prune itself always cuts between
    segments, where the two agree)."""
    starts = generation.window_starts()
    found = dict(starts)
    for manifest in manifests:
        for segment in kept_segments(manifest.segments, starts):
            key = (segment.topic, segment.partition)
            if key in found and segment.first_offset < found[key]:
                found[key] = segment.first_offset
    return found


def _windowed(manifest: Manifest, starts: dict[TopicPartitionKey, int]) -> Manifest:
    segments = kept_segments(manifest.segments, starts)
    if len(segments) == len(manifest.segments) and all(
        entry.start_offset >= starts.get((entry.topic, entry.partition), entry.start_offset)
        for entry in manifest.partitions
    ):
        return manifest
    by_partition: dict[TopicPartitionKey, list[SegmentEntry]] = {}
    for segment in segments:
        by_partition.setdefault((segment.topic, segment.partition), []).append(segment)
    entries = [_windowed_entry(entry, starts, by_partition) for entry in manifest.partitions]
    return manifest.model_copy(update={"segments": segments, "partitions": entries})


def _windowed_entry(
    entry: PartitionEntry,
    starts: dict[TopicPartitionKey, int],
    by_partition: dict[TopicPartitionKey, list[SegmentEntry]],
) -> PartitionEntry:
    key = (entry.topic, entry.partition)
    window = starts.get(key)
    if window is None or entry.start_offset >= window:
        return entry
    kept = sorted(by_partition.get(key, []), key=lambda segment: segment.first_offset)
    return entry.model_copy(
        update={
            "start_offset": min(window, entry.end_offset),
            "record_count": sum(segment.record_count for segment in kept),
            "first_offset": kept[0].first_offset if kept else None,
            "last_offset": kept[-1].last_offset if kept else None,
            "min_timestamp": min(segment.min_timestamp for segment in kept) if kept else None,
            "max_timestamp": max(segment.max_timestamp for segment in kept) if kept else None,
        }
    )
