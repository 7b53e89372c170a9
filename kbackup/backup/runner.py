"""One run of ``kafka-backup backup``: increments of a backup, in the order docs/format.md prescribes.

1. Read the backup's existing manifests; refuse another source cluster.
2. Snapshot the consumer groups' committed offsets.
3. Read the end offsets to copy up to (the last stable offset under read_committed).
4. Copy into segments; 5. check they are stored; 6. write the manifest last.

A snapshot run makes one increment and exits. A follow run makes one, then
keeps reading and commits another every ``checkpoint_interval_secs`` (each
with a fresh group snapshot taken before its end offsets are read) until
it is asked to stop; then it commits what it has read.

This module is the run (``run_backup``) and its loop; the chain of increments it extends is
``chain.py``, committing an increment ``commit.py``, what it reports ``summary.py``.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from kbackup.backup.chain import ChainState
from kbackup.backup.cluster_capture import MetadataCapture
from kbackup.backup.commit import Committer, manifest_settings
from kbackup.backup.copier import Copier
from kbackup.backup.group_history import GroupHistoryRecorder
from kbackup.backup.groups import snapshot_consumer_groups
from kbackup.backup.lease import LeaseKeeper
from kbackup.backup.metrics import BackupMetrics
from kbackup.backup.plan import (
    check_missing_topics,
    check_same_source,
    check_topic_identity,
    plan_partitions,
    resolve_source_cluster_id,
    select_topics,
)
from kbackup.backup.settings import BackupSettings, SourceSettings, TopicSelection
from kbackup.backup.source import SourceCluster
from kbackup.backup.spark_engine import SparkCopier
from kbackup.backup.summary import BackupSummary
from kbackup.backup.units import CopyTask, SlicedCopier
from kbackup.backup.worker_engine import WorkerCopier, workers_for
from kbackup.core.config import StorageSettings
from kbackup.core.errors import (
    ConfigError,
    KafkaOperationError,
    KafkaUnreachableError,
    NotFoundError,
    PreconditionError,
)
from kbackup.core.gc_tuning import few_collections
from kbackup.core.kafka import ClusterMetadata, KafkaClients, check_client_properties
from kbackup.core.logs import get_logger
from kbackup.core.progress import Progress, ProgressTask
from kbackup.core.spark import SparkEngine
from kbackup.core.throttle import Throttle
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.encryption import BackupKeys, keys_for_new_backup
from kbackup.format.layout import check_backup_id, new_run_id
from kbackup.format.manifest import ConsumerGroupsSnapshot, SourceInfo
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
    started = time.monotonic()
    settings = job.settings
    follow = settings.continuous
    metrics = metrics or BackupMetrics(job.backup_id, mode="follow" if follow else "snapshot")
    backup_id = check_backup_id(job.backup_id)
    check_client_properties(job.source)
    if engine is not None and follow:
        raise ConfigError(
            "backup --follow runs on the local engine only (engine: spark copies one increment per run)",
            hint="drop --follow and schedule the Spark backup (each run commits an increment), or "
            "use engine: local for a continuous backup",
        )
    storage = storage or open_storage(job.storage)
    storage.observer = metrics
    # The source first: a cluster that is unreachable or refuses the credentials fails the run
    # before anything (not even the write probe's folder) is created in storage.
    cluster = SourceCluster(
        KafkaClients(job.source, client_id="kafka-backup", observer=metrics),
        request_timeout=settings.request_timeout_secs,
        patience_secs=settings.stall_timeout_secs,
    )
    rules = TopicRules.of(job.source, settings)
    metadata = cluster.metadata(rules.matching)
    # Before any record is read: a storage that cannot be written fails the run now.
    storage.check_writable()
    metrics.storage_request_succeeded("write")
    existing = _existing_backup(BackupCatalog(storage), storage, backup_id)
    # Encrypted: the keyring is written before any segment (a backup's first object).
    keys = existing.keys if existing is not None else keys_for_new_backup(storage, backup_id)
    if existing is not None:
        metrics.backup_loaded(_unix_time(existing.latest.finished_at))
    source_cluster_id = resolve_source_cluster_id(
        settings.source_cluster_id, metadata.cluster_id, cluster.servers
    )
    check_same_source(existing, source_cluster_id, metadata.cluster_id)
    topics = rules.topics_to_copy(metadata, cluster.servers, first=True)
    summary = BackupSummary(
        backup_id=backup_id,
        storage_url=storage.url,
        source_cluster_id=source_cluster_id,
        mode="follow" if follow else "snapshot",
        topics=topics,
    )
    state = ChainState.of(existing)
    log.info(
        "backing up %d topic(s) from %s to %s/%s (increment %d)",
        len(topics),
        cluster.servers,
        storage.url,
        backup_id,
        state.increment,
        extra={"backup_id": backup_id, "increment": state.increment, "topics": topics},
    )
    throttle = Throttle(bytes_per_second=settings.max_bytes_per_second, on_wait=metrics.throttled)
    if settings.max_bytes_per_second is not None:
        metrics.rate_limited(settings.max_bytes_per_second)
    # On the Spark engine the job's tasks have a bar of their own instead.
    bar = _ProgressBar(progress if engine is None else None, f"backup {job.backup_id}", follow=follow)
    scratch_parent = Path(settings.scratch_dir) if settings.scratch_dir else None
    if scratch_parent is not None:
        scratch_parent.mkdir(parents=True, exist_ok=True)
    with (
        LeaseKeeper(storage, backup_id, new_run_id()),
        tempfile.TemporaryDirectory(prefix="kafka-backup-", dir=scratch_parent) as scratch,
    ):
        consumer: Any = None
        copier: Copier | SlicedCopier
        workers = 1 if engine is not None else _workers(job, cluster, metadata, topics, state)
        if engine is not None:
            copier = _spark_copier(job, engine, source_cluster_id, keys, metrics, progress, throttle)
        elif workers > 1:
            copier = WorkerCopier(
                _copy_task(job, source_cluster_id, keys),
                workers,
                metrics=metrics,
                on_progress=bar.advance,
                throttle=throttle,
            )
        else:
            consumer = cluster.clients.consumer(**_consumer_properties(job))
            copier = _local_copier(
                job, consumer, storage, source_cluster_id, Path(scratch), keys, metrics, bar, throttle
            )
        try:
            committer = Committer(
                storage=storage,
                copier=copier,
                state=state,
                summary=summary,
                source=SourceInfo(
                    cluster_id=source_cluster_id,
                    kafka_cluster_id=metadata.cluster_id,
                    bootstrap_servers=list(job.source.bootstrap_servers),
                ),
                recorded_settings=manifest_settings(settings, follow=follow),
                follow=follow,
                keys=keys,
                metrics=metrics,
                group_snapshot=cluster.consumer_groups if settings.consumer_group_snapshot else None,
                after_commit=after_commit,
                cluster_metadata=MetadataCapture(
                    cluster.admin, storage, keys, summary.warnings, _committed_content(existing)
                ),
                group_history=_group_history(settings, cluster, follow=follow),
            )
            loop = _IncrementLoop(settings, cluster, copier, committer, rules, stop or threading.Event(), bar)
            loop.run(metadata, topics, existing)
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
    summary.throttled_secs = copier.throttled_secs
    return summary


def _group_history(
    settings: BackupSettings, cluster: SourceCluster, *, follow: bool
) -> GroupHistoryRecorder | None:
    """A follow run's readings of the groups between increments, if ``group_snapshot_interval`` asks."""
    interval = settings.group_snapshot_interval_secs
    if interval is None or not follow or not settings.consumer_group_snapshot:
        return None
    admin = cluster.admin
    # One attempt a reading (no retries as for an increment's snapshot): a reading missed while a
    # broker is away is a gap in the history, and waiting would hold up the copy.
    return GroupHistoryRecorder(lambda topics: snapshot_consumer_groups(admin, topics), interval)


