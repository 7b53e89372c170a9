"""One run of ``kafka-backup backup``: increments of a backup, in the order docs/format.md prescribes.

1. Read the backup's existing manifests; refuse another source cluster.
2. Snapshot the consumer groups' committed offsets.
3. Read the end offsets to copy up to (the last stable offset under read_committed).
4. Copy into segments; 5. check they are stored; 6. write the manifest last.

A snapshot run makes one increment and exits. A follow run makes one, then
keeps reading and commits another every ``checkpoint_interval_secs`` (each
with a fresh group snapshot taken before its end offsets are read) until
it is asked to stop; then it commits what it has read.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kbackup import __version__
from kbackup.backup.copier import Copier
from kbackup.backup.lease import LeaseKeeper
from kbackup.backup.plan import (
    check_missing_topics,
    check_same_source,
    check_topic_identity,
    plan_partitions,
    resolve_source_cluster_id,
    select_topics,
)
from kbackup.backup.settings import BackupSettings, SourceSettings
from kbackup.backup.source import SourceCluster
from kbackup.backup.spark_engine import CopyTask, SparkCopier
from kbackup.core.config import StorageSettings
from kbackup.core.errors import (
    ConfigError,
    KafkaOperationError,
    KafkaUnreachableError,
    KBackupError,
    NotFoundError,
    PreconditionError,
)
from kbackup.core.faults import crash_point
from kbackup.core.gc_tuning import few_collections
from kbackup.core.kafka import ClusterMetadata, KafkaClients, check_client_properties
from kbackup.core.logs import get_logger
from kbackup.core.metrics import BackupMetrics
from kbackup.core.progress import Progress, ProgressTask
from kbackup.core.spark import SparkEngine
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import Backup, BackupCatalog, PartitionCoverage, commit_manifest, merge_partition
from kbackup.format.encryption import BackupKeys, keys_for_new_backup
from kbackup.format.layout import check_backup_id, new_run_id
from kbackup.format.manifest import (
    ConsumerGroupsSnapshot,
    Manifest,
    PartitionEntry,
    SourceInfo,
    TopicEntry,
    utc_now_iso,
)
from kbackup.format.segments import SegmentLimits
from kbackup.storage import Storage, open_storage

log = get_logger("backup")


#: Consumer settings the run depends on (not overridable by source.properties).
_REQUIRED_CONSUMER_PROPERTIES = ("enable.partition.eof", "isolation.level", "auto.offset.reset")


@dataclass(frozen=True)
class BackupJob:
    """Everything one run needs, after config file and command-line flags were merged."""

    backup_id: str
    source: SourceSettings
    storage: StorageSettings
    settings: BackupSettings


@dataclass(frozen=True)
class CommittedIncrement:
    increment: int
    run_id: str
    manifest_key: str
    records: int
    bytes: int
    segments: int
    #: Groups in the increment's snapshot (None: the increment has no snapshot).
    consumer_groups: int | None
    #: The run stopped before the end offsets it read; the increment ends where it got to.
    partial: bool


@dataclass
class BackupSummary:
    backup_id: str
    storage_url: str
    source_cluster_id: str
    mode: str
    topics: list[str] = field(default_factory=list)
    partitions: int = 0
    increments: list[CommittedIncrement] = field(default_factory=list)
    seconds: float = 0.0
    #: A snapshot run was interrupted (SIGINT/SIGTERM) before it reached its end offsets.
    stopped_early: bool = False
    #: The last checkpoint found nothing new since this increment, and committed none.
    nothing_new_since: int | None = None
    #: What this run did not back up in full (a dropped topic, group offsets beyond the data): the
    #: run still commits what it copied, and then exits with IncompleteBackupError's code.
    problems: list[str] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(item.records for item in self.increments)

    @property
    def bytes(self) -> int:
        return sum(item.bytes for item in self.increments)

    @property
    def segments(self) -> int:
        return sum(item.segments for item in self.increments)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backup_id": self.backup_id,
            "storage": self.storage_url,
            "source_cluster_id": self.source_cluster_id,
            "mode": self.mode,
            "topics": self.topics,
            "partitions": self.partitions,
            "increments": [item.__dict__ for item in self.increments],
            "records": self.records,
            "bytes": self.bytes,
            "segments": self.segments,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.records / self.seconds, 1) if self.seconds > 0 else None,
            "stopped_early": self.stopped_early,
            "nothing_new_since": self.nothing_new_since,
            "problems": self.problems,
        }


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


class BackupRun:
    """One invocation of the backup stage."""

    def __init__(
        self,
        job: BackupJob,
        *,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
        storage: Storage | None = None,
        metrics: BackupMetrics | None = None,
        after_commit: Callable[[Storage], None] | None = None,
        engine: SparkEngine | None = None,
    ) -> None:
        self.job = job
        #: Where increments are copied: None, in this process (the local engine); else by Spark tasks.
        self.engine = engine
        #: Called after each committed increment (a retention policy applied there, by the caller).
        self.after_commit = after_commit
        #: The storage to write to; None: the one ``job.storage`` names.
        self.storage = storage
        self.settings = job.settings
        self.stop = stop or threading.Event()
        self.progress = progress
        self.follow = job.settings.continuous
        self.metrics = metrics or BackupMetrics(job.backup_id, mode="follow" if self.follow else "snapshot")
        self._task: ProgressTask | None = None
        self._task_total: int | None = None
        #: An encrypted backup's keys, opened or made at the start of the run.
        self._keys: BackupKeys | None = None

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> BackupSummary:
        started = time.monotonic()
        job, settings = self.job, self.settings
        backup_id = check_backup_id(job.backup_id)
        check_client_properties(job.source)
        if self.engine is not None and self.follow:
            raise ConfigError(
                "backup --follow runs on the local engine only (engine: spark copies one increment per run)",
                hint="drop --follow and schedule the Spark backup (each run commits an increment), or "
                "use engine: local for a continuous backup",
            )
        metrics = self.metrics
        storage = self.storage or open_storage(job.storage)
        storage.observer = metrics
        # The source first: a cluster that is unreachable or refuses the credentials fails the run
        # before anything (not even the write probe's folder) is created in storage.
        cluster = SourceCluster(
            KafkaClients(job.source, client_id="kafka-backup", observer=metrics),
            request_timeout=settings.request_timeout_secs,
        )
        metadata = cluster.metadata(self._selected)
        # Before any record is read: a storage that cannot be written fails the run now.
        storage.check_writable()
        metrics.storage_request_succeeded("write")
        catalog = BackupCatalog(storage)
        retention = catalog.retention(backup_id)
        if retention is not None and retention.deleted:
            raise PreconditionError(
                f"backup {backup_id} in {storage.url} is being removed by a prune (retention generation "
                f"{retention.generation})",
                hint="choose another backup id, or run 'kafka-backup prune --execute' to finish the "
                "removal and back up again",
            )
        existing = catalog.load(backup_id) if catalog.exists(backup_id) else None
        # Encrypted: the keyring is written before any segment (a backup's first object).
        self._keys = existing.keys if existing is not None else keys_for_new_backup(storage, backup_id)
        if existing is not None:
            metrics.backup_loaded(_unix_time(existing.latest.finished_at))
        source_cluster_id = resolve_source_cluster_id(
            settings.source_cluster_id, metadata.cluster_id, cluster.servers
        )
        check_same_source(existing, source_cluster_id, metadata.cluster_id)
        topics = self._select(metadata, cluster.servers, first=True)
        summary = BackupSummary(
            backup_id=backup_id,
            storage_url=storage.url,
            source_cluster_id=source_cluster_id,
            mode="follow" if self.follow else "snapshot",
            topics=topics,
        )
        state = _ChainState.of(existing)
        log.info(
            "backing up %d topic(s) from %s to %s/%s (increment %d)",
            len(topics),
            cluster.servers,
            storage.url,
            backup_id,
            state.increment,
            extra={"backup_id": backup_id, "increment": state.increment, "topics": topics},
        )
        scratch_parent = Path(settings.scratch_dir) if settings.scratch_dir else None
        if scratch_parent is not None:
            scratch_parent.mkdir(parents=True, exist_ok=True)
        with (
            LeaseKeeper(storage, backup_id, new_run_id()),
            tempfile.TemporaryDirectory(prefix="kafka-backup-", dir=scratch_parent) as scratch,
        ):
            consumer: Any = None
            copier: Copier | SparkCopier
            if self.engine is not None:
                copier = self._spark_copier(self.engine, source_cluster_id)
            else:
                consumer = cluster.clients.consumer(**self._consumer_properties())
                copier = self._copier(consumer, storage, source_cluster_id, Path(scratch))
            try:
                committer = _Committer(
                    self, cluster, storage, copier, state, summary, source_cluster_id, metadata.cluster_id
                )
                self._increments(cluster, copier, committer, state, metadata, topics, existing)
            except BaseException:
                copier.abort()
                raise
            finally:
                copier.close()
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        consumer.close()
        summary.partitions = len(copier.partitions) or summary.partitions
        summary.seconds = time.monotonic() - started
        return summary

    def _selected(self, names: Iterable[str]) -> list[str]:
        """The names this backup copies (include/exclude patterns, internal topics)."""
        return select_topics(
            names, self.job.source.topics, include_internal=self.settings.include_internal_topics
        ).selected

    def _select(self, metadata: ClusterMetadata, servers: str, *, first: bool) -> list[str]:
        choice = select_topics(
            metadata.topics, self.job.source.topics, include_internal=self.settings.include_internal_topics
        )
        skipped = self._selected(metadata.unavailable)
        if skipped and first:
            # A selected topic must never be dropped from a backup silently.
            named = ", ".join(f"{name} ({metadata.unavailable[name]})" for name in skipped)
            raise KafkaOperationError(
                f"the metadata of selected topic(s) {named} stayed in error on {servers}",
                hint="check the brokers' health (leader elections, offline partitions) and run again; "
                "nothing was copied",
                retryable=True,
            )
        for name in skipped:
            log.warning(
                "topic %s is not available on %s (%s): not backed up in this run",
                name,
                servers,
                metadata.unavailable[name],
            )
        # Only the first look decides between error and warning; a topic deleted while a
        # follow run goes on ends its backup with a warning.
        check_missing_topics(
            choice, on_missing=self.settings.on_missing_topic if first else "warn", servers=servers
        )
        if not choice.selected and first:
            patterns = ", ".join(self.job.source.topics.include)
            raise NotFoundError(
                f"no topic on {servers} to back up (include: {patterns})",
                hint="check source.topics.include/exclude (full-match regular expressions)",
            )
        return choice.selected

    def _consumer_properties(self) -> dict[str, Any]:
        user = set(self.job.source.properties)
        for name in _REQUIRED_CONSUMER_PROPERTIES:
            if name in user:
                log.warning("source.properties.%s is ignored: the backup sets it itself", name)
        tuning: dict[str, Any] = {
            # Bigger fetches per partition: fewer round trips for the same bytes.
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
            "fetch.max.bytes": 64 * 1024 * 1024,
            # The prefetch queue is the consumer's whole memory: 64 MiB over all partitions.
            "queued.max.messages.kbytes": 64 * 1024,
            # When that queue is full, fetch again soon after it drains (librdkafka waits 1 s
            # by default, which halves throughput when the consumer is the faster side).
            "fetch.queue.backoff.ms": 10,
        }
        properties = {key: value for key, value in tuning.items() if key not in user}
        properties.update(
            {
                "enable.partition.eof": True,
                "isolation.level": self.settings.isolation_level,
                # Only used when retention deleted the records a partition was to be read from.
                "auto.offset.reset": "earliest",
            }
        )
        return properties

    def _copier(self, consumer: Any, storage: Storage, source_cluster_id: str, scratch: Path) -> Copier:
        settings = self.settings
        return Copier(
            consumer,
            storage,
            connection=self.job.source,
            backup_id=self.job.backup_id,
            source_cluster=source_cluster_id,
            limits=self._segment_limits(),
            scratch_dir=scratch,
            follow=self.follow,
            metrics=self.metrics,
            buffer_memory_bytes=settings.buffer_memory_bytes,
            max_open_segments=settings.max_open_segments,
            segment_max_interval_secs=settings.segment_max_interval_ms / 1000,
            stall_timeout_secs=settings.stall_timeout_secs,
            on_progress=self._advance,
            keys=self._keys,
        )

    def _spark_copier(self, engine: SparkEngine, source_cluster_id: str) -> SparkCopier:
        """The copier whose increments are Spark jobs: each task gets what the local one has."""
        settings = self.settings
        template = CopyTask(
            backup_id=self.job.backup_id,
            source=self.job.source,
            storage=self.job.storage,
            source_cluster=source_cluster_id,
            limits=self._segment_limits(),
            consumer_properties=self._consumer_properties(),
            buffer_memory_bytes=settings.buffer_memory_bytes,
            max_open_segments=settings.max_open_segments,
            stall_timeout_secs=settings.stall_timeout_secs,
            slices=[],
            keys=self._keys,
        )
        return SparkCopier(
            engine,
            template,
            task_records=settings.spark_task_records,
            metrics=self.metrics,
            progress=self.progress,
        )

    def _segment_limits(self) -> SegmentLimits:
        settings = self.settings
        return SegmentLimits(
            max_bytes=settings.segment_max_bytes,
            max_records=settings.segment_max_records,
            compression=settings.compression,
            compression_level=settings.compression_level,
            row_group_bytes=settings.row_group_max_bytes,
        )

    def _advance(self, records: int, data_bytes: int) -> None:
        if self._task is not None:
            self._task.advance(records, data_bytes=data_bytes)

    def _increments(
        self,
        cluster: SourceCluster,
        copier: Copier | SparkCopier,
        commit: _Committer,
        state: _ChainState,
        metadata: ClusterMetadata,
        topics: list[str],
        existing: Backup | None,
    ) -> None:
        settings = self.settings
        groups: ConsumerGroupsSnapshot | None = None
        reached_the_end = False
        try:
            while True:
                checkpoint_started = time.monotonic()
                # Step 2, then step 3: group offsets before the end offsets (docs/format.md, Consistency).
                groups = cluster.consumer_groups(topics) if settings.consumer_group_snapshot else None
                keys = [(t, p) for t in topics for p in range(metadata.topics[t].partitions)]
                offsets = cluster.offsets(keys, read_committed=settings.isolation_level == "read_committed")
                topic_entries = cluster.topic_entries(metadata, topics)
                check_topic_identity(existing, {entry.name: entry.topic_id for entry in topic_entries})
                state.remember_topics(topic_entries)
                plans = plan_partitions(offsets, state.coverage)
                copier.start_increment(plans)
                commit.summary.partitions = len(copier.partitions)
                self._start_progress(sum(max(0, (p.end_offset or 0) - p.fetch_offset) for p in plans))
                if not self._copy_until(copier.increment_complete, copier):
                    commit.partial(groups, topic_entries, take_fresh_snapshot=False)
                    return
                commit.full(groups, topic_entries)
                reached_the_end = True
                if not self.follow:
                    return
                due = checkpoint_started + settings.checkpoint_interval_secs
                if not self._copy_until(_time_reached(due), copier):
                    commit.partial(None, topic_entries, take_fresh_snapshot=True)
                    return
                metadata = cluster.metadata(self._selected)
                before = topics
                topics = self._select(metadata, cluster.servers, first=False)
                commit.summary.problems.extend(
                    dropped_topics(before, topics, metadata, cluster.servers, state.increment)
                )
        except (KafkaUnreachableError, KafkaOperationError) as error:
            # What was read before the source failed is kept: commit it, then report the error.
            commit.after_failure(error, groups)
            raise
        finally:
            self._finish_progress(reached_the_end=reached_the_end)

    def _copy_until(self, condition: Callable[[], bool], copier: Copier | SparkCopier) -> bool:
        """Consume until ``condition`` holds (True) or a stop was requested (False)."""
        with few_collections():
            while not condition():
                if self.stop.is_set():
                    return False
                copier.poll(0.5)
        return True

    def _start_progress(self, total: int) -> None:
        """One bar per run: records read of the offsets to copy (holes make it end below 100%). On the
        Spark engine the job's tasks have a bar of their own instead."""
        if self.progress is None or self._task is not None or self.engine is not None:
            return
        self._task_total = None if self.follow else max(total, 1)
        self._task = self.progress.task(
            f"backup {self.job.backup_id}", total=self._task_total, unit="records"
        )

    def _finish_progress(self, *, reached_the_end: bool) -> None:
        """Close the bar. Only a run that reached its end offsets fills it (holes in the offsets
        leave it short of its total); a stopped or failed run leaves it where the work stopped."""
        if self._task is None:
            return
        if reached_the_end and self._task_total is not None:
            self._task.update(completed=self._task_total)
        self._task.close()


