"""``list``, ``describe`` and ``validate``: what backups a storage holds, and whether they are sound.

Each function returns plain data (dicts and lists of JSON types) that the CLI
prints as a table or as JSON. Reading goes only through the format's reader
APIs (catalog, manifests, segment checks), as every other stage reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbackup.backup.erasure_inspect import check_erasure_records, erasure_rows, note_rows
from kbackup.core.errors import BackupIntegrityError, EncryptionKeyError
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import Backup, BackupCatalog, PartitionCoverage
from kbackup.format.cluster_metadata import METADATA_FOLDER, read_cluster_metadata
from kbackup.format.encryption import is_encrypted
from kbackup.format.erasure import erasures_prefix
from kbackup.format.group_history import GROUP_HISTORY_FOLDER, read_group_history
from kbackup.format.layout import DATA_FOLDER, object_key
from kbackup.format.manifest import (
    ClusterMetadataRef,
    ConsumerGroupsSnapshot,
    GroupHistoryRef,
    Manifest,
    PartitionEntry,
    SegmentEntry,
)
from kbackup.format.segments import check_segment_contents, segment_checksum_problem
from kbackup.storage import Storage

_SEGMENT_NAME = re.compile(r"^(\d{20})-[A-Za-z0-9._=+@,-]+\.parquet$")


def list_backups(storage: Storage) -> list[dict[str, Any]]:
    """One row per backup id: times, topics, records, bytes. A damaged backup is listed with its error."""
    catalog = BackupCatalog(storage)
    rows: list[dict[str, Any]] = []
    for backup_id in catalog.backup_ids():
        try:
            backup = catalog.load(backup_id)
        except BackupIntegrityError as exc:
            rows.append({"backup_id": backup_id, "error": exc.message})
            continue
        except EncryptionKeyError as exc:
            # Listed, not damaged: an encrypted backup without its key, or an unencrypted one
            # while a key is configured.
            rows.append(
                {"backup_id": backup_id, "encrypted": is_encrypted(storage, backup_id), "locked": exc.message}
            )
            continue
        coverage = backup.coverage()
        groups = backup.consumer_groups
        rows.append(
            {
                "backup_id": backup_id,
                "source_cluster": backup.source_cluster,
                "increments": len(backup.manifests),
                "first_started_at": backup.manifests[0].started_at,
                "last_finished_at": backup.latest.finished_at,
                "topics": sorted({topic for topic, _ in coverage}),
                "partitions": len(coverage),
                "records": backup.total_records(),
                "bytes": backup.total_bytes(),
                "segments": sum(len(m.segments) for m in backup.manifests),
                "consumer_groups": len(groups.groups) if groups is not None else None,
                # The restorable window after retention: its oldest record, and the prune that set it.
                "restorable_from_timestamp": min(
                    (
                        s.min_timestamp
                        for item in coverage.values()
                        for s in item.segments
                        if s.min_timestamp >= 0
                    ),
                    default=None,
                ),
                "retention_generation": backup.retention.generation if backup.retention else None,
                "encrypted": backup.keys is not None,
            }
        )
    return rows


def describe_backup(storage: Storage, backup_id: str) -> dict[str, Any]:
    """Everything a backup's manifests say: increments, topics, partition ranges, group snapshot."""
    backup = BackupCatalog(storage).load(backup_id)
    coverage = backup.coverage()
    groups_snapshot = backup.consumer_groups
    snapshot_increment = next(
        (m.increment for m in reversed(backup.manifests) if m.consumer_groups is not None), None
    )
    return {
        "backup_id": backup_id,
        "storage": storage.url,
        "source": backup.latest.source.model_dump(mode="json"),
        "records": backup.total_records(),
        "bytes": backup.total_bytes(),
        "increments": [increment_row(manifest) for manifest in backup.manifests],
        "topics": [topic.model_dump(mode="json") for _, topic in sorted(backup.topics.items())],
        "partitions": [partition_row(item) for _, item in sorted(coverage.items())],
        "retention": None
        if backup.retention is None
        else {
            "generation": backup.retention.generation,
            "created_at": backup.retention.created_at,
            "first_increment": backup.retention.first_increment,
            "policy": backup.retention.policy,
        },
        "consumer_groups": None
        if groups_snapshot is None
        else {
            "increment": snapshot_increment,
            "taken_at": groups_snapshot.taken_at,
            "groups": [group.model_dump(mode="json") for group in groups_snapshot.groups],
        },
        # What each erase request removed, in counts (docs/erasure.md); never a key or a hash.
        "erasures": erasure_rows(storage, backup),
    }


