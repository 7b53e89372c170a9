"""A local backup on several worker processes (``backup.workers``; docs/backup.md, "Workers").

One Python process is one core for the consume loop and the Arrow conversion (the client's
per-record work holds the GIL), so the local engine cuts an increment into slice sets
(:mod:`~kbackup.backup.units`, the Spark engine's) and copies them on the worker processes of
:mod:`kbackup.core.workers`, each with its own consumer, started once for the whole run (a
``--follow`` run's increments all run on them). Workers report each batch (records, bytes) and each
segment stored to the parent's one progress bar and metrics registry; the parent commits the
increment, its manifest written last, as on one process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from kbackup.backup.metrics import BackupMetrics
from kbackup.backup.plan import PartitionPlan
from kbackup.backup.units import CopyResult, CopyTask, SlicedCopier, copy_slices, slices_text
from kbackup.core.errors import InterruptedByUser, KBackupError
from kbackup.core.logs import get_logger
from kbackup.core.throttle import Throttle
from kbackup.core.workers import WorkerPool, WorkerSide, auto_workers

log = get_logger("backup.workers")

CLIENT_ID = "kafka-backup-backup-worker"

#: ``backup.workers: auto`` copies in this one process below this many records. A worker is a new
#: Python interpreter that imports pyarrow and confluent-kafka and opens its own consumer and store.
#: Measured on the 2-core test machine, shared with other work, one broker, 4 partitions of 100-byte
#: records, ``kafka-backup backup`` once each, wall (CPU of all processes): 1,000,000 records 3.15 s
#: (2.8 s) on one process, 4.55 s (5.8 s) on two workers; 4,000,000 records 14.0 s (9.6 s) on one,
#: 9.65 s (12.1 s) on two. The lines cross near 1,700,000 records (two workers cost about 3 s of CPU
#: more); earlier runs at a load average of 11-12 found two workers slower still at 2,000,000.
AUTO_MIN_RECORDS = 2_000_000

#: The most offsets one worker task copies: a large partition is cut into slices of this many, so
#: workers that finish early take the rest; a task's start costs only a consumer (the processes run).
TASK_RECORDS = 2_000_000


def workers_for(setting: int | Literal["auto"], plans: list[PartitionPlan]) -> int:
    """The worker processes a backup whose first increment is ``plans`` runs on (1: this process)."""
    if setting != "auto":
        return setting
    records = sum(max(0, (plan.end_offset or 0) - plan.fetch_offset) for plan in plans)
    units = sum(1 for plan in plans if (plan.end_offset or 0) > plan.fetch_offset)
    # A partition larger than a task is cut into several: each slice is a unit.
    slices = max(units, -(-records // TASK_RECORDS))
    return auto_workers(records, slices, os.cpu_count(), min_records=AUTO_MIN_RECORDS)


def copy_in_worker(task: CopyTask, side: WorkerSide) -> CopyResult:
    """A worker's task: its slices copied, each batch and segment reported to the parent."""
    return copy_slices(task, stopped=side.is_set, report=side.report)


def _named(task: CopyTask) -> str:
    return f"slices {slices_text(task.slices)}"


class WorkerCopier(SlicedCopier):
    """The copier of :func:`~kbackup.backup.runner.run_backup` on ``workers`` processes of this
    machine; the processes start with the first increment and end when the run closes it."""

    counted_live = True

    def __init__(
        self,
        template: CopyTask,
        workers: int,
        *,
        metrics: BackupMetrics,
        on_progress: Callable[[int, int], None],
        throttle: Throttle | None = None,
    ) -> None:
        # The processes are running: a task is worth a consumer's start, so a small increment is
        # still spread over every worker.
        super().__init__(
            replace(template, client_id=CLIENT_ID),
            task_records=TASK_RECORDS,
            metrics=metrics,
            throttle=throttle,
            min_task_records=1,
        )
        self.workers = workers
        self.on_progress = on_progress
        self._stop = threading.Event()
        self._pool = WorkerPool[CopyTask]("backup", workers, _named, self._stop, on_report=self._reported)
        self._entered = False

    def _reported(self, kind: str, *values: Any) -> None:
        if kind == "progress":
            self.on_progress(*values)
        elif kind == "records":
            self.metrics.records_copied(*values)
        elif kind == "segment":
            self.metrics.segment_written(*values)

    def parallelism(self) -> int:
        if not self._entered:
            log.info(
                "backup %s copies on %d worker process(es)",
                self.template.backup_id,
                self.workers,
                extra={"backup_id": self.template.backup_id},
            )
            self._pool.__enter__()
            self._entered = True
        return self.workers

    def run_tasks(self, tasks: list[CopyTask]) -> list[CopyResult]:
        return self._pool.run(tasks, copy_in_worker)

    def failed(self, failure: BaseException) -> BaseException:
        if isinstance(failure, KBackupError):
            return failure
        return KBackupError(f"the backup's workers failed: {type(failure).__name__}: {failure}")

    def cancel(self) -> None:
        self._stop.set()

    def close(self) -> None:
        super().close()
        if self._entered:
            self._entered = False
            # Told to stop (a signal, a failure): each worker drops its slices; else idle ones just end.
            self._pool.__exit__(InterruptedByUser if self._stop.is_set() else None)