def dropped_topics(
    before: list[str], after: list[str], metadata: ClusterMetadata, servers: str, increment: int
) -> list[str]:
    """A line for each topic a follow run backed up and no longer can (unavailable, or deleted)."""
    problems = []
    for name in sorted(set(before) - set(after)):
        why = (
            f"not available ({metadata.unavailable[name]})"
            if name in metadata.unavailable
            else "no longer exists"
        )
        problems.append(
            f"topic {name} {why} on {servers}: left out of the backup from increment {increment} on"
        )
    return problems


def _unix_time(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def _time_reached(due: float) -> Callable[[], bool]:
    return lambda: time.monotonic() >= due


@dataclass
class _ChainState:
    """Where the backup's chain of increments stands: the next number and what is covered."""

    increment: int
    previous_run_id: str | None
    coverage: dict[TopicPartitionKey, PartitionCoverage]
    topics: dict[str, TopicEntry]
    #: Each topic as the committed increments last recorded it (``topics`` runs ahead of them).
    committed_topics: dict[str, TopicEntry] = field(default_factory=dict)
    #: The latest group snapshot the committed increments hold.
    groups: ConsumerGroupsSnapshot | None = None
    #: The partitions the latest committed increment lists: one it lists and the next does not (its
    #: topic deleted, or no longer selected) is news, which ``coverage`` (every partition ever)
    #: cannot tell.
    latest_partitions: frozenset[TopicPartitionKey] = frozenset()

    @classmethod
    def of(cls, backup: Backup | None) -> _ChainState:
        if backup is None:
            return cls(increment=0, previous_run_id=None, coverage={}, topics={})
        return cls(
            increment=backup.latest.increment + 1,
            previous_run_id=backup.latest.run_id,
            coverage=backup.coverage(),
            topics=dict(backup.topics),
            committed_topics=dict(backup.topics),
            groups=backup.consumer_groups,
            latest_partitions=frozenset((entry.topic, entry.partition) for entry in backup.latest.partitions),
        )

    def remember_topics(self, entries: list[TopicEntry]) -> None:
        for entry in entries:
            self.topics[entry.name] = entry

    def committed(self, manifest: Manifest) -> None:
        for entry in manifest.partitions:
            merge_partition(self.coverage, entry)
        self.committed_topics.update({topic.name: topic for topic in manifest.topics})
        self.latest_partitions = frozenset((entry.topic, entry.partition) for entry in manifest.partitions)
        if manifest.consumer_groups is not None:
            self.groups = manifest.consumer_groups
        self.increment = manifest.increment + 1
        self.previous_run_id = manifest.run_id

    def nothing_new(
        self,
        entries: list[PartitionEntry],
        segments: list[Any],
        groups: ConsumerGroupsSnapshot | None,
        topics: list[TopicEntry],
    ) -> bool:
        """Whether an increment of these would tell a reader nothing the backup does not say already.

        News is a record, an offset range that moved without records (transaction markers,
        aborted or compacted records: the backup covers further), a new partition or topic, a
        topic whose metadata changed, a partition the latest increment lists and this one does not
        (its topic deleted on the source, or no longer selected: the increment that notices a
        deletion still lists the partition, ended where it was read up to, and only the next one
        leaves it out, with or without a record to copy), or a group whose committed
        offsets moved, even with no new record (a consumer that caught up). A group's state alone
        (Stable, Empty) and the time of the snapshot are not. The first increment of a backup is
        always committed.
        """
        if self.increment == 0 or segments:
            return False
        if any(
            entry.end_offset != entry.start_offset or (entry.topic, entry.partition) not in self.coverage
            for entry in entries
        ):
            return False
        if any(self.committed_topics.get(topic.name) != topic for topic in topics):
            return False
        if self.latest_partitions - {(entry.topic, entry.partition) for entry in entries}:
            return False
        return groups is None or _positions(groups) == _positions(self.groups)


def _positions(snapshot: ConsumerGroupsSnapshot | None) -> dict[str, set[tuple[str, int, int, str | None]]]:
    """What a group snapshot says about positions: each group's committed offsets and metadata."""
    if snapshot is None:
        return {}
    return {
        group.group_id: {(item.topic, item.partition, item.offset, item.metadata) for item in group.offsets}
        for group in snapshot.groups
    }


class _Committer:
    """Turns what the copier holds into a committed increment (manifest written last)."""

    def __init__(
        self,
        run: BackupRun,
        cluster: SourceCluster,
        storage: Storage,
        copier: Copier | SparkCopier,
        state: _ChainState,
        summary: BackupSummary,
        source_cluster_id: str,
        kafka_cluster_id: str | None,
    ) -> None:
        self.run = run
        self.cluster = cluster
        self.storage = storage
        self.copier = copier
        self.state = state
        self.summary = summary
        self.source_cluster_id = source_cluster_id
        self.started_at = utc_now_iso()
        self.kafka_cluster_id = kafka_cluster_id
        #: When committing the open increment began: its segments' last uploads, then the manifest.
        self.commit_started = time.monotonic()

    def full(self, groups: ConsumerGroupsSnapshot | None, topics: list[TopicEntry]) -> None:
        self.commit_started = time.monotonic()
        entries, segments = self.copier.take_increment()
        groups = self._covered(entries, groups, partial=False)
        if self.state.nothing_new(entries, segments, groups, topics):
            self._skip(entries)
            return
        self._commit(entries, segments, groups, topics, partial=False)

    def _skip(self, entries: list[PartitionEntry]) -> None:
        """An increment with nothing new is not committed (a cron every few minutes would pile
        them up); the copier moves on as after a commit, the chain stays where it is."""
        latest = self.state.increment - 1
        self.copier.after_commit(entries)
        self.summary.nothing_new_since = latest
        log.info(
            "nothing new since increment %d of %s: no increment committed",
            latest,
            self.run.job.backup_id,
            extra={"backup_id": self.run.job.backup_id, "increment": latest},
        )

    def partial(
        self, groups: ConsumerGroupsSnapshot | None, topics: list[TopicEntry], *, take_fresh_snapshot: bool
    ) -> None:
        """Stop requested: commit what was read so far, if anything."""
        if take_fresh_snapshot and self.run.settings.consumer_group_snapshot:
            try:
                groups = self.cluster.consumer_groups([entry.name for entry in topics])
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
                extra={"backup_id": self.run.job.backup_id},
            )
        elif self.state.nothing_new(entries, segments, groups, topics):
            self._skip(entries)
        else:
            self._commit(entries, segments, groups, topics, partial=True)
        if not self.run.follow:
            self.summary.stopped_early = True

    def after_failure(self, error: KBackupError, groups: ConsumerGroupsSnapshot | None) -> None:
        topics = [self.state.topics[name] for name in self.summary.topics if name in self.state.topics]
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
        segments: list[Any],
        groups: ConsumerGroupsSnapshot | None,
        topics: list[TopicEntry],
        *,
        partial: bool,
    ) -> None:
        state, settings = self.state, self.run.settings
        manifest = Manifest(
            backup_id=self.run.job.backup_id,
            increment=state.increment,
            run_id=self.copier.run_id,
            previous_run_id=state.previous_run_id,
            tool_version=__version__,
            started_at=self.started_at,
            finished_at=utc_now_iso(),
            source=SourceInfo(
                cluster_id=self.source_cluster_id,
                kafka_cluster_id=self.kafka_cluster_id,
                bootstrap_servers=list(self.run.job.source.bootstrap_servers),
            ),
            settings=manifest_settings(settings, follow=self.run.follow),
            topics=sorted(topics, key=lambda entry: entry.name),
            partitions=entries,
            segments=sorted(segments, key=lambda s: (s.topic, s.partition, s.first_offset)),
            consumer_groups=groups,
        )
        key = commit_manifest(self.storage, manifest, self.run._keys)
        crash_point("backup:after-manifest")
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
        )
        self.summary.increments.append(committed)
        self.summary.nothing_new_since = None
        self.run.metrics.increment_committed(time.monotonic() - self.commit_started)
        if self.run.after_commit is not None:
            try:
                self.run.after_commit(self.storage)
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


def run_backup(
    job: BackupJob,
    *,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    storage: Storage | None = None,
    metrics: BackupMetrics | None = None,
    after_commit: Callable[[Storage], None] | None = None,
    engine: SparkEngine | None = None,
) -> BackupSummary:
    """Run the backup stage once (snapshot mode) or until ``stop`` is set (follow mode).

    In snapshot mode a stop commits what was copied and sets ``stopped_early``.
    ``after_commit`` is called after each committed increment (errors in it are logged).
    ``engine``: copy on Spark (docs/scaling.md); None copies in this process.
    """
    return BackupRun(
        job,
        stop=stop,
        progress=progress,
        storage=storage,
        metrics=metrics,
        after_commit=after_commit,
        engine=engine,
    ).run()
