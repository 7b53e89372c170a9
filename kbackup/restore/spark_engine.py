"""A restore run by Spark tasks (``engine: spark``; docs/scaling.md).

The work is split by source partition: each unit is the restore plan narrowed to one source
partition, run by the local engine's :class:`~kbackup.restore.runner.Restorer` in a task, with
its own producer. Order within a source partition is the order one producer sends it in, as on
the local engine; origin headers are the same. Where a restore repartitions, several units feed
one target partition, each with its own producer: records of different source partitions
interleave there on either engine, and each source partition's order is kept.

The run keeps the local engine's order of steps:

1. job one: every unit checks what it will read (sizes, SHA-256, counts) and what it will
   write, with nothing written to the target;
2. the driver changes existing topics to the backup's (``restore.existing_topics: apply``) and
   creates the missing topics (and the progress topic);
3. job two: every unit fences its own earlier attempts (the exactly-once mode: a transactional
   id of the restore id and the unit, so a retried task aborts its zombie's open transaction and
   no other unit's), reads its resume point again and produces, its progress committed in the
   same transactions as its records;
4. the driver waits until read_committed consumers see every record and checks the counts.

A task attempt that dies is run again by Spark and resumes from its unit's committed progress
(exactly-once) or from the origin headers at the end of its target partitions (idempotent),
exactly as a rerun of the command does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kbackup.core.config import KafkaConnection, StorageSettings
from kbackup.core.errors import InterruptedByUser, KBackupError
from kbackup.core.kafka import KafkaClients
from kbackup.core.logs import get_logger
from kbackup.core.progress import Progress
from kbackup.core.spark import SparkEngine, TaskFailure, job_failed, run_spark_tasks
from kbackup.format.encryption import BackupKeys
from kbackup.restore.metrics import RestoreMetrics
from kbackup.restore.plan import PartitionPlan, RestorePlan
from kbackup.restore.run_plan import RunPlan, purge_before_first_record
from kbackup.restore.runner import (
    ProducedPart,
    Restorer,
    conclude,
    report_planned,
    restore_throttle,
    run_totals,
)
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.summary import RestoreSummary
from kbackup.restore.target import PurgePlan, change_existing_topics, create_topics
from kbackup.storage import open_storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = get_logger("restore.spark")

CLIENT_ID = "kafka-backup-restore-spark"


@dataclass(frozen=True)
class UnitTask:
    """One unit of the restore, with what its task needs (it travels pickled inside the task)."""

    plan: RestorePlan
    storage: StorageSettings
    target: KafkaConnection
    settings: RestoreSettings
    #: Job two: the unit's checks from job one.
    checked: RunPlan | None = None
    #: An encrypted backup's keys, opened by the driver (a worker needs no key source of its own).
    keys: BackupKeys | None = None
    #: Units producing at once, which split the rate limits evenly (each task its own bucket).
    throttle_share: int = 1


@dataclass
class UnitResult:
    checked: RunPlan | None = None
    produced: ProducedPart | None = None
    failure: TaskFailure | None = None


def unit_name(partition: PartitionPlan) -> str:
    return f"{partition.source_topic}-{partition.source_partition}"


def unit_plan(plan: RestorePlan, partition: PartitionPlan, *, topics_created: bool) -> RestorePlan:
    """``plan`` narrowed to one source partition. Once the driver created the topics
    (``topics_created``), the unit plans as for topics that exist: a retried attempt must read
    the progress and the records its earlier attempt committed there."""
    topic = plan.topic(partition.source_topic)
    if topics_created:
        topic = replace(topic, create=False)
    return replace(
        plan,
        partitions=[partition],
        topics=[topic],
        unit=unit_name(partition),
        create_progress_topic=plan.create_progress_topic and not topics_created,
    )


def _restorer(task: UnitTask) -> Restorer:
    return Restorer(
        task.plan,
        open_storage(task.storage.model_copy(update={"encryption": None})),
        KafkaClients(task.target, client_id=CLIENT_ID),
        task.settings,
        keys=task.keys,
        throttle_share=task.throttle_share,
    )


def check_unit(task: UnitTask) -> UnitResult:
    """Job one, on an executor: the unit's checks (nothing is written to the target)."""
    try:
        return UnitResult(checked=_restorer(task).check(time.monotonic()))
    except KBackupError as exc:
        return UnitResult(failure=TaskFailure.of(exc))


