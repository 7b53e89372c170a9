"""A backup as the ``backup`` command runs it: the backup stage, with the prune stage as its
retention hook (``backup.retention``, after each committed increment), and what its outcome says.

The stages never import each other, so the run that hands one to the other lives here; the CLI
parses the options, serves the metrics, turns signals into ``stop`` and prints the outcome.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kbackup.app.config import KBackupConfig
from kbackup.app.overrides import spark_engine
from kbackup.app.retention_hook import retention_after_commit
from kbackup.backup.metrics import BackupMetrics
from kbackup.core.errors import ConfigError
from kbackup.core.metrics import MetricsSettings
from kbackup.core.progress import Progress
from kbackup.storage import Storage

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


@dataclass
class PreparedBackup:
    """A backup run ready to start: the job, its metrics and its retention hook."""

    job: BackupJob
    metrics: BackupMetrics
    after_commit: Callable[[Storage], None] | None


def prepare(config: KBackupConfig, job: BackupJob, metrics_settings: MetricsSettings) -> PreparedBackup:
    """Check what the config asks of the run before anything is served or read, and build its
    metrics (watched over the health window ``metrics_settings`` give) and retention hook."""
    retention = config.backup.retention
    # An empty section would prune nothing after every increment: a mistake, never a policy. Only
    # the backup refuses it: `prune` reads the section's other keys beside its own rule flags.
    if retention is not None and retention.empty:
        raise ConfigError(
            "backup.retention has no rule: set keep_last/keep_within/keep_hourly/daily/weekly/monthly, "
            "older_than/before or max_total_bytes, or remove the section",
        )
    mode = "follow" if job.settings.continuous else "snapshot"
    metrics = BackupMetrics(job.backup_id, mode=mode, health_window_secs=metrics_settings.health_window_secs)
    return PreparedBackup(job, metrics, retention_after_commit(retention, job.backup_id))


def run(
    config: KBackupConfig,
    prepared: PreparedBackup,
    *,
    stop: threading.Event,
    progress: Progress | None = None,
) -> BackupOutcome:
    """Run the prepared job once (one-shot) or until ``stop`` is set (``--follow``), applying the
    config's ``backup.retention`` after each committed increment, on the config's engine."""
    # Looked up at each run, as the CLI did, so a test can stand in for the backup stage (and the
    # copier, Kafka and Parquet are imported only by a run).
    from kbackup.backup import run_backup

    summary = run_backup(
        prepared.job,
        stop=stop,
        progress=progress,
        metrics=prepared.metrics,
        after_commit=prepared.after_commit,
        engine=spark_engine(config),
    )
    # A follow run stopped with nothing new to commit since its last checkpoint ended cleanly.
    interrupted = summary.stopped_early or (
        stop.is_set() and not summary.increments and summary.nothing_new_since is None
    )
    return BackupOutcome(summary, interrupted)
