"""A restore cut into units, one per source partition, run by an engine that spreads them out:
Spark tasks (:mod:`~kbackup.restore.spark_engine`) or worker processes on this machine
(:mod:`~kbackup.restore.worker_engine`).

Each unit is the restore plan narrowed to one source partition, run by the local engine's
:class:`~kbackup.restore.runner.Restorer` with its own producer and a transactional id of the
restore id and the unit. The driver keeps the local engine's order of steps:

1. job one: every unit checks what it will read (sizes, SHA-256, counts) and what it will
   write, with nothing written to the target;
2. the driver changes existing topics to the backup's (``restore.existing_topics: apply``),
   purges (``restore.purge_target``) and creates the missing topics (and the progress topic);
3. job two: every unit fences its own earlier attempts (a retried or rerun unit aborts its
   zombie's open transaction and no other unit's), reads its resume point again and produces,
   its progress committed in the same transactions as its records;
4. the driver waits until read_committed consumers see every record and checks the counts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from kbackup.core.config import KafkaConnection, StorageSettings
from kbackup.core.errors import InterruptedByUser, KBackupError
from kbackup.core.kafka import KafkaClients
from kbackup.core.progress import Progress
from kbackup.core.spark import TaskFailure
from kbackup.format.encryption import BackupKeys
from kbackup.restore.metrics import RestoreMetrics
from kbackup.restore.plan import PartitionPlan, RestorePlan, unit_name
from kbackup.restore.run_plan import RunPlan, purge_before_first_record
from kbackup.restore.runner import (
    ProducedBatch,
    ProducedPart,
    Restorer,
    StopSignal,
    conclude,
    report_planned,
    restore_throttle,
    run_totals,
)
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.summary import RestoreSummary
from kbackup.restore.target import PurgePlan, change_existing_topics, create_topics
from kbackup.storage import open_storage

CLIENT_ID = "kafka-backup-restore-spark"


@dataclass(frozen=True)
class UnitTask:
    """One unit of the restore, with what its task needs (it travels pickled to the task)."""

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
    #: The client id of the unit's Kafka clients (which engine ran it, in the brokers' logs).
    client_id: str = CLIENT_ID


@dataclass
class UnitResult:
    checked: RunPlan | None = None
    produced: ProducedPart | None = None
    failure: TaskFailure | None = None


#: Runs one job of the units (the checks or the produce) on an engine: the results in the tasks' order.
JobRunner = Callable[[list[UnitTask], Callable[[UnitTask], UnitResult], str], list[UnitResult]]


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


def _restorer(
    task: UnitTask, *, stop: StopSignal | None = None, on_produced: ProducedBatch | None = None
) -> Restorer:
    return Restorer(
        task.plan,
        open_storage(task.storage.model_copy(update={"encryption": None})),
        KafkaClients(task.target, client_id=task.client_id),
        task.settings,
        keys=task.keys,
        throttle_share=task.throttle_share,
        stop=stop,
        on_produced=on_produced,
    )


def check_unit(task: UnitTask) -> UnitResult:
    """Job one, in a task: the unit's checks (nothing is written to the target)."""
    try:
        return UnitResult(checked=_restorer(task).check(time.monotonic()))
    except KBackupError as exc:
        return UnitResult(failure=TaskFailure.of(exc))


def produce_unit(
    task: UnitTask, *, stop: StopSignal | None = None, on_produced: ProducedBatch | None = None
) -> UnitResult:
    """Job two, in a task: fence the unit's earlier attempts, resume, produce, commit. ``stop``
    (an event) ends it at the next batch after committing; ``on_produced`` hears every batch."""
    assert task.checked is not None
    try:
        restorer = _restorer(task, stop=stop, on_produced=on_produced)
        started = time.monotonic()
        # The checks of job one, for this unit's plan now that its topics exist; the resume point
        # is read again, in the idempotent mode too (an earlier attempt of this task may have
        # produced since).
        run = restorer.fenced(replace(task.checked, plan=task.plan), started, reread=True)
        return UnitResult(produced=restorer.produce(run, started))
    except KBackupError as exc:
        return UnitResult(failure=TaskFailure.of(exc))


