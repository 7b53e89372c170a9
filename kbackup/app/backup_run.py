"""A backup as the ``backup`` command runs it: the backup stage, with the prune stage as its
retention hook (``backup.retention``, after each committed increment), and what its outcome says.

The stages never import each other, so the run that hands one to the other lives here; the CLI
parses the options, serves the metrics, turns signals into ``stop`` and prints the outcome.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kbackup.app.config import KBackupConfig
from kbackup.app.overrides import spark_engine
from kbackup.app.retention_hook import retention_after_commit
from kbackup.backup.metrics import BackupMetrics
from kbackup.core.metrics import MetricsSettings
from kbackup.core.progress import Progress

if TYPE_CHECKING:
    from kbackup.backup import BackupJob, BackupSummary


@dataclass
class BackupOutcome:
    """What a backup run did, and how it ended."""

    summary: BackupSummary
    #: Stopped (SIGINT/SIGTERM) before it reached its end offsets: what was copied is committed,
    #: the backup is not complete.
    interrupted: bool

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary.to_dict(), "interrupted": self.interrupted}


def backup_metrics(job: BackupJob, settings: MetricsSettings) -> BackupMetrics:
    """The metrics of the run of ``job``, watched over the health window ``settings`` give."""
    mode = "follow" if job.settings.continuous else "snapshot"
    return BackupMetrics(job.backup_id, mode=mode, health_window_secs=settings.health_window_secs)


def run(
    config: KBackupConfig,
    job: BackupJob,
    *,
    stop: threading.Event,
    progress: Progress | None = None,
    metrics: BackupMetrics | None = None,
) -> BackupOutcome:
    """Run ``job`` once (one-shot) or until ``stop`` is set (``--follow``), applying the config's
    ``backup.retention`` after each committed increment, on the config's engine."""
    # Looked up at each run, as the CLI did, so a test can stand in for the backup stage (and the
    # copier, Kafka and Parquet are imported only by a run).
    from kbackup.backup.runner import run_backup

    summary = run_backup(
        job,
        stop=stop,
        progress=progress,
        metrics=metrics,
        after_commit=retention_after_commit(config.backup.retention, job.backup_id),
        engine=spark_engine(config),
    )
    # A follow run stopped with nothing new to commit since its last checkpoint ended cleanly.
    interrupted = summary.stopped_early or (
        stop.is_set() and not summary.increments and summary.nothing_new_since is None
    )
    return BackupOutcome(summary, interrupted)