def _committed_content(existing: Backup | None) -> str | None:
    """What the latest increment's cluster-metadata file said of the cluster (None: it has none)."""
    ref = existing.latest.cluster_metadata if existing is not None else None
    return ref.content_sha256 if ref is not None else None


def _existing_backup(catalog: BackupCatalog, storage: Storage, backup_id: str) -> Backup | None:
    """The backup this run continues (None: it makes the first increment); refused while a prune
    removes it."""
    retention = catalog.retention(backup_id)
    if retention is not None and retention.deleted:
        raise PreconditionError(
            f"backup {backup_id} in {storage.url} is being removed by a prune (retention generation "
            f"{retention.generation})",
            hint="choose another backup id, or run 'kafka-backup prune --execute' to finish the "
            "removal and back up again",
        )
    return catalog.load(backup_id) if catalog.exists(backup_id) else None


@dataclass(frozen=True)
class TopicRules:
    """Which topics one backup copies: its include/exclude patterns, whether internal topics count,
    and what a named topic the cluster lacks means (``backup.on_missing_topic``)."""

    selection: TopicSelection
    include_internal: bool
    on_missing: Literal["fail", "warn"]

    @classmethod
    def of(cls, source: SourceSettings, settings: BackupSettings) -> TopicRules:
        return cls(source.topics, settings.include_internal_topics, settings.on_missing_topic)

    def matching(self, names: Iterable[str]) -> list[str]:
        """The names this backup copies (include/exclude patterns, internal topics)."""
        return select_topics(names, self.selection, include_internal=self.include_internal).selected

    def topics_to_copy(self, metadata: ClusterMetadata, servers: str, *, first: bool) -> list[str]:
        """The topics one look at the cluster finds to copy. On the run's ``first`` look, a selected
        topic whose metadata is in error and finding no topic at all are errors; on a follow run's
        later looks a topic that went away is a warning."""
        choice = select_topics(metadata.topics, self.selection, include_internal=self.include_internal)
        skipped = self.matching(metadata.unavailable)
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
        check_missing_topics(choice, on_missing=self.on_missing if first else "warn", servers=servers)
        if not choice.selected and first:
            patterns = ", ".join(self.selection.include)
            raise NotFoundError(
                f"no topic on {servers} to back up (include: {patterns})",
                hint="check source.topics.include/exclude (full-match regular expressions)",
            )
        return choice.selected