def increment_row(manifest: Manifest) -> dict[str, Any]:
    return {
        "increment": manifest.increment,
        "run_id": manifest.run_id,
        "started_at": manifest.started_at,
        "finished_at": manifest.finished_at,
        "mode": manifest.settings.get("mode"),
        "records": sum(entry.record_count for entry in manifest.partitions),
        "bytes": sum(segment.size_bytes for segment in manifest.segments),
        "segments": len(manifest.segments),
        "consumer_groups": None if manifest.consumer_groups is None else len(manifest.consumer_groups.groups),
        "cluster_metadata": None if manifest.cluster_metadata is None else manifest.cluster_metadata.kinds(),
        "group_history": None if manifest.group_history is None else manifest.group_history.readings,
        "revision": manifest.revision,
        "erasures": note_rows(manifest),
    }


def partition_row(item: PartitionCoverage) -> dict[str, Any]:
    segments = item.segments
    return {
        "topic": item.topic,
        "partition": item.partition,
        "start_offset": item.start_offset,
        "end_offset": item.end_offset,
        "log_start_offset": item.log_start_offset,
        "records": item.record_count,
        "first_offset": segments[0].first_offset if segments else None,
        "last_offset": segments[-1].last_offset if segments else None,
        "min_timestamp": min((s.min_timestamp for s in segments), default=None),
        "max_timestamp": max((s.max_timestamp for s in segments), default=None),
        "segments": len(segments),
        "bytes": sum(s.size_bytes for s in segments),
    }


@dataclass
class ValidationReport:
    backup_id: str
    deep: bool
    errors: list[str] = field(default_factory=list)
    #: Not damage: objects no manifest lists (left by a crashed run), offsets beyond the data.
    warnings: list[str] = field(default_factory=list)
    increments: int = 0
    segments_checked: int = 0
    #: Cluster-metadata files read in full and checked (``deep``).
    cluster_metadata_checked: int = 0
    #: Group-history files read in full and checked (``deep``).
    group_history_checked: int = 0
    #: Erasure records read (opened, in an encrypted backup) and checked against the revisions.
    erasure_records_checked: int = 0
    records: int = 0
    #: An encrypted backup (format version 2).
    encrypted: bool = False
    #: False: checked without the key (no record or manifest content was read).
    contents_checked: bool = True

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "backup_id": self.backup_id,
            "ok": self.ok,
            "deep": self.deep,
            "increments": self.increments,
            "segments_checked": self.segments_checked,
            "cluster_metadata_checked": self.cluster_metadata_checked,
            "group_history_checked": self.group_history_checked,
            "erasure_records_checked": self.erasure_records_checked,
            "records": self.records,
            "encrypted": self.encrypted,
            "contents_checked": self.contents_checked,
            "errors": self.errors,
            "warnings": self.warnings,
        }


