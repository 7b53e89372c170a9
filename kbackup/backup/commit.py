"""Committing an increment: what the copier holds becomes a manifest, written last.

The order is docs/format.md's crash ordering: the copier's ``take_increment`` waits for the
uploads of the increment's segments, ``commit_manifest`` checks every segment the manifest names
is stored whole and only then writes the manifest, so a crash at any point leaves the chain as it
was or with this increment, never a manifest naming a segment that is not there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kbackup import __version__
from kbackup.backup.chain import ChainState
from kbackup.backup.cluster_capture import MetadataCapture
from kbackup.backup.copier import Copier
from kbackup.backup.group_history import GroupHistoryRecorder, store_readings
from kbackup.backup.metrics import BackupMetrics
from kbackup.backup.settings import BackupSettings
from kbackup.backup.summary import BackupSummary, CommittedIncrement
from kbackup.backup.units import SlicedCopier
from kbackup.core.errors import KBackupError
from kbackup.core.faults import crash_point
from kbackup.core.logs import get_logger
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import commit_manifest
from kbackup.format.cluster_metadata import ClusterMetadata
from kbackup.format.encryption import BackupKeys
from kbackup.format.manifest import (
    ConsumerGroupsSnapshot,
    Manifest,
    PartitionEntry,
    SegmentEntry,
    SourceInfo,
    TopicEntry,
    utc_now_iso,
)
from kbackup.storage import Storage

log = get_logger("backup")


def manifest_settings(settings: BackupSettings, *, follow: bool) -> dict[str, str | int | bool | None]:
    """How an increment was taken, as its manifest records it (docs/format.md, ``settings``)."""
    return {
        "mode": "follow" if follow else "snapshot",
        "isolation_level": settings.isolation_level,
        "compression": settings.compression,
        "compression_level": settings.compression_level,
        "include_offset_headers": settings.include_offset_headers,
        "segment_max_bytes": settings.segment_max_bytes,
        "segment_max_records": settings.segment_max_records,
    }


def uncovered_group_offsets(
    snapshot: ConsumerGroupsSnapshot, ends: dict[TopicPartitionKey, int]
) -> list[str]:
    """Group offsets above the end of what the backup holds for their partition."""
    problems = []
    for group in snapshot.groups:
        for item in group.offsets:
            end = ends.get((item.topic, item.partition))
            if end is None or item.offset > end:
                held = "nothing" if end is None else f"up to {end}"
                problems.append(
                    f"group {group.group_id} at {item.topic}/{item.partition} offset {item.offset} "
                    f"(backup holds {held})"
                )
    return problems


@dataclass
class Committer:
    """Turns what the copier holds into a committed increment (manifest written last).

    Everything it needs is given: the chain it extends, the summary it reports to, what each
    manifest records of the source and the settings, and the hooks around a commit.
    """

    storage: Storage
    copier: Copier | SlicedCopier
    state: ChainState
    summary: BackupSummary
    #: The source as each manifest names it.
    source: SourceInfo
    #: How the increments are taken, as each manifest records it (``manifest_settings``).
    recorded_settings: dict[str, str | int | bool | None]
    #: A follow run: a stop ends it as asked, not "stopped early" (``BackupSummary.stopped_early``).
    follow: bool
    #: An encrypted backup's keys: its manifests are sealed.
    keys: BackupKeys | None
    metrics: BackupMetrics
    #: Reads the groups' committed offsets now; None: the increments have no group snapshot.
    group_snapshot: Callable[[list[str]], ConsumerGroupsSnapshot] | None
    #: Called after each committed increment (a retention policy applied there, by the caller).
    after_commit: Callable[[Storage], None] | None
    #: Reads the cluster's metadata at each checkpoint and stores it before the manifest of the
    #: increment that commits; None: the increments have none.
    cluster_metadata: MetadataCapture | None = None
    #: The readings of the groups between increments (``backup.group_snapshot_interval``); None:
    #: the increments have no group history.
    group_history: GroupHistoryRecorder | None = None
    #: When the open increment started (its manifest's ``started_at``).
    started_at: str = field(default_factory=utc_now_iso, init=False)
    #: When committing the open increment began: its segments' last uploads, then the manifest.
    commit_started: float = field(default_factory=time.monotonic, init=False)

    def full(self, groups: ConsumerGroupsSnapshot | None, topics: list[TopicEntry]) -> None:
        self.commit_started = time.monotonic()
        entries, segments = self.copier.take_increment()
        groups = self._covered(entries, groups, partial=False)
        metadata = self._read_metadata()
        if self.state.nothing_new(entries, segments, groups, topics) and not self._is_news(metadata):
            self._skip(entries)  # the readings of the groups since wait for the next increment
            return
        self._commit(entries, segments, groups, topics, metadata, partial=False)

    def _read_metadata(self) -> ClusterMetadata | None:
        if self.cluster_metadata is None:
            return None
        return self.cluster_metadata.read(self.summary.backup_id, self.state.increment, self.copier.run_id)

    def _is_news(self, metadata: ClusterMetadata | None) -> bool:
        """The cluster's ACLs, SCRAM users or broker configs changed since the latest increment."""
        return (
            metadata is not None
            and self.cluster_metadata is not None
            and self.cluster_metadata.is_news(metadata)
        )

    def _skip(self, entries: list[PartitionEntry]) -> None:
        """An increment with nothing new is not committed (a cron every few minutes would pile
        them up); the copier moves on as after a commit, the chain stays where it is."""
        latest = self.state.increment - 1
        self.copier.after_commit(entries)
        self.summary.nothing_new_since = latest
        log.info(
            "nothing new since increment %d of %s: no increment committed",
            latest,
            self.summary.backup_id,
            extra={"backup_id": self.summary.backup_id, "increment": latest},
        )

    def partial(
        self, groups: ConsumerGroupsSnapshot | None, topics: list[TopicEntry], *, take_fresh_snapshot: bool
    ) -> None:
        """Stop requested: commit what was read so far, if anything."""
        if take_fresh_snapshot and self.group_snapshot is not None:
            try:
                groups = self.group_snapshot([entry.name for entry in topics])
            except KBackupError as exc:
                log.warning("no group snapshot in the last increment: %s", exc.message)
                groups = None
        self.commit_started = time.monotonic()
        entries, segments = self.copier.take_increment(partial=True)
        groups = self._covered(entries, groups, partial=True)
        nothing_read = not segments and all(entry.end_offset == entry.start_offset for entry in entries)
        if nothing_read and self.state.increment == 0:
            log.info(
                "nothing read before the stop; no increment committed",
                extra={"backup_id": self.summary.backup_id},
            )
        else:
            metadata = self._read_metadata()
            if self.state.nothing_new(entries, segments, groups, topics) and not self._is_news(metadata):
                self._skip(entries)
            else:
                self._commit(entries, segments, groups, topics, metadata, partial=True)
        if not self.follow:
            self.summary.stopped_early = True

    def after_failure(self, error: KBackupError, groups: ConsumerGroupsSnapshot | None) -> None:
        topics = [self.state.topics[name] for name in self.summary.topics if name in self.state.topics]
        # The source just failed: its metadata is not asked for (each request would wait out its
        # timeout); this increment has none, the next run's has.
        self.cluster_metadata = None
        try:
            self.partial(groups, topics, take_fresh_snapshot=False)
        except Exception as exc:
            log.warning("could not commit what was read before the error: %s", exc)

    def _covered(
        self, entries: list[PartitionEntry], groups: ConsumerGroupsSnapshot | None, *, partial: bool
    ) -> ConsumerGroupsSnapshot | None:
        """The snapshot the increment of ``entries`` carries: None if it stopped short of the groups."""
        if groups is None:
            return None
        ends = {key: item.end_offset for key, item in self.state.coverage.items()}
        ends.update({(e.topic, e.partition): e.end_offset for e in entries})
        uncovered = uncovered_group_offsets(groups, ends)
        if uncovered and partial:
            # The run stopped before the data caught up with the groups: an older snapshot,
            # which the backup covers, stays the latest.
            log.warning(
                "increment %d has no group snapshot: %d committed offset(s) are beyond the data "
                "copied before the stop, e.g. %s",
                self.state.increment,
                len(uncovered),
                uncovered[0],
            )
            return None
        if uncovered:
            problem = (
                f"increment {self.state.increment}: {len(uncovered)} committed group offset(s) are beyond "
                f"the data it copied (a read_uncommitted consumer, or an offset set by hand?), e.g. "
                f"{uncovered[0]}; those groups restore with a recovery gap"
            )
            log.warning("%s", problem)
            self.summary.problems.append(problem)
        return groups

    def _commit(
        self,
        entries: list[PartitionEntry],
        segments: list[SegmentEntry],
        groups: ConsumerGroupsSnapshot | None,
        topics: list[TopicEntry],
        captured: ClusterMetadata | None,
        *,
        partial: bool,
    ) -> None:
        state = self.state
        metadata = (
            self.cluster_metadata.store(captured)
            if self.cluster_metadata is not None and captured is not None
            else None
        )
        readings = []
        history = None
        if self.group_history is not None:
            ends = {key: item.end_offset for key, item in state.coverage.items()}
            ends.update({(e.topic, e.partition): e.end_offset for e in entries})
            readings = self.group_history.for_increment(groups, ends, partial=partial)
            history = store_readings(
                self.storage,
                readings,
                backup_id=self.summary.backup_id,
                increment=state.increment,
                run_id=self.copier.run_id,
                interval_secs=self.group_history.interval_secs,
                keys=self.keys,
            )
        manifest = Manifest(
            backup_id=self.summary.backup_id,
            increment=state.increment,
            run_id=self.copier.run_id,
            previous_run_id=state.previous_run_id,
            tool_version=__version__,
            started_at=self.started_at,
            finished_at=utc_now_iso(),
            source=self.source,
            settings=self.recorded_settings,
            topics=sorted(topics, key=lambda entry: entry.name),
            partitions=entries,
            segments=sorted(segments, key=lambda s: (s.topic, s.partition, s.first_offset)),
            consumer_groups=groups,
            cluster_metadata=metadata,
            group_history=history,
        )
        key = commit_manifest(self.storage, manifest, self.keys)
        crash_point("backup:after-manifest")
        if self.group_history is not None:
            self.group_history.stored(readings)
        self.copier.after_commit(entries)
        state.committed(manifest)
        self.started_at = utc_now_iso()
        committed = CommittedIncrement(
            increment=manifest.increment,
            run_id=manifest.run_id,
            manifest_key=key,
            records=sum(entry.record_count for entry in entries),
            bytes=sum(segment.size_bytes for segment in manifest.segments),
            segments=len(manifest.segments),
            consumer_groups=len(groups.groups) if groups is not None else None,
            partial=partial,
            cluster_metadata=metadata.kinds() if metadata is not None else None,
            group_history_readings=len(readings) if self.group_history is not None else None,
        )
        self.summary.increments.append(committed)
        self.summary.nothing_new_since = None
        self.metrics.increment_committed(time.monotonic() - self.commit_started)
        if self.after_commit is not None:
            try:
                self.after_commit(self.storage)
            except KBackupError as exc:
                # The increment is committed; a retention that failed is tried again after the next.
                log.warning("retention after increment %d failed: %s", manifest.increment, exc.message)
        log.info(
            "committed increment %d of %s: %d records in %d segment(s)%s",
            committed.increment,
            manifest.backup_id,
            committed.records,
            committed.segments,
            " (stopped early)" if partial else "",
            extra={
                "backup_id": manifest.backup_id,
                "increment": committed.increment,
                "records": committed.records,
                "bytes": committed.bytes,
                "segments": committed.segments,
                "partial": partial,
            },
        )
