"""A Spark job's progress as one bar: tasks done out of tasks known (the mapping scan, the Spark engine).

Spark's own console progress is off (it would write between kafka-backup's
lines, and its output goes to a log file), so without this a scan of a large
topic shows nothing for minutes. A background thread asks Spark's status
tracker twice a second; nothing runs when bars are off (CI, pipes, --json).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING

from kbackup.core.logs import get_logger
from kbackup.core.progress import Progress, ProgressTask

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = get_logger("spark.progress")

POLL_SECS = 0.5


class SparkTaskProgress:
    def __init__(self, session: SparkSession, progress: Progress | None, description: str) -> None:
        self.session = session
        self.progress = progress
        self.description = description
        #: Stage id -> (completed tasks, tasks), as last seen.
        self.stages: dict[int, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: ProgressTask | None = None

    def __enter__(self) -> SparkTaskProgress:
        if self.progress is not None and self.progress.enabled:
            self._bar = self.progress.task(self.description, total=None, unit="tasks")
            self._thread = threading.Thread(
                target=self._poll, name="kafka-backup-spark-progress", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._bar is not None:
            if exc_type is None:
                self.stages = {stage: (total, total) for stage, (_, total) in self.stages.items()}
                self._show()
            self._bar.close()

    def _poll(self) -> None:
        tracker = self.session.sparkContext.statusTracker()
        while not self._stop.wait(POLL_SECS):
            try:
                active = set(tracker.getActiveStageIds())
                for stage in active:
                    info = tracker.getStageInfo(stage)
                    if info is not None:
                        self.stages[stage] = (info.numCompletedTasks, info.numTasks)
            except Exception as exc:  # progress must never fail the scan
                log.debug("Spark status unavailable: %s", exc)
                continue
            # A stage no longer active has finished all its tasks.
            for stage, (_, total) in list(self.stages.items()):
                if stage not in active:
                    self.stages[stage] = (total, total)
            self._show()

    def _show(self) -> None:
        if self._bar is not None and self.stages:
            self._bar.update(
                total=sum(total for _, total in self.stages.values()),
                completed=sum(done for done, _ in self.stages.values()),
            )