def validate_backup(storage: Storage, backup_id: str, *, deep: bool = False) -> ValidationReport:
    """Check the manifests agree with each other and with the stored objects; ``deep`` reads every segment.

    An encrypted backup without a key configured (and without ``deep``, which needs the key to
    decrypt every record) gets what can be checked without it: the chain of manifests, every
    segment's presence, size and SHA-256 (of its ciphertext).

    Raises ``NotFoundError`` if there is no such backup; every damage found is in the report's errors.
    """
    report = ValidationReport(backup_id=backup_id, deep=deep)
    catalog = BackupCatalog(storage)
    try:
        backup = catalog.load(backup_id)
    except BackupIntegrityError as exc:
        report.errors.append(exc.message)
        return report
    except EncryptionKeyError as exc:
        if deep or storage.key_encryption_key is not None or not is_encrypted(storage, backup_id):
            if deep and storage.key_encryption_key is None:
                exc.hint = (
                    "--deep decrypts every record and needs the key (storage.encryption or "
                    "--encryption-key); without --deep, validate checks presence, sizes and checksums"
                )
            raise
        return validate_without_key(storage, backup_id, report)
    report.increments = len(backup.manifests)
    report.records = backup.total_records()
    report.encrypted = backup.keys is not None
    check_manifests(backup, report)
    errors, warnings, report.erasure_records_checked = check_erasure_records(storage, backup)
    report.errors += errors
    report.warnings += warnings
    listed, unsound = check_objects(storage, backup, report)
    metadata_listed = check_metadata_objects(storage, backup, report, unsound)
    find_orphans(storage, backup_id, DATA_FOLDER, listed, report)
    find_orphans(storage, backup_id, METADATA_FOLDER, metadata_listed, report)
    find_orphans(storage, backup_id, GROUP_HISTORY_FOLDER, metadata_listed, report)
    if deep:
        for manifest in backup.manifests:
            for segment in manifest.segments:
                if object_key(backup_id, segment.key) in unsound:
                    continue  # already named as missing or of the wrong size: one problem, one line
                report.errors.extend(
                    check_segment_contents(
                        storage, backup_id, segment, backup.source_cluster, keys=backup.keys
                    )
                )
                report.segments_checked += 1
        check_metadata_contents(storage, backup, report, unsound)
    return report


def validate_without_key(storage: Storage, backup_id: str, report: ValidationReport) -> ValidationReport:
    """An encrypted backup's checks that need no key: presence, size and SHA-256 of each segment."""
    report.encrypted = True
    report.contents_checked = False
    try:
        manifests = BackupCatalog(storage).load_sealed(backup_id)
    except BackupIntegrityError as exc:
        report.errors.append(exc.message)
        return report
    report.increments = len(manifests)
    report.records = sum(segment.record_count for manifest in manifests for segment in manifest.segments)
    stored = {info.key: info.size for info in storage.list(f"{backup_id}/{DATA_FOLDER}/")}
    listed: set[str] = set()
    for manifest in manifests:
        name = f"increment {manifest.increment}"
        for segment in manifest.segments:
            check_segment_entry(name, segment, report)
            key = object_key(backup_id, segment.key)
            listed.add(key)
            problem = size_problem(f"segment {key}", stored.get(key), manifest.increment, segment.size_bytes)
            if problem is not None:
                report.errors.append(problem)
            else:
                problem = segment_checksum_problem(storage, key, segment)
                if problem is not None:
                    report.errors.append(problem)
                report.segments_checked += 1
    find_orphans(storage, backup_id, DATA_FOLDER, listed, report)
    sealed_erasures = sum(1 for _ in storage.list(erasures_prefix(backup_id)))
    report.warnings.append(
        "encrypted backup checked without its key: presence, sizes and SHA-256 of the segments only; "
        "records, offsets, group snapshots and the cluster-metadata files (which only the sealed "
        "manifests name) need the key (validate --deep with storage.encryption)"
        + (
            f"; {sealed_erasures} erasure record(s) not checked (sealed: they open with the key)"
            if sealed_erasures
            else ""
        )
    )
    return report


def check_manifests(backup: Backup, report: ValidationReport) -> None:
    """Each increment's ranges, segments and snapshot against its own entries and the chain before it."""
    ends: dict[TopicPartitionKey, int] = {}
    for manifest in backup.manifests:
        name = f"increment {manifest.increment}"
        if manifest.backup_id != backup.backup_id:
            report.errors.append(f"{name}: manifest names backup {manifest.backup_id!r}")
        by_partition: dict[TopicPartitionKey, list[SegmentEntry]] = {}
        for segment in manifest.segments:
            by_partition.setdefault((segment.topic, segment.partition), []).append(segment)
            check_segment_entry(name, segment, report)
        entries = {(e.topic, e.partition): e for e in manifest.partitions}
        for key in sorted(set(by_partition) - set(entries)):
            report.errors.append(f"{name}: segments of {key[0]}/{key[1]}, which the increment does not list")
        for key, entry in sorted(entries.items()):
            previous_end = ends.get(key)
            segments = sorted(by_partition.get(key, []), key=lambda s: s.first_offset)
            check_partition_entry(f"{name}, {key[0]}/{key[1]}", entry, segments, previous_end, report)
            ends[key] = max(entry.end_offset, previous_end or 0)
        if manifest.consumer_groups is not None:
            check_group_offsets(name, manifest.consumer_groups, ends, report)


