"""A backup increment copied by Spark tasks (``engine: spark``; docs/scaling.md).

The increment cut into slice sets, each task running the local engine's copier over its slices,
and the driver's steps around them are :mod:`~kbackup.backup.units`, shared with the worker
processes of the local engine. A Spark task attempt names its segments with a run id of its
own, so a retried or speculative attempt never overwrites another's files, and the manifest
lists only the segments of the attempt whose result Spark kept.
"""

from __future__ import annotations

from typing import Any

from kbackup.backup.metrics import BackupMetrics
from kbackup.backup.units import CopyResult, CopyTask, SlicedCopier, copy_slices
from kbackup.core.logs import get_logger
from kbackup.core.progress import Progress
from kbackup.core.spark import SparkEngine, job_failed, run_spark_tasks
from kbackup.core.throttle import Throttle

log = get_logger("backup.spark")


class SparkCopier(SlicedCopier):
    """The copier of :func:`~kbackup.backup.runner.run_backup` on the Spark engine: an increment is
    one Spark job."""

    def __init__(
        self,
        engine: SparkEngine,
        template: CopyTask,
        *,
        task_records: int,
        metrics: BackupMetrics,
        progress: Progress | None,
        throttle: Throttle | None = None,
    ) -> None:
        super().__init__(template, task_records=task_records, metrics=metrics, throttle=throttle)
        self.engine = engine
        self.progress = progress
        self._session: Any = None

    def parallelism(self) -> int:
        if self._session is None:
            self._session = self.engine.session("kafka-backup-backup")
            log.info(
                "backup %s copies on Spark at %s",
                self.template.backup_id,
                self._session.sparkContext.master,
                extra={"backup_id": self.template.backup_id},
            )
        return int(self._session.sparkContext.defaultParallelism)

    def run_tasks(self, tasks: list[CopyTask]) -> list[CopyResult]:
        return run_spark_tasks(
            self._session,
            tasks,
            copy_slices,
            description=f"kafka-backup backup {self.template.backup_id}",
            progress=self.progress,
        )

    def failed(self, failure: BaseException) -> BaseException:
        return job_failed(
            failure,
            what=f"backup {self.template.backup_id}",
            hint="nothing was committed; the driver's and the executors' logs say more. Run the "
            "same command again: the backup continues from its last committed increment",
        )

    def cancel(self) -> None:
        if self._session is not None:
            self._session.sparkContext.cancelAllJobs()