#: The backup consumer's throughput settings (``source.properties`` go over them; the benchmark's
#: bare consumer loop takes them from here).
CONSUMER_TUNING: dict[str, Any] = {
    # Bigger fetches per partition: fewer round trips for the same bytes.
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "fetch.max.bytes": 64 * 1024 * 1024,
    # The prefetch queue is the consumer's whole memory: 64 MiB over all partitions.
    "queued.max.messages.kbytes": 64 * 1024,
    # When that queue is full, fetch again soon after it drains (librdkafka waits 1 s
    # by default, which halves throughput when the consumer is the faster side).
    "fetch.queue.backoff.ms": 10,
}


def _consumer_properties(job: BackupJob) -> dict[str, Any]:
    user = set(job.source.properties)
    for name in _REQUIRED_CONSUMER_PROPERTIES:
        if name in user:
            log.warning("source.properties.%s is ignored: the backup sets it itself", name)
    properties = {key: value for key, value in CONSUMER_TUNING.items() if key not in user}
    properties.update(
        {
            "enable.partition.eof": True,
            "isolation.level": job.settings.isolation_level,
            # Only used when retention deleted the records a partition was to be read from.
            "auto.offset.reset": "earliest",
        }
    )
    return properties


def _local_copier(
    job: BackupJob,
    consumer: Any,
    storage: Storage,
    source_cluster_id: str,
    scratch: Path,
    keys: BackupKeys | None,
    metrics: BackupMetrics,
    bar: _ProgressBar,
    throttle: Throttle,
) -> Copier:
    settings = job.settings
    return Copier(
        consumer,
        storage,
        connection=job.source,
        backup_id=job.backup_id,
        source_cluster=source_cluster_id,
        limits=_segment_limits(settings),
        scratch_dir=scratch,
        follow=settings.continuous,
        metrics=metrics,
        buffer_memory_bytes=settings.buffer_memory_bytes,
        max_open_segments=settings.max_open_segments,
        segment_max_interval_secs=settings.segment_max_interval_ms / 1000,
        stall_timeout_secs=settings.stall_timeout_secs,
        on_progress=bar.advance,
        keys=keys,
        throttle=throttle,
    )


def _workers(
    job: BackupJob, cluster: SourceCluster, metadata: ClusterMetadata, topics: list[str], state: ChainState
) -> int:
    """The local engine's processes: ``backup.workers``, or for ``auto`` the records the first
    increment would copy now (the end offsets read once more, before the increment's own read)."""
    settings = job.settings
    if settings.workers != "auto":
        return settings.workers
    keys = [(t, p) for t in topics for p in range(metadata.topics[t].partitions)]
    offsets = cluster.offsets(keys, read_committed=settings.isolation_level == "read_committed")
    return workers_for("auto", plan_partitions(offsets, state.coverage))


def _copy_task(job: BackupJob, source_cluster_id: str, keys: BackupKeys | None) -> CopyTask:
    """What each task of an increment cut into slices gets: what the local copier has."""
    settings = job.settings
    return CopyTask(
        backup_id=job.backup_id,
        source=job.source,
        storage=job.storage,
        source_cluster=source_cluster_id,
        limits=_segment_limits(settings),
        consumer_properties=_consumer_properties(job),
        buffer_memory_bytes=settings.buffer_memory_bytes,
        max_open_segments=settings.max_open_segments,
        stall_timeout_secs=settings.stall_timeout_secs,
        slices=[],
        keys=keys,
    )