def check_partition_entry(
    where: str,
    entry: PartitionEntry,
    segments: list[SegmentEntry],
    previous_end: int | None,
    report: ValidationReport,
) -> None:
    """One partition of an increment: its range, where the previous increment ended, and its
    segments (``segments``, sorted by first offset) against the range and each other."""
    if entry.end_offset < entry.start_offset:
        report.errors.append(f"{where}: end offset {entry.end_offset} below start {entry.start_offset}")
    if previous_end is not None and entry.start_offset != previous_end:
        report.errors.append(
            f"{where}: starts at {entry.start_offset}, "
            f"the previous increment ended at {previous_end} "
            f"({'records missing' if entry.start_offset > previous_end else 'ranges overlap'})"
        )
    count = sum(s.record_count for s in segments)
    if count != entry.record_count:
        report.errors.append(f"{where}: {entry.record_count} records, its segments hold {count}")
    if count > entry.end_offset - entry.start_offset:
        report.errors.append(
            f"{where}: {count} records cannot fit offsets {entry.start_offset}..{entry.end_offset}"
        )
    previous_last = entry.start_offset - 1
    for segment in segments:
        if segment.first_offset <= previous_last:
            report.errors.append(
                f"{where}: segment {segment.key} starts at {segment.first_offset}, "
                f"overlapping offsets up to {previous_last}"
            )
        if segment.last_offset >= entry.end_offset:
            report.errors.append(
                f"{where}: segment {segment.key} reaches offset {segment.last_offset}, "
                f"past the increment's end {entry.end_offset}"
            )
        previous_last = segment.last_offset
    if segments and (entry.first_offset, entry.last_offset) != (
        segments[0].first_offset,
        segments[-1].last_offset,
    ):
        report.errors.append(
            f"{where}: offsets {entry.first_offset}..{entry.last_offset}, its segments hold "
            f"{segments[0].first_offset}..{segments[-1].last_offset}"
        )


def check_group_offsets(
    name: str, snapshot: ConsumerGroupsSnapshot, ends: dict[TopicPartitionKey, int], report: ValidationReport
) -> None:
    """A warning for each committed group offset beyond what the backup holds of its partition."""
    for group in snapshot.groups:
        for item in group.offsets:
            end = ends.get((item.topic, item.partition))
            if end is None or item.offset > end:
                report.warnings.append(
                    f"{name}: group {group.group_id} committed {item.topic}/{item.partition} "
                    f"offset {item.offset}, beyond the backup's end "
                    f"({'none' if end is None else end}) for it"
                )


def check_segment_entry(name: str, segment: SegmentEntry, report: ValidationReport) -> None:
    parts = segment.key.split("/")
    match = _SEGMENT_NAME.match(parts[-1]) if len(parts) == 4 else None
    if (
        match is None
        or parts[0] != DATA_FOLDER
        or parts[1] != segment.topic
        or parts[2] != str(segment.partition)
        or int(match.group(1)) != segment.first_offset
    ):
        report.errors.append(
            f"{name}: segment key {segment.key} does not match its topic, partition or offset"
        )
    if segment.last_offset < segment.first_offset or segment.record_count < 1:
        report.errors.append(f"{name}: segment {segment.key} has an empty or inverted offset range")
    elif segment.record_count > segment.last_offset - segment.first_offset + 1:
        report.errors.append(
            f"{name}: segment {segment.key} claims {segment.record_count} records in "
            f"offsets {segment.first_offset}..{segment.last_offset}"
        )
    if not re.fullmatch(r"[0-9a-f]{64}", segment.sha256):
        report.errors.append(f"{name}: segment {segment.key} has a malformed sha256")


