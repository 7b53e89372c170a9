"""The restore stage's entry points: prepare a plan, preview it (``--dry-run``), run it.

The order of checks is the order a user fixes things in: the backup and the
settings first (no network), then the target cluster, then the segments'
contents. Nothing is written before all of them pass.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbackup.core.config import KafkaConnection, StorageSettings
from kbackup.core.errors import ConfigError, UsageError
from kbackup.core.kafka import KafkaClients, check_client_properties
from kbackup.core.progress import Progress
from kbackup.core.spark import SparkEngine
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.layout import check_backup_id
from kbackup.restore.metrics import RestoreMetrics
from kbackup.restore.plan import RestorePlan, TargetState, build_plan, restored_topics
from kbackup.restore.plan_text import plan_lines, purge_lines
from kbackup.restore.resume import resume_point
from kbackup.restore.run_plan import plan_run
from kbackup.restore.runner import Restorer
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.summary import RestoreSummary
from kbackup.restore.target import (
    PurgePlan,
    as_existing,
    inspect_target,
    plan_purge,
    purgeable_topics,
    recreated_as,
    without_topics,
)
from kbackup.restore.units import UnitsJob
from kbackup.restore.worker_engine import WorkersChoice, run_on_workers, workers_for, workers_of
from kbackup.storage import Storage, open_storage

CLIENT_ID = "kafka-backup-restore"


@dataclass
class RestoreJob:
    """A planned restore with what it needs to run."""

    plan: RestorePlan
    backup: Backup
    storage: Storage
    clients: KafkaClients
    settings: RestoreSettings
    #: The store's settings, for the Spark engine's tasks (they open it themselves).
    storage_settings: StorageSettings | None = None
    #: ``restore.purge_target`` (None: none).
    purge: PurgePlan | None = None


def prepare(
    *,
    backup_id: str | None,
    storage: StorageSettings,
    target: KafkaConnection | None,
    settings: RestoreSettings,
    metrics: RestoreMetrics | None = None,
) -> RestoreJob:
    """Load the backup, check the settings against it, look at the target, and plan; ``metrics``
    hears how the requests to the storage and the target go."""
    backup_id = required_backup_id(backup_id)
    if target is None:
        raise UsageError(
            "no target cluster: give --bootstrap-servers or set a target section in the config file"
        )
    opened = open_storage(storage)
    opened.observer = metrics
    backup = BackupCatalog(opened).load(backup_id)
    if metrics is not None:
        metrics.storage_request_succeeded("read")  # a local folder reports nothing by itself
    restored_topics(backup, settings)  # bad topic names fail before any network call
    check_client_properties(target)
    for key in settings.producer_properties:
        if key in ("transactional.id", "enable.idempotence", "acks"):
            raise ConfigError(
                f"restore.producer_properties: {key} is set by the restore itself (exactly once needs it)"
            )
    clients = KafkaClients(target, client_id=CLIENT_ID, observer=metrics)
    target_topics = [settings.topic_mapping.get(name, name) for name in backup.topics]
    state = inspect_target(clients, [*target_topics, settings.progress_topic])
    purge = None
    if settings.purge_target == "none":
        plan = build_plan(backup, settings, state, storage_url=opened.url)
    else:
        plan, purge = _with_purge(backup, settings, state, clients, storage_url=opened.url)
    return RestoreJob(
        plan=plan,
        backup=backup,
        storage=opened,
        clients=clients,
        settings=settings,
        storage_settings=storage,
        purge=purge,
    )


def _with_purge(
    backup: Backup, settings: RestoreSettings, state: TargetState, clients: KafkaClients, *, storage_url: str
) -> tuple[RestorePlan, PurgePlan]:
    """The purge of the existing target topics, and the plan a run follows: for a ``topics`` purge
    the plan made as if they were missing, so they are created again as the restore creates topics
    (whatever shape they have now). Skipped where an earlier run of this restore already restored
    into the target: the run continues it with the topics as they are."""
    targets = [topic.target_topic for topic in restored_topics(backup, settings)]
    topics = purgeable_topics(targets, state.topics, progress_topic=settings.progress_topic)
    recreate = settings.purge_target == "topics" and bool(topics)
    if recreate:
        plan = build_plan(
            backup,
            settings.model_copy(update={"create_topics": True}),
            without_topics(state, topics),
            storage_url=storage_url,
        )
        # An earlier run of this restore created them so: it resumes from them as they exist.
        original = as_existing(plan, topics)
    else:
        plan = original = build_plan(backup, settings, state, storage_url=storage_url)
    resumed = resume_point(original, clients, settings, mode=original.mode, dry_run=True).resumed
    purge = plan_purge(
        clients, original, settings.purge_target, topics, resumed=resumed, force=settings.force_purge
    )
    if recreate and resumed:
        plan = build_plan(backup, settings, state, storage_url=storage_url)
    elif recreate:
        recreated_as(purge, plan)
    return plan, purge


def required_backup_id(backup_id: str | None) -> str:
    """The backup to restore, checked; a UsageError when none is named (the command was called wrong)."""
    if not backup_id:
        raise UsageError("no backup id: give --backup-id or set backup_id in the config file")
    check_backup_id(backup_id)
    return backup_id


@dataclass
class DryRunReport:
    """What a run would do now: the plan, and what earlier runs already did."""

    plan: RestorePlan
    resumed: bool
    #: Records a run would produce now (None where segments were not counted).
    records_to_write: int | None
    records_upper_bound: int
    segments_to_read: int
    checksums_verified: bool
    #: Progress records held by an open transaction (a run of the restore is active or was killed).
    undecided_progress: int
    #: About earlier runs (e.g. a target topic deleted since).
    warnings: list[str]
    #: ``restore.purge_target`` (None: none).
    purge: PurgePlan | None = None
    #: The worker processes of the local engine and why (None: ``engine: spark`` runs Spark tasks).
    workers: WorkersChoice | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": True,
            "plan": self.plan.to_dict(),
            "resumed": self.resumed,
            "records_to_write": self.records_to_write,
            "records_upper_bound": self.records_upper_bound,
            "segments_to_read": self.segments_to_read,
            "checksums_verified": self.checksums_verified,
            "undecided_progress": self.undecided_progress,
            "warnings": self.warnings,
            "workers": None if self.workers is None else self.workers.to_dict(),
            "purge": None
            if self.purge is None
            else {
                "how": self.purge.how,
                "skipped": self.purge.skipped,
                "topics": [
                    {
                        "topic": step.topic,
                        "end_offsets": {str(q): end for q, (_, end) in sorted(step.ranges.items())},
                        "records": step.records,
                        "partitions_after": step.partitions_after,
                    }
                    for step in self.purge.steps
                ],
            },
        }

    def lines(self) -> list[str]:
        lines = ["dry run: nothing is created or written", *plan_lines(self.plan)]
        if self.purge is not None:
            lines.extend(purge_lines(self.purge))
        count = (
            f"{self.records_to_write:,}"
            if self.records_to_write is not None
            else f"at most {self.records_upper_bound:,}"
        )
        if self.resumed:
            lines.append(
                f"  an earlier run of this restore got part of the way: {count} record(s) left to write"
            )
        else:
            lines.append(f"  would write {count} record(s), reading {self.segments_to_read} segment(s)")
        lines.append(
            f"  {self.workers.text()}"
            if self.workers is not None
            else "  workers: none (engine: spark restores each source partition in a Spark task)"
        )
        lines.append(
            "  segments checked: sizes and SHA-256"
            if self.checksums_verified
            else "  segments checked: sizes only (restore.verify_checksums is false)"
        )
        for warning in self.warnings:
            lines.append(f"  warning: {warning}")
        if self.undecided_progress:
            lines.append(
                f"  {self.undecided_progress} progress record(s) are in an open transaction: a run of this "
                "restore is active, or was killed less than a minute ago"
            )
        return lines


def dry_run(
    job: RestoreJob,
    *,
    scratch_dir: Path | None = None,
    progress: Progress | None = None,
    on_spark: bool = False,
) -> DryRunReport:
    """Everything a run checks (the same :func:`plan_run`), without fencing, creating or producing
    anything: progress held by an open transaction is counted, not waited for. ``on_spark``: the
    run would be on the Spark engine (no worker processes)."""
    plan = job.plan
    run = plan_run(
        plan,
        job.storage,
        job.clients,
        job.settings,
        mode=plan.mode,
        scratch_dir=scratch_dir,
        progress=progress,
        keys=job.backup.keys,
    )
    return DryRunReport(
        plan=plan,
        resumed=run.point.resumed,
        records_to_write=run.records_to_write,
        records_upper_bound=run.records_upper_bound,
        segments_to_read=len(run.work),
        checksums_verified=job.settings.verify_checksums,
        undecided_progress=run.point.undecided,
        warnings=run.point.warnings,
        purge=job.purge,
        workers=None if on_spark else workers_of(job.settings.workers, plan),
    )


def run(
    job: RestoreJob,
    *,
    progress: Progress | None = None,
    scratch_dir: Path | None = None,
    stop: threading.Event | None = None,
    metrics: RestoreMetrics | None = None,
    engine: SparkEngine | None = None,
) -> RestoreSummary:
    """Restore the plan into the target (see kbackup.restore.runner); ``stop`` ends it at the next
    batch after committing what was produced (the CLI sets it on SIGINT/SIGTERM); ``metrics``
    counts what it produces, per batch. ``engine``: in Spark tasks (kbackup.restore.spark_engine);
    else on ``restore.workers`` processes (kbackup.restore.worker_engine), or in this one."""
    if engine is not None or job.settings.workers != 1:
        assert job.storage_settings is not None
        units = UnitsJob(
            job.storage_settings,
            job.clients,
            job.settings,
            progress=progress,
            stop=stop,
            metrics=metrics,
            keys=job.backup.keys,
            purge=job.purge,
        )
        if engine is not None:
            from kbackup.restore.spark_engine import run_on_spark

            return run_on_spark(job.plan, engine, units)
        workers = workers_for(job.settings.workers, job.plan)
        if workers > 1:
            return run_on_workers(job.plan, workers, units)
    return Restorer(
        job.plan,
        job.storage,
        job.clients,
        job.settings,
        progress=progress,
        scratch_dir=scratch_dir,
        stop=stop,
        metrics=metrics,
        keys=job.backup.keys,
        purge=job.purge,
    ).run()
