"""A backup increment cut into slices, copied elsewhere than the run's own loop: by Spark tasks
(``spark_engine.py``) or by worker processes of this machine (``worker_engine.py``).

The driver (:func:`~kbackup.backup.runner.run_backup`) does what must happen once and in order,
exactly as on the local engine: the group snapshot before the end offsets, the increment's
offset ranges, and after the copy the manifest, written last. What changes is the copy: the
ranges are cut into slices (a large partition into several, small partitions packed together),
and each slice set is one task that runs the local engine's
:class:`~kbackup.backup.copier.Copier` over it, writing segments in exactly the same format.

A task names its segments with a run id of its own (``<first offset>-<run id>``), so a retried
or speculative attempt never overwrites another's files, and the manifest lists only the
segments of the attempt whose result was kept. What other attempts (or a stopped increment)
stored is referenced by no manifest; ``kafka-backup prune`` removes it after its grace period.
An increment cut into slices commits whole or not at all: a stop before every slice is copied
commits nothing new, and the next run copies the increment again.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kbackup.backup.copier import Copier, entry_of
from kbackup.backup.metrics import BackupMetrics
from kbackup.backup.plan import PartitionPlan
from kbackup.backup.settings import SourceSettings
from kbackup.core.config import StorageSettings
from kbackup.core.errors import InterruptedByUser, KBackupError
from kbackup.core.gc_tuning import few_collections
from kbackup.core.kafka import KafkaClients
from kbackup.core.logs import get_logger
from kbackup.core.spark import TaskFailure
from kbackup.core.throttle import Throttle
from kbackup.core.types import TopicPartitionKey
from kbackup.format.encryption import BackupKeys
from kbackup.format.layout import new_run_id
from kbackup.format.manifest import PartitionEntry, SegmentEntry
from kbackup.format.segments import SegmentLimits
from kbackup.storage import open_storage

log = get_logger("backup.units")

#: The fewest offsets a Spark task is given when the increment is cut for parallelism: below that
#: a task's start (a consumer, a storage client) costs more than the copy.
MIN_TASK_RECORDS = 50_000


@dataclass(frozen=True)
class Slice:
    """Offsets ``[start, end)`` of one partition, copied by one task."""

    topic: str
    partition: int
    start: int
    end: int
    log_start_offset: int

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)

    def plan(self) -> PartitionPlan:
        return PartitionPlan(
            topic=self.topic,
            partition=self.partition,
            start_offset=self.start,
            log_start_offset=self.log_start_offset,
            fetch_offset=self.start,
            end_offset=self.end,
        )


def cut_slices(
    plans: Iterable[PartitionPlan], *, tasks: int, task_records: int, min_task_records: int = MIN_TASK_RECORDS
) -> list[list[Slice]]:
    """The increment's offsets to copy, as the slice sets of about ``tasks`` tasks.

    A task gets at most ``task_records`` offsets (fewer when that makes ``tasks`` tasks, but not
    below ``min_task_records``); a partition larger than that is cut into consecutive slices, and
    smaller ones share a task. No task holds two slices of one partition (a copier reads each
    partition once). Deterministic: the same plans give the same slices.
    """
    wanted = [plan for plan in plans if plan.end_offset is not None and plan.fetch_offset < plan.end_offset]
    total = sum((plan.end_offset or 0) - plan.fetch_offset for plan in wanted)
    if not total:
        return []
    size = max(1, min(task_records, max(min_task_records, math.ceil(total / max(1, tasks)))))
    slices: list[Slice] = []
    for plan in wanted:
        assert plan.end_offset is not None
        for start in range(plan.fetch_offset, plan.end_offset, size):
            slices.append(
                Slice(
                    plan.topic,
                    plan.partition,
                    start,
                    min(plan.end_offset, start + size),
                    plan.log_start_offset,
                )
            )
    # First fit, largest first: full slices take a task each, the small ones fill up the rest.
    bins: list[list[Slice]] = []
    filled: list[int] = []
    for item in sorted(slices, key=lambda s: (-(s.end - s.start), s.topic, s.partition, s.start)):
        length = item.end - item.start
        for index, members in enumerate(bins):
            if filled[index] + length <= size and all(member.key != item.key for member in members):
                members.append(item)
                filled[index] += length
                break
        else:
            bins.append([item])
            filled.append(length)
    return [sorted(members, key=lambda s: (s.topic, s.partition)) for members in bins]


def slices_text(slices: Iterable[Slice]) -> str:
    """The slices of a task, for the line that names a failed or dead one: ``orders-0 [0, 500)``."""
    return ", ".join(f"{item.topic}-{item.partition} [{item.start}, {item.end})" for item in slices)


@dataclass(frozen=True)
class CopyTask:
    """What one task needs: the connection and the store travel inside the pickled task."""

    backup_id: str
    source: SourceSettings
    storage: StorageSettings
    source_cluster: str
    limits: SegmentLimits
    consumer_properties: dict[str, Any]
    buffer_memory_bytes: int
    max_open_segments: int
    stall_timeout_secs: float
    slices: list[Slice]
    #: An encrypted backup's keys, opened by the driver (a task needs no key source of its own).
    keys: BackupKeys | None = None
    #: This task's share of ``backup.max_bytes_per_second`` (None: no limit).
    max_bytes_per_second: float | None = None
    #: The Kafka client id of the task's consumer.
    client_id: str = "kafka-backup-spark"


@dataclass
class CopyResult:
    """What a task stored: one entry per slice, and its segments; or the error it met."""

    entries: list[PartitionEntry] = field(default_factory=list)
    segments: list[SegmentEntry] = field(default_factory=list)
    #: The kafka-backup error the task met (see TaskFailure).
    failure: TaskFailure | None = None
    #: Seconds the task waited on its share of the rate limit.
    throttled_secs: float = 0.0
    #: Told to stop before its slices were copied (what it stored is referenced by no manifest).
    stopped: bool = False


#: What a task sends its driver while it copies (a worker's batches): ``report(kind, *values)``.
Report = Callable[..., None]


class ReportedMetrics(BackupMetrics):
    """A worker's metrics: what the driver's one registry counts (records, segments) sent to it."""

    def __init__(self, backup_id: str, report: Report) -> None:
        super().__init__(backup_id, mode="snapshot")
        self._report = report

    def records_copied(self, topic: str, count: int) -> None:
        self._report("records", topic, count)

    def segment_written(self, topic: str, size_bytes: int) -> None:
        self._report("segment", topic, size_bytes)


def copy_slices(
    task: CopyTask, *, stopped: Callable[[], bool] | None = None, report: Report | None = None
) -> CopyResult:
    """Copy the task's slices into segments (the local engine's copier). ``stopped``: asked between
    polls, True ends the task early; ``report``: each batch and segment sent to the driver."""
    try:
        return _copy(task, stopped or (lambda: False), report)
    except KBackupError as exc:
        return CopyResult(failure=TaskFailure.of(exc))


def _copy(task: CopyTask, stopped: Callable[[], bool], report: Report | None) -> CopyResult:
    # The driver opened the backup's keys and sent them: a task reads no key file or variable.
    storage = open_storage(task.storage.model_copy(update={"encryption": None}))
    clients = KafkaClients(task.source, client_id=task.client_id)
    consumer = clients.consumer(**task.consumer_properties)
    metrics = (
        BackupMetrics(task.backup_id, mode="snapshot")
        if report is None
        else ReportedMetrics(task.backup_id, report)
    )
    with tempfile.TemporaryDirectory(prefix="kafka-backup-task-") as scratch:
        copier = Copier(
            consumer,
            storage,
            connection=task.source,
            backup_id=task.backup_id,
            source_cluster=task.source_cluster,
            limits=task.limits,
            scratch_dir=Path(scratch),
            follow=False,
            buffer_memory_bytes=task.buffer_memory_bytes,
            max_open_segments=task.max_open_segments,
            # Each segment closes when its slice ends; nothing waits long enough for the interval.
            segment_max_interval_secs=3600.0,
            stall_timeout_secs=task.stall_timeout_secs,
            metrics=metrics,
            keys=task.keys,
            # A wait for the rate lasts a batch's bytes over the task's share (seconds at a low
            # limit): a stop ends it, as it ends the copy between polls.
            throttle=Throttle(bytes_per_second=task.max_bytes_per_second, sleep=_sleep_unless(stopped)),
            on_progress=None if report is None else lambda records, size: report("progress", records, size),
        )
        try:
            copier.start_increment([item.plan() for item in task.slices])
            # As the one-process copy does: with the collector's defaults, each poll's messages set
            # off collections that walk the whole process (two workers spent twice one process's
            # CPU per record without this, docs/benchmarks.md "Backup on workers").
            with few_collections():
                while not copier.increment_complete():
                    if stopped():
                        copier.abort()
                        return CopyResult(stopped=True)
                    copier.poll(0.5)
            entries, segments = copier.take_increment()
        except BaseException:
            copier.abort()
            raise
        finally:
            copier.close()
            with contextlib.suppress(Exception):
                consumer.close()
    return CopyResult(entries=entries, segments=segments, throttled_secs=copier.throttled_secs)


def _sleep_unless(stopped: Callable[[], bool]) -> Callable[[float], None]:
    """``time.sleep`` that ends early once ``stopped()``."""

    def sleep(seconds: float) -> None:
        until = time.monotonic() + seconds
        while not stopped() and (left := until - time.monotonic()) > 0:
            time.sleep(min(left, 0.2))

    return sleep


def merge_slices(
    plan: PartitionPlan, entries: list[PartitionEntry], segments: list[SegmentEntry]
) -> PartitionEntry:
    """One partition's entry in the manifest from its slices' entries (consecutive, checked)."""
    assert plan.end_offset is not None
    entries = sorted(entries, key=lambda entry: entry.start_offset)
    expected = plan.fetch_offset
    for entry in entries:
        if entry.start_offset != expected:
            raise AssertionError(f"{plan.key}: a slice starts at {entry.start_offset}, expected {expected}")
        expected = entry.end_offset
    end = max(plan.end_offset, expected) if entries else max(plan.end_offset, plan.fetch_offset)
    segments = sorted(segments, key=lambda segment: segment.first_offset)
    return entry_of(plan.topic, plan.partition, plan.start_offset, end, plan.log_start_offset, segments)


class SlicedCopier:
    """The copier of :func:`~kbackup.backup.runner.run_backup` when an increment's slice sets run as
    tasks elsewhere: the tasks run on a thread so that the run still notices a stop between polls.
    An engine says how many tasks run at once, how it runs them, how it cancels them and what its
    failure means."""

    #: The engine counts records and segments as the tasks report them (workers); else from the
    #: tasks' results when the increment is taken (Spark).
    counted_live = False

    def __init__(
        self,
        template: CopyTask,
        *,
        task_records: int,
        metrics: BackupMetrics,
        throttle: Throttle | None = None,
        min_task_records: int = MIN_TASK_RECORDS,
    ) -> None:
        #: The run's rate limit, split over the tasks that run at once (each its own bucket).
        self.throttle = throttle
        #: Seconds the tasks waited on their shares of it, added up over the increments.
        self.throttled_secs = 0.0
        self.template = template
        self.task_records = task_records
        self.min_task_records = min_task_records
        self.metrics = metrics
        self.partitions: dict[TopicPartitionKey, PartitionPlan] = {}
        #: The manifest's run id (its segments carry their tasks' run ids).
        self.run_id = ""
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._results: list[CopyResult] = []
        self._failure: BaseException | None = None
        #: Between a follow run's increments: each partition's entry where the last one ended.
        self._idle: list[PartitionEntry] = []
        #: When the lag gauges were last set from the increment's plan (monotonic seconds).
        self._lag_refreshed = 0.0

    # What an engine says.
    def parallelism(self) -> int:
        """How many tasks run at once."""
        raise NotImplementedError

    def run_tasks(self, tasks: list[CopyTask]) -> list[CopyResult]:
        """Run every task; their results in order (on the copier's thread)."""
        raise NotImplementedError

    def failed(self, failure: BaseException) -> BaseException:
        """The run's error for what ``run_tasks`` raised."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Stop the running tasks (``run_tasks`` then returns or raises soon)."""
        raise NotImplementedError

    def start_increment(self, plans: Iterable[PartitionPlan]) -> None:
        plans = list(plans)
        if any(plan.end_offset is None for plan in plans):
            raise AssertionError("an increment cut into slices has fixed end offsets only")
        self.partitions = {plan.key: plan for plan in plans}
        self.run_id = new_run_id()
        parallelism = self.parallelism()
        cuts = cut_slices(
            plans, tasks=parallelism, task_records=self.task_records, min_task_records=self.min_task_records
        )
        # A follow run's checkpoint with nothing new says nothing.
        (log.info if cuts else log.debug)(
            "copying %d partition(s) in %d task(s), %d at once",
            len(plans),
            len(cuts),
            parallelism,
            extra={"backup_id": self.template.backup_id},
        )
        # The tasks that run at once share the rate: as many as there are, up to the parallelism.
        share = self.throttle.share(min(len(cuts), parallelism)) if self.throttle is not None else None
        rate = share.bytes_per_second if share is not None else None
        tasks = [replace(self.template, slices=members, max_bytes_per_second=rate) for members in cuts]
        self._done.clear()
        self._results, self._failure = [], None
        self._refresh_lag()
        self._thread = threading.Thread(
            target=self._run, args=(tasks,), name="kafka-backup-copy-tasks", daemon=True
        )
        self._thread.start()

    def _run(self, tasks: list[CopyTask]) -> None:
        try:
            self._results = self.run_tasks(tasks)
            waited = sum(result.throttled_secs for result in self._results)
            if waited > 0:
                self.throttled_secs += waited
                self.metrics.throttled(waited)
        except BaseException as exc:  # handed to the run's thread by poll()
            self._failure = exc
        finally:
            self._done.set()

    def poll(self, timeout: float = 0.5) -> int:
        # /healthz: the loop turns while the tasks run (their own timeouts stand for the progress a
        # local copy would show).
        self.metrics.health.turned(progressed=True)
        if not self.partitions:
            # Between a follow run's increments: nothing runs until the next one starts.
            time.sleep(timeout)
            return 0
        if not self._done.wait(timeout):
            if time.monotonic() - self._lag_refreshed >= 1.0:
                self._refresh_lag()
            return 0
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise self.failed(failure) from None
        for result in self._results:
            if result.failure is not None:
                raise result.failure.error()
            if result.stopped:
                raise InterruptedByUser(
                    "backup stopped by a signal before its increment was copied",
                    hint="run the same command again: it copies the increment again",
                )
        return 0

    def increment_complete(self) -> bool:
        if not self._done.is_set():
            return False
        self.poll(0)
        return True

    def take_increment(self, *, partial: bool = False) -> tuple[list[PartitionEntry], list[SegmentEntry]]:
        """The increment's entries and segments; a stopped copy keeps nothing (the increment's end is
        its start for every partition: no new increment is committed)."""
        if not self.partitions:
            # A follow run stopped between increments: every partition where the last one ended.
            return list(self._idle), []
        if partial and not self._done.is_set():
            self.abort()
            unchanged = [
                entry_of(
                    plan.topic,
                    plan.partition,
                    plan.start_offset,
                    plan.start_offset,
                    plan.log_start_offset,
                    [],
                )
                for _, plan in sorted(self.partitions.items())
            ]
            return unchanged, []
        self.poll(0)
        slices: dict[TopicPartitionKey, list[PartitionEntry]] = {}
        stored: dict[TopicPartitionKey, list[SegmentEntry]] = {}
        for result in self._results:
            for entry in result.entries:
                slices.setdefault((entry.topic, entry.partition), []).append(entry)
            for segment in result.segments:
                stored.setdefault((segment.topic, segment.partition), []).append(segment)
                if not self.counted_live:
                    self.metrics.segment_written(segment.topic, segment.size_bytes)
        entries = []
        segments: list[SegmentEntry] = []
        for key, plan in sorted(self.partitions.items()):
            entry = merge_slices(plan, slices.get(key, []), stored.get(key, []))
            entries.append(entry)
            segments.extend(stored.get(key, []))
            if entry.record_count and not self.counted_live:
                self.metrics.records_copied(plan.topic, entry.record_count)
        return entries, segments

    def _refresh_lag(self) -> None:
        """The backup lag of each partition of the increment, from the driver's plan: the tasks'
        consumers are elsewhere, and the increment's end offsets were fixed when it was planned.
        Until its commit, every record up to that end is not in a committed increment; the age
        counts from when the driver first saw them wait (the tasks read the records' times)."""
        self._lag_refreshed = time.monotonic()
        waiting = False
        for plan in self.partitions.values():
            end = plan.end_offset if plan.end_offset is not None else plan.start_offset
            records = max(0, end - plan.start_offset)
            waiting = waiting or records > 0
            self.metrics.partition_lag(plan.topic, plan.partition, records=records, oldest_timestamp_ms=None)
        self.metrics.health.waiting(waiting)

    def after_commit(self, entries: list[PartitionEntry]) -> None:
        # What the increment held is committed: no lag until the next increment's plan says more.
        for entry in entries:
            self.metrics.partition_lag(entry.topic, entry.partition, records=0, oldest_timestamp_ms=None)
        self.metrics.health.waiting(False)
        self.partitions = {}
        self._results = []
        self._idle = [
            entry_of(e.topic, e.partition, e.end_offset, e.end_offset, e.log_start_offset, [])
            for e in entries
        ]

    def abort(self) -> None:
        if self._thread is not None and not self._done.is_set():
            self.cancel()
            self._done.wait(30)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=30)