def check_objects(storage: Storage, backup: Backup, report: ValidationReport) -> tuple[set[str], set[str]]:
    """Every listed segment is stored with its size; returns the listed keys and those that are not."""
    stored = {info.key: info.size for info in storage.list(f"{backup.backup_id}/{DATA_FOLDER}/")}
    listed = set()
    unsound = set()
    for manifest in backup.manifests:
        for segment in manifest.segments:
            key = object_key(backup.backup_id, segment.key)
            listed.add(key)
            problem = size_problem(f"segment {key}", stored.get(key), manifest.increment, segment.size_bytes)
            if problem is not None:
                report.errors.append(problem)
                unsound.add(key)
    return listed, unsound


def size_problem(what: str, size: int | None, increment: int, expected: int) -> str | None:
    """The line for an object missing (``size`` None) or of another size than its manifest says."""
    if size is None:
        return f"{what} (increment {increment}) is missing"
    if size != expected:
        return f"{what} has {size} bytes, increment {increment} says {expected}"
    return None


def check_metadata_objects(
    storage: Storage, backup: Backup, report: ValidationReport, unsound: set[str]
) -> set[str]:
    """Every cluster-metadata and group-history file a manifest names is stored with its size,
    under the name of its increment and run; returns the keys named (those missing or of the
    wrong size join ``unsound``)."""
    named = set()
    kinds: tuple[tuple[str, str, Callable[[Manifest], ClusterMetadataRef | GroupHistoryRef | None]], ...] = (
        (METADATA_FOLDER, "cluster metadata", lambda manifest: manifest.cluster_metadata),
        (GROUP_HISTORY_FOLDER, "group history", lambda manifest: manifest.group_history),
    )
    for folder, what, ref_of in kinds:
        stored = {info.key: info.size for info in storage.list(f"{backup.backup_id}/{folder}/")}
        for manifest in backup.manifests:
            ref = ref_of(manifest)
            if ref is None:
                continue
            if not ref.key.startswith(f"{folder}/{manifest.increment:08d}-{manifest.run_id}-"):
                report.errors.append(
                    f"increment {manifest.increment}: {what} key {ref.key} does not match its "
                    "increment or run"
                )
            key = object_key(backup.backup_id, ref.key)
            named.add(key)
            problem = size_problem(f"{what} {key}", stored.get(key), manifest.increment, ref.size_bytes)
            if problem is not None:
                report.errors.append(problem)
                unsound.add(key)
    return named


def check_metadata_contents(
    storage: Storage, backup: Backup, report: ValidationReport, unsound: set[str]
) -> None:
    """Each cluster-metadata and group-history file read in full: its SHA-256, its identity, and
    in an encrypted backup its authentication (a file sealed under another key or increment fails)."""
    for manifest in backup.manifests:
        for ref, read in (
            (manifest.cluster_metadata, read_cluster_metadata),
            (manifest.group_history, read_group_history),
        ):
            if ref is None or object_key(backup.backup_id, ref.key) in unsound:
                continue  # none, or already named as missing or of the wrong size
            try:
                read(storage, manifest, backup.keys)
            except (BackupIntegrityError, EncryptionKeyError) as exc:
                # EncryptionKeyError: a sealed file in a backup that is not encrypted (put there).
                report.errors.append(exc.message)
            if ref is manifest.group_history:
                report.group_history_checked += 1
            else:
                report.cluster_metadata_checked += 1


def find_orphans(
    storage: Storage, backup_id: str, folder: str, listed: set[str], report: ValidationReport
) -> None:
    """Objects under ``folder`` (data/, metadata/) that no manifest names: left by a run that did
    not commit. Harmless."""
    orphans = [info for info in storage.list(f"{backup_id}/{folder}/") if info.key not in listed]
    if orphans:
        size = sum(info.size for info in orphans)
        shown = ", ".join(info.key for info in orphans[:3]) + (" ..." if len(orphans) > 3 else "")
        report.warnings.append(
            f"{len(orphans)} object(s) ({size} bytes) under {backup_id}/{folder}/ are in no manifest "
            f"(left by a run that did not commit; readers ignore them): {shown}"
        )