def _spark_copier(
    job: BackupJob,
    engine: SparkEngine,
    source_cluster_id: str,
    keys: BackupKeys | None,
    metrics: BackupMetrics,
    progress: Progress | None,
    throttle: Throttle,
) -> SparkCopier:
    """The copier whose increments are Spark jobs: each task gets what the local one has."""
    return SparkCopier(
        engine,
        _copy_task(job, source_cluster_id, keys),
        task_records=job.settings.spark_task_records,
        metrics=metrics,
        progress=progress,
        throttle=throttle,
    )


def _segment_limits(settings: BackupSettings) -> SegmentLimits:
    return SegmentLimits(
        max_bytes=settings.segment_max_bytes,
        max_records=settings.segment_max_records,
        compression=settings.compression,
        compression_level=settings.compression_level,
        row_group_bytes=settings.row_group_max_bytes,
    )


class _ProgressBar:
    """One bar per run: records read of the offsets to copy (holes make it end below 100%)."""

    def __init__(self, progress: Progress | None, label: str, *, follow: bool) -> None:
        #: None: no bar (none asked for, or the Spark engine's tasks show their own).
        self.progress = progress
        self.label = label
        self.follow = follow
        self._task: ProgressTask | None = None
        self._total: int | None = None

    def start(self, total: int) -> None:
        if self.progress is None or self._task is not None:
            return
        self._total = None if self.follow else max(total, 1)
        self._task = self.progress.task(self.label, total=self._total, unit="records")

    def advance(self, records: int, data_bytes: int) -> None:
        if self._task is not None:
            self._task.advance(records, data_bytes=data_bytes)

    def finish(self, *, reached_the_end: bool) -> None:
        """Close the bar. Only a run that reached its end offsets fills it (holes in the offsets
        leave it short of its total); a stopped or failed run leaves it where the work stopped."""
        if self._task is None:
            return
        if reached_the_end and self._total is not None:
            self._task.update(completed=self._total)
        self._task.close()


@dataclass
class _IncrementLoop:
    """The run's increments: one up to the end offsets read at the start, then in follow mode one
    every checkpoint until a stop; what was read before a stop or a source failure is committed."""

    settings: BackupSettings
    cluster: SourceCluster
    copier: Copier | SlicedCopier
    commit: Committer
    rules: TopicRules
    stop: threading.Event
    bar: _ProgressBar

    def run(self, metadata: ClusterMetadata, topics: list[str], existing: Backup | None) -> None:
        settings, cluster, copier, commit = self.settings, self.cluster, self.copier, self.commit
        state = commit.state
        groups: ConsumerGroupsSnapshot | None = None
        reached_the_end = False
        try:
            while True:
                checkpoint_started = time.monotonic()
                # Step 2, then step 3: group offsets before the end offsets (docs/format.md, Consistency).
                groups = cluster.consumer_groups(topics) if settings.consumer_group_snapshot else None
                if commit.group_history is not None:
                    commit.group_history.checkpoint(topics)
                keys = [(t, p) for t in topics for p in range(metadata.topics[t].partitions)]
                offsets = cluster.offsets(keys, read_committed=settings.isolation_level == "read_committed")
                topic_entries = cluster.topic_entries(metadata, topics)
                check_topic_identity(existing, {entry.name: entry.topic_id for entry in topic_entries})
                state.remember_topics(topic_entries)
                plans = plan_partitions(offsets, state.coverage)
                copier.start_increment(plans)
                commit.summary.partitions = len(copier.partitions)
                self.bar.start(sum(max(0, (p.end_offset or 0) - p.fetch_offset) for p in plans))
                if not self._copy_until(copier.increment_complete):
                    commit.partial(groups, topic_entries, take_fresh_snapshot=False)
                    return
                commit.full(groups, topic_entries)
                reached_the_end = True
                if not settings.continuous:
                    return
                due = checkpoint_started + settings.checkpoint_interval_secs
                if not self._copy_until(_time_reached(due)):
                    commit.partial(None, topic_entries, take_fresh_snapshot=True)
                    return
                metadata = cluster.metadata(self.rules.matching)
                before = topics
                topics = self.rules.topics_to_copy(metadata, cluster.servers, first=False)
                commit.summary.problems.extend(
                    dropped_topics(before, topics, metadata, cluster.servers, state.increment)
                )
        except (KafkaUnreachableError, KafkaOperationError) as error:
            # What was read before the source failed is kept: commit it, then report the error.
            commit.after_failure(error, groups)
            raise
        finally:
            self.bar.finish(reached_the_end=reached_the_end)

    def _copy_until(self, condition: Callable[[], bool]) -> bool:
        """Consume until ``condition`` holds (True) or a stop was requested (False)."""
        history = self.commit.group_history
        with few_collections():
            while not condition():
                if self.stop.is_set():
                    return False
                self.copier.poll(0.5)
                if history is not None:
                    history.tick()
        return True


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
