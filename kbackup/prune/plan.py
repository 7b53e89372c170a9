"""What a prune would do: per backup, what stays and what goes, before anything is removed.

The plan is read from the store as it is now: the backups through their retention generations,
their leases, and every object below them. Executing it (kbackup.prune.execute) first commits a
new retention generation, then deletes what no manifest read through it lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kbackup import __version__
from kbackup.core.errors import BackupIntegrityError, NotFoundError, StorageError
from kbackup.core.logs import get_logger
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.cluster_metadata import METADATA_FOLDER
from kbackup.format.generations import (
    Lease,
    PartitionWindow,
    RetentionGeneration,
    leases_prefix,
    parse_lease,
    retention_prefix,
    utc_iso,
)
from kbackup.format.group_history import GROUP_HISTORY_FOLDER
from kbackup.format.layout import DATA_FOLDER, increment_of_manifest, manifests_prefix, object_key
from kbackup.prune.policy import SegmentAge, kept_backups, window_cuts
from kbackup.prune.settings import RetentionSettings
from kbackup.storage import ObjectInfo, Storage

log = get_logger("prune")


@dataclass(frozen=True)
class WindowChange:
    """One partition whose restorable window starts later after the prune."""

    topic: str
    partition: int
    start_before: int
    start_after: int
    end_offset: int
    records_removed: int
    #: The oldest record time (ms) the window keeps, None when nothing of the partition is kept.
    first_time_after_ms: int | None


@dataclass(frozen=True)
class GroupGap:
    """A snapshotted group whose committed offset falls below the new window: it would restore with
    a recovery gap (the offsets in between are no longer in the backup)."""

    group_id: str
    topic: str
    partition: int
    committed_offset: int
    window_start: int


@dataclass
class BackupPlan:
    backup_id: str
    #: keep (only garbage goes), trim (the window moves), remove (the whole backup goes),
    #: finish-removal (a removal a killed prune began), or skip (damaged: not touched).
    action: str
    reasons: list[str] = field(default_factory=list)
    last_committed_at: str | None = None
    #: Live leases: runs writing to this backup now.
    leased_by: list[str] = field(default_factory=list)
    increments_before: int = 0
    increments_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    new_generation: RetentionGeneration | None = None
    windows: list[WindowChange] = field(default_factory=list)
    group_gaps: list[GroupGap] = field(default_factory=list)
    #: Full keys (below the storage root) to delete, in the order they go.
    segments: list[str] = field(default_factory=list)
    segment_bytes: int = 0
    #: The cluster-metadata and group-history files the manifests that go name (none a kept
    #: manifest names).
    metadata_files: list[str] = field(default_factory=list)
    metadata_bytes: int = 0
    manifests: list[str] = field(default_factory=list)
    generations: list[str] = field(default_factory=list)
    #: Garbage under data/, metadata/ and groups/: objects no manifest read through the new generation names.
    orphans: list[str] = field(default_factory=list)
    orphan_bytes: int = 0
    #: Unreferenced objects kept for now: younger than the grace period, or a live run's.
    orphans_kept: int = 0
    leases: list[str] = field(default_factory=list)
    #: remove / finish-removal: every object of the backup but its retention folder, then that.
    objects: list[str] = field(default_factory=list)
    object_bytes: int = 0
    retention_objects: list[str] = field(default_factory=list)
    #: Why the policy may not run without --force (it would remove everything inside the backup).
    needs_force: str | None = None

    @property
    def deletes(self) -> int:
        return sum(
            len(keys)
            for keys in (
                self.segments,
                self.metadata_files,
                self.manifests,
                self.generations,
                self.orphans,
                self.leases,
                self.objects,
                self.retention_objects,
            )
        )

    @property
    def bytes_removed(self) -> int:
        return self.segment_bytes + self.metadata_bytes + self.orphan_bytes + self.object_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "backup_id": self.backup_id,
            "action": self.action,
            "reasons": self.reasons,
            "last_committed_at": self.last_committed_at,
            "leased_by": self.leased_by,
            "increments_before": self.increments_before,
            "increments_after": self.increments_after,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "bytes_removed": self.bytes_removed,
            "new_generation": None if self.new_generation is None else self.new_generation.generation,
            "windows": [vars(window) for window in self.windows],
            "group_gaps": [vars(gap) for gap in self.group_gaps],
            "segments_removed": len(self.segments),
            "metadata_files_removed": len(self.metadata_files),
            "manifests_removed": len(self.manifests),
            "generations_removed": len(self.generations),
            "orphans_removed": len(self.orphans),
            "orphans_kept": self.orphans_kept,
            "leases_removed": len(self.leases),
            "objects_removed": len(self.objects) + len(self.retention_objects),
            "needs_force": self.needs_force,
        }


@dataclass
class PrunePlan:
    storage_url: str
    created_at: str
    policy: dict[str, str | int | float | None]
    backups: list[BackupPlan]

    @property
    def bytes_removed(self) -> int:
        return sum(item.bytes_removed for item in self.backups)

    @property
    def deletes(self) -> int:
        return sum(item.deletes for item in self.backups)

    def to_dict(self) -> dict[str, Any]:
        return {
            "storage": self.storage_url,
            "created_at": self.created_at,
            "policy": self.policy,
            "bytes_removed": self.bytes_removed,
            "objects_removed": self.deletes,
            "backups": [item.to_dict() for item in self.backups],
        }


def plan_prune(
    storage: Storage,
    policy: RetentionSettings,
    backup_ids: list[str] | None = None,
    *,
    now: datetime | None = None,
) -> PrunePlan:
    """The plan of ``policy`` over ``backup_ids`` (None: every backup in the store).

    Raises ``NotFoundError`` for a named backup that is not there. A damaged backup met while
    planning every backup is skipped (and said so); a named one raises its error.
    """
    moment = now or datetime.now(UTC)
    catalog = BackupCatalog(storage)
    stored = catalog.stored_ids()
    if backup_ids is None:
        selected, named = stored, False
    else:
        missing = [backup_id for backup_id in backup_ids if backup_id not in stored]
        if missing:
            raise NotFoundError(
                f"no backup {missing[0]!r} in {storage.url}",
                hint="'kafka-backup list --path URL' shows the backups there",
            )
        selected, named = backup_ids, True
    plans: dict[str, BackupPlan] = {}
    loaded: dict[str, Backup] = {}
    for backup_id in selected:
        generation = catalog.retention(backup_id)
        if generation is not None and generation.deleted:
            plans[backup_id] = _removal(storage, catalog, backup_id, "finish-removal", None, moment)
            plans[backup_id].reasons.append(f"removed by retention generation {generation.generation}")
            continue
        try:
            loaded[backup_id] = catalog.load(backup_id)
        except (BackupIntegrityError, NotFoundError) as exc:
            if named:
                raise
            plans[backup_id] = BackupPlan(backup_id, "skip", reasons=[f"not read: {exc.message}"])
    times = {backup_id: _time(backup.latest.finished_at) for backup_id, backup in loaded.items()}
    kept = kept_backups(times, policy)
    for backup_id, backup in loaded.items():
        leases, expired = _leases(storage, backup_id, moment)
        if backup_id not in kept and not leases:
            plan = _removal(storage, catalog, backup_id, "remove", backup, moment)
        else:
            plan = _inside(storage, catalog, backup, policy, moment, leases)
            plan.reasons = kept.get(backup_id) or ["in use by a running backup (a live lease)"]
        plan.leased_by = [
            f"{lease.holder} (run {lease.run_id}, until {utc_iso(lease.expires_at)})" for lease in leases
        ]
        plan.leases = expired
        plan.last_committed_at = backup.latest.finished_at
        plans[backup_id] = plan
    return PrunePlan(
        storage_url=storage.url,
        created_at=utc_iso(moment.timestamp()),
        policy=policy.describe(),
        backups=[plans[backup_id] for backup_id in selected],
    )


def _time(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


def _leases(storage: Storage, backup_id: str, now: datetime) -> tuple[list[Lease], list[str]]:
    """The live leases of a backup, and the keys of the expired (or unreadable) ones."""
    live: list[Lease] = []
    expired: list[str] = []
    for info in storage.list(leases_prefix(backup_id)):
        try:
            lease = parse_lease(storage.get_bytes(info.key), info.key)
        except BackupIntegrityError:
            expired.append(info.key)  # not a lease any run could renew: garbage
            continue
        except StorageError:
            continue  # released between the listing and the read
        if lease.live(now.timestamp()):
            live.append(lease)
        else:
            expired.append(info.key)
    return live, expired


def _removal(
    storage: Storage,
    catalog: BackupCatalog,
    backup_id: str,
    action: str,
    backup: Backup | None,
    now: datetime,
) -> BackupPlan:
    plan = BackupPlan(backup_id, action)
    retention = retention_prefix(backup_id)
    for info in storage.list(f"{backup_id}/"):
        if info.key.startswith(retention):
            plan.retention_objects.append(info.key)
        else:
            plan.objects.append(info.key)
            plan.object_bytes += info.size
    plan.bytes_before = plan.object_bytes
    if backup is not None:
        plan.increments_before = len(backup.manifests)
        current = catalog.retention(backup_id)
        number = (current.generation if current is not None else 0) + 1
        plan.new_generation = RetentionGeneration(
            backup_id=backup_id,
            generation=number,
            created_at=utc_iso(now.timestamp()),
            tool_version=__version__,
            deleted=True,
        )
    return plan


def _segment_ages(backup: Backup) -> list[SegmentAge]:
    ages = []
    for manifest in backup.manifests:
        committed_ms = int(_time(manifest.finished_at).timestamp() * 1000)
        for segment in manifest.segments:
            newest = segment.max_timestamp if segment.max_timestamp >= 0 else committed_ms
            ages.append(
                SegmentAge(
                    segment.topic,
                    segment.partition,
                    segment.first_offset,
                    segment.last_offset,
                    segment.size_bytes,
                    newest,
                )
            )
    return ages


def _inside(
    storage: Storage,
    catalog: BackupCatalog,
    backup: Backup,
    policy: RetentionSettings,
    now: datetime,
    leases: list[Lease],
) -> BackupPlan:
    """A backup that stays: the window its rules inside backups move, and its garbage."""
    backup_id = backup.backup_id
    plan = BackupPlan(backup_id, "keep")
    coverage = backup.coverage()
    plan.increments_before = len(backup.manifests)
    plan.bytes_before = backup.total_bytes()
    cuts = window_cuts(_segment_ages(backup), policy, now) if policy.inside_backups else {}
    current = backup.retention
    starts = current.window_starts() if current is not None else {}
    removed: set[str] = set()
    for key, count in sorted(cuts.items()):
        item = coverage[key]
        going = item.segments[:count]
        staying = item.segments[count:]
        start_after = going[-1].last_offset + 1
        plan.windows.append(
            WindowChange(
                topic=key[0],
                partition=key[1],
                start_before=item.start_offset,
                start_after=start_after,
                end_offset=item.end_offset,
                records_removed=sum(segment.record_count for segment in going),
                first_time_after_ms=min((s.min_timestamp for s in staying), default=None),
            )
        )
        starts[key] = max(starts.get(key, 0), start_after)
        for segment in going:
            removed.add(segment.key)
            plan.segments.append(object_key(backup_id, segment.key))
            plan.segment_bytes += segment.size_bytes
    held = sum(len(manifest.segments) for manifest in backup.manifests)
    if held and len(removed) == held and not policy.force:
        plan.needs_force = (
            f"the policy would remove every segment of backup {backup_id} ({held}); "
            "give --force (retention.force) to allow it"
        )
    # The first increment still read: the oldest with a kept segment, or the newest group
    # snapshot's, or the newest increment (the chain continues from it).
    needed = [backup.latest.increment]
    needed += [m.increment for m in backup.manifests if m.consumer_groups is not None][-1:]
    needed += [m.increment for m in backup.manifests if any(s.key not in removed for s in m.segments)]
    first_after = min(needed)
    first_before = current.first_increment if current is not None else 0
    by_increment = {manifest.increment: manifest for manifest in backup.manifests}
    for info in storage.list(manifests_prefix(backup_id)):
        increment = increment_of_manifest(info.key)
        if increment is not None and increment < first_after:
            plan.manifests.append(info.key)
    if cuts or first_after > first_before:
        plan.action = "trim"
        plan.new_generation = RetentionGeneration(
            backup_id=backup_id,
            generation=(current.generation if current is not None else 0) + 1,
            created_at=utc_iso(now.timestamp()),
            tool_version=__version__,
            first_increment=first_after,
            first_previous_run_id=(
                by_increment[first_after - 1].run_id
                if first_after - 1 in by_increment
                else (current.first_previous_run_id if current is not None else None)
            ),
            windows=[
                PartitionWindow(topic=t, partition=p, start_offset=o) for (t, p), o in sorted(starts.items())
            ],
            policy=policy.describe(),
        )
    newest_generation = (
        plan.new_generation.generation if plan.new_generation else (current.generation if current else 0)
    )
    for generation, generation_key in catalog.retention_keys(backup_id):
        if generation < newest_generation:
            plan.generations.append(generation_key)
    plan.increments_after = sum(1 for manifest in backup.manifests if manifest.increment >= first_after)
    plan.bytes_after = plan.bytes_before - plan.segment_bytes
    _group_gaps(plan, backup, starts)
    _orphans(
        plan, storage, backup, removed, policy.orphan_grace_secs, now, live={lease.run_id for lease in leases}
    )
    # An increment's files besides its segments, named alike (<increment>-<run id>-<token>.json).
    metadata_objects = [
        info
        for folder in (METADATA_FOLDER, GROUP_HISTORY_FOLDER)
        for info in storage.list(f"{backup_id}/{folder}/")
    ]
    named = _dropped_metadata(plan, backup, first_after, metadata_objects)
    _metadata_orphans(plan, backup, named, metadata_objects, policy.orphan_grace_secs, now, live=bool(leases))
    return plan


def _group_gaps(plan: BackupPlan, backup: Backup, starts: dict[TopicPartitionKey, int]) -> None:
    snapshot = backup.consumer_groups
    if snapshot is None:
        return
    for group in snapshot.groups:
        for item in group.offsets:
            start = starts.get((item.topic, item.partition))
            if start is not None and item.offset < start:
                plan.group_gaps.append(
                    GroupGap(group.group_id, item.topic, item.partition, item.offset, start)
                )


def _orphans(
    plan: BackupPlan,
    storage: Storage,
    backup: Backup,
    removed: set[str],
    grace_secs: float,
    now: datetime,
    *,
    live: set[str],
) -> None:
    """Objects under data/ that no manifest read through the new generation lists.

    One whose first offset lies below its partition's committed end can never be listed by any
    backup run (a run writes from the committed end up): it goes now, unless its name carries the
    run id of a live lease (an erase's rewritten segment, written before the manifest revision that
    will list it). One at or above could be a running backup's next segment: it goes only when no
    lease is live and it is older than the grace period.
    """
    listed = {segment.key for manifest in backup.manifests for segment in manifest.segments} - removed
    ends = {key: item.end_offset for key, item in backup.coverage().items()}
    prefix = f"{backup.backup_id}/"
    for info in storage.list(f"{prefix}{DATA_FOLDER}/"):
        relative = info.key[len(prefix) :]
        if relative in listed or relative in removed:
            continue
        if (_below_committed_end(relative, ends) and _run_of(relative) not in live) or (
            not live and _older(info, grace_secs, now)
        ):
            plan.orphans.append(info.key)
            plan.orphan_bytes += info.size
        else:
            plan.orphans_kept += 1


def _dropped_metadata(
    plan: BackupPlan, backup: Backup, first_after: int, stored: list[ObjectInfo]
) -> set[str]:
    """The cluster-metadata and group-history files of the increments below ``first_after`` go with
    their manifests; returns the keys the manifests read now name (none of which is an orphan)."""
    kept: dict[str, bool] = {}
    for manifest in backup.manifests:
        for ref in (manifest.cluster_metadata, manifest.group_history):
            if ref is not None:
                key = object_key(backup.backup_id, ref.key)
                # Kept if any manifest that stays names it (two never should; a kept one's never goes).
                kept[key] = kept.get(key, False) or manifest.increment >= first_after
    for info in stored:
        if kept.get(info.key) is False:
            plan.metadata_files.append(info.key)
            plan.metadata_bytes += info.size
    return set(kept)


def _metadata_orphans(
    plan: BackupPlan,
    backup: Backup,
    named: set[str],
    stored: list[ObjectInfo],
    grace_secs: float,
    now: datetime,
    *,
    live: bool,
) -> None:
    """Files under metadata/ and groups/ that no manifest read now names.

    A run writes the file of the increment it commits before that increment's manifest (each
    create-if-absent): a file of an increment at or below the newest committed one can never be
    named by a manifest to come, and goes now. One of a later increment could be a running
    backup's: it goes only when no lease is live and it is older than the grace period.
    """
    latest = backup.latest.increment
    for info in stored:
        if info.key in named:
            continue
        increment = _metadata_increment(info.key)
        if (increment is not None and increment <= latest) or (not live and _older(info, grace_secs, now)):
            plan.orphans.append(info.key)
            plan.orphan_bytes += info.size
        else:
            plan.orphans_kept += 1


def _metadata_increment(key: str) -> int | None:
    """The increment a cluster-metadata or group-history file's name carries
    (``<8 digits>-<run id>-<token>.json``)."""
    number = key.rsplit("/", 1)[-1].split("-", 1)[0]
    return int(number) if len(number) == 8 and number.isdigit() else None


def _run_of(relative: str) -> str:
    """The run id in a segment's name (``<first offset>-<run id>.parquet``)."""
    return relative.rsplit("/", 1)[-1].removesuffix(".parquet").partition("-")[2]


def _below_committed_end(relative: str, ends: dict[TopicPartitionKey, int]) -> bool:
    parts = relative.split("/")
    if len(parts) != 4 or not parts[2].isdigit():
        return False
    first = parts[3].split("-", 1)[0]
    if len(first) != 20 or not first.isdigit():
        return False
    end = ends.get((parts[1], int(parts[2])))
    return end is not None and int(first) < end


def _older(info: ObjectInfo, grace_secs: float, now: datetime) -> bool:
    return info.modified is not None and now.timestamp() - info.modified >= grace_secs