def produce_unit(task: UnitTask) -> UnitResult:
    """Job two, on an executor: fence the unit's earlier attempts, resume, produce, commit."""
    assert task.checked is not None
    try:
        restorer = _restorer(task)
        started = time.monotonic()
        # The checks of job one, for this unit's plan now that its topics exist; the resume point
        # is read again, in the idempotent mode too (an earlier attempt of this task may have
        # produced since).
        run = restorer.fenced(replace(task.checked, plan=task.plan), started, reread=True)
        return UnitResult(produced=restorer.produce(run, started))
    except KBackupError as exc:
        return UnitResult(failure=TaskFailure.of(exc))


def run_on_spark(
    plan: RestorePlan,
    engine: SparkEngine,
    *,
    storage: StorageSettings,
    clients: KafkaClients,
    settings: RestoreSettings,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    metrics: RestoreMetrics | None = None,
    keys: BackupKeys | None = None,
    purge: PurgePlan | None = None,
) -> RestoreSummary:
    """Run the restore ``plan`` as Spark tasks, one per source partition (see the module)."""
    started = time.monotonic()
    session = engine.session("kafka-backup-restore")
    target = clients.connection
    partitions = list(plan.partitions)
    log.info(
        "restoring %d source partition(s) in Spark tasks on %s",
        len(partitions),
        session.sparkContext.master,
        extra={"backup_id": plan.backup_id, "restore_id": plan.restore_id},
    )
    description = f"kafka-backup restore {plan.backup_id} ({plan.restore_id})"
    checks = _run(
        session,
        [
            UnitTask(unit_plan(plan, p, topics_created=False), storage, target, settings, keys=keys)
            for p in partitions
        ],
        check_unit,
        description=f"{description}: checks",
        progress=progress,
        stop=stop,
    )
    _raise_failures(checks)
    if stop is not None and stop.is_set():
        raise InterruptedByUser(
            "restore stopped by a signal after its checks, before it wrote anything",
            hint="run the same command again",
        )
    exactly_once = any(
        result.checked is not None and result.checked.mode == "exactly-once" for result in checks
    )
    changed = change_existing_topics(clients, plan)
    # The driver purges: no unit has produced yet, and each unit's earlier attempts (a rerun's) are
    # read from the progress or the target as a local run reads them.
    purged = purge_before_first_record(
        clients, purge, settings, mode="exactly-once" if exactly_once else "idempotent"
    )
    created = create_topics(clients, plan, progress_topic=exactly_once and plan.create_progress_topic)
    # The rate limits are split over the units that produce at once: all of them, up to the cores
    # Spark has (restore_throttle sets the metrics' gauges to the whole limits).
    share = min(len(partitions), int(session.sparkContext.defaultParallelism))
    restore_throttle(settings, metrics)
    units = []
    for partition, result in zip(partitions, checks, strict=True):
        assert result.checked is not None
        units.append(
            UnitTask(
                unit_plan(plan, partition, topics_created=True),
                storage,
                target,
                settings,
                result.checked,
                keys=keys,
                throttle_share=share,
            )
        )
    if metrics is not None:
        checked = [result.checked for result in checks if result.checked is not None]
        report_planned(metrics, [totals for run in checked for totals in run_totals(run).values()])
    # The driver's loop is Spark's while the tasks run: /healthz leaves it unwatched (Spark's own
    # timeouts and task retries stand for it), as between the phases of a local restore.
    produced = _run(
        session, units, produce_unit, description=f"{description}: records", progress=progress, stop=stop
    )
    _raise_failures(produced)
    parts = [result.produced for result in produced if result.produced is not None]
    if metrics is not None:
        for part in parts:
            for totals in part.totals:
                metrics.records_produced(totals.target_topic, totals.records, totals.bytes)
                metrics.records_filtered(
                    totals.target_topic, dropped=totals.dropped, tombstoned=totals.tombstoned
                )
            metrics.throttled(part.throttled_secs)
    return conclude(
        plan, clients, settings, parts, created=created, seconds_since=started, changed=changed, purged=purged
    )


def _run(
    session: SparkSession,
    tasks: list[UnitTask],
    task: Callable[[UnitTask], UnitResult],
    *,
    description: str,
    progress: Progress | None,
    stop: threading.Event | None,
) -> list[UnitResult]:
    try:
        return run_spark_tasks(session, tasks, task, description=description, progress=progress, stop=stop)
    except KBackupError:
        raise
    except Exception as exc:
        raise job_failed(
            exc,
            what="the restore",
            hint="what was committed stays; the driver's and the executors' logs say more. Run the same "
            "command again: the restore continues where each source partition got to",
        ) from None


def _raise_failures(results: list[UnitResult]) -> None:
    for result in results:
        if result.failure is not None:
            raise result.failure.error()