@dataclass(frozen=True)
class UnitsJob:
    """What a restore in units needs besides its plan (the same for every engine)."""

    storage: StorageSettings
    clients: KafkaClients
    settings: RestoreSettings
    progress: Progress | None = None
    stop: threading.Event | None = None
    metrics: RestoreMetrics | None = None
    keys: BackupKeys | None = None
    purge: PurgePlan | None = None


@dataclass(frozen=True)
class UnitsEngine:
    """How an engine runs the units: each job, and what the driver must know of it."""

    run_job: JobRunner
    #: Units that produce at once (the rate limits are split over them).
    parallelism: int
    client_id: str = CLIENT_ID
    #: The engine told the metrics of each batch as it was produced (else the driver counts the
    #: units' totals once they are done).
    counted_live: bool = False


def run_units(plan: RestorePlan, how: UnitsJob, engine: UnitsEngine, *, description: str) -> RestoreSummary:
    """Run the restore ``plan`` in units, one per source partition, each job by ``run_job``
    (the steps of the module's docstring)."""
    started = time.monotonic()
    clients, settings, metrics = how.clients, how.settings, how.metrics
    target = clients.connection
    partitions = list(plan.partitions)

    def task(partition: PartitionPlan, *, created: bool, checked: RunPlan | None = None) -> UnitTask:
        return UnitTask(
            unit_plan(plan, partition, topics_created=created),
            how.storage,
            target,
            settings,
            checked,
            keys=how.keys,
            throttle_share=min(len(partitions), engine.parallelism) if created else 1,
            client_id=engine.client_id,
        )

    checks = engine.run_job(
        [task(p, created=False) for p in partitions], check_unit, f"{description}: checks"
    )
    raise_failures(checks)
    if how.stop is not None and how.stop.is_set():
        raise InterruptedByUser(
            "restore stopped by a signal after its checks, before it wrote anything",
            hint="run the same command again",
        )
    checked = [result.checked for result in checks if result.checked is not None]
    exactly_once = any(run.mode == "exactly-once" for run in checked)
    changed = change_existing_topics(clients, plan)
    # The driver purges: no unit has produced yet, and each unit's earlier attempts (a rerun's) are
    # read from the progress or the target as a local run reads them.
    purged = purge_before_first_record(
        clients, how.purge, settings, mode="exactly-once" if exactly_once else "idempotent"
    )
    created = create_topics(clients, plan, progress_topic=exactly_once and plan.create_progress_topic)
    # restore_throttle sets the metrics' gauges to the whole limits; each unit takes its share.
    restore_throttle(settings, metrics)
    units = [task(p, created=True, checked=run) for p, run in zip(partitions, checked, strict=True)]
    if metrics is not None:
        report_planned(metrics, [totals for run in checked for totals in run_totals(run).values()])
    produced = engine.run_job(units, produce_unit, f"{description}: records")
    raise_failures(produced)
    parts = [result.produced for result in produced if result.produced is not None]
    if metrics is not None:
        _count_parts(metrics, plan, parts, records_counted=engine.counted_live)
    return conclude(
        plan, clients, settings, parts, created=created, seconds_since=started, changed=changed, purged=purged
    )


def _count_parts(
    metrics: RestoreMetrics, plan: RestorePlan, parts: list[ProducedPart], *, records_counted: bool
) -> None:
    """What the units did that the metrics in their processes could not count: the driver's
    registry takes it from their results (``records_counted``: the records were, batch by batch)."""
    for part in parts:
        for totals in part.totals:
            if not records_counted:
                metrics.records_produced(totals.target_topic, totals.records, totals.bytes)
            metrics.records_filtered(
                totals.target_topic, dropped=totals.dropped, tombstoned=totals.tombstoned
            )
        for source_topic, count in part.landed_by_topic.items():
            metrics.records_already_landed(plan.topic(source_topic).target_topic, count)
        metrics.throttled(part.throttled_secs)
        metrics.transaction_committed(part.transactions)


def raise_failures(results: list[UnitResult]) -> None:
    for result in results:
        if result.failure is not None:
            raise result.failure.error()
