"""A local restore on several worker processes (``restore.workers``; docs/restore.md, "Workers").

One Python process is one core for the produce loop (the client's per-record work holds the
GIL), so the local engine spreads the restore's units (:mod:`~kbackup.restore.units`, one per
source partition, the Spark engine's units) over the worker processes of
:mod:`kbackup.core.workers`. Each worker runs a unit at a time with its own producer and the
unit's own transactional id: the resume and fencing rules are the Spark engine's, so a rerun (with
any number of workers, or on Spark) continues every unit where it got to. Workers report each
batch produced (topic, records, bytes) to the parent's one progress display and metrics registry.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kbackup.core.logs import get_logger
from kbackup.core.progress import Progress, ProgressTask
from kbackup.core.workers import CORES_PER_WORKER, WorkerPool, WorkerSide, auto_workers
from kbackup.restore.metrics import RestoreMetrics
from kbackup.restore.plan import RestorePlan
from kbackup.restore.runner import StopSignal, run_totals
from kbackup.restore.summary import RestoreSummary
from kbackup.restore.units import (
    UnitResult,
    UnitsEngine,
    UnitsJob,
    UnitTask,
    check_unit,
    produce_unit,
    run_units,
)

log = get_logger("restore.workers")

CLIENT_ID = "kafka-backup-restore-worker"

#: ``restore.workers: auto`` restores in this one process below this many records. A worker is a
#: new Python interpreter that imports pyarrow and confluent-kafka and opens its own connections
#: (about a second of a core each); the restore produces about 100,000-300,000 records a second on
#: one core (docs/benchmarks.md), so below this the start-up costs about what a second core gives.
AUTO_MIN_RECORDS = 100_000


@dataclass(frozen=True)
class WorkersChoice:
    """How many worker processes a restore runs on, and why (``--dry-run`` says both)."""

    #: Worker processes (1: the restore runs in this one process).
    count: int
    setting: int | Literal["auto"]
    cores: int | None
    #: Source partitions restored: a worker restores one at a time.
    units: int
    #: Records in the segments the plan reads (the manifests' counts: an upper bound where a
    #: selection cuts a segment, enough to choose).
    records: int

    def reason(self) -> str:
        if self.setting != "auto":
            capped = (
                f"; no more than the {self.units:,} source partition(s)" if self.count < self.setting else ""
            )
            return f"restore.workers or --workers {self.setting}{capped}"
        if self.records < AUTO_MIN_RECORDS:
            return f"auto: under {AUTO_MIN_RECORDS:,} records"
        return (
            f"auto: {self.cores or 1} core(s), one worker per {CORES_PER_WORKER}, {self.units:,} source "
            f"partition(s), {self.records:,} records"
        )

    def text(self) -> str:
        return f"workers: {self.count} ({self.reason()})"

    def to_dict(self) -> dict[str, object]:
        return {
            "count": self.count,
            "setting": self.setting,
            "cores": self.cores,
            "source_partitions": self.units,
            "records": self.records,
            "reason": self.reason(),
        }


def choose_workers(
    setting: int | Literal["auto"], *, units: int, records: int, cores: int | None
) -> WorkersChoice:
    """The worker processes for ``units`` source partitions holding ``records`` on ``cores``."""
    if setting == "auto":
        count = auto_workers(records, units, cores, min_records=AUTO_MIN_RECORDS)
    else:
        count = max(1, min(setting, units))
    return WorkersChoice(count, setting, cores, units, records)


def workers_of(setting: int | Literal["auto"], plan: RestorePlan) -> WorkersChoice:
    """The worker processes a restore of ``plan`` runs on on this machine, and why."""
    records = sum(segment.record_count for p in plan.partitions for segment in p.segments)
    return choose_workers(setting, units=len(plan.partitions), records=records, cores=os.cpu_count())


def workers_for(setting: int | Literal["auto"], plan: RestorePlan) -> int:
    """The worker processes a restore of ``plan`` runs on (1: this process, today's path)."""
    return workers_of(setting, plan).count


def _check(task: UnitTask, _side: WorkerSide) -> UnitResult:
    return check_unit(task)


def _produce(task: UnitTask, side: WorkerSide) -> UnitResult:
    stop: StopSignal = side
    return produce_unit(task, stop=stop, on_produced=side.report)


#: The worker-side function of each job of the units.
_IN_WORKER: dict[Callable[[UnitTask], UnitResult], Callable[[UnitTask, WorkerSide], UnitResult]] = {
    check_unit: _check,
    produce_unit: _produce,
}


def run_on_workers(plan: RestorePlan, workers: int, job: UnitsJob) -> RestoreSummary:
    """Run the restore ``plan`` on ``workers`` processes, one unit per source partition at a time."""
    log.info(
        "restoring %d source partition(s) on %d worker process(es)",
        len(plan.partitions),
        workers,
        extra={"backup_id": plan.backup_id, "restore_id": plan.restore_id},
    )

    with WorkerPool[UnitTask]("restore", workers, _unit_of, job.stop) as pool:

        def run_job(
            tasks: list[UnitTask], task: Callable[[UnitTask], UnitResult], description: str
        ) -> list[UnitResult]:
            with job.progress or Progress(enabled=False) as bars:
                if task is produce_unit:
                    return _produce_job(pool, tasks, bars, job.metrics)
                with bars.task(description, total=len(tasks), unit="partitions") as bar:
                    return pool.run(tasks, _IN_WORKER[task], on_done=bar.advance)

        units = UnitsEngine(run_job, parallelism=workers, client_id=CLIENT_ID, counted_live=True)
        return run_units(plan, job, units, description=f"restore {plan.backup_id}")


def _unit_of(task: UnitTask) -> str:
    return f"source partition {task.plan.unit}"


def _produce_job(
    pool: WorkerPool[UnitTask], tasks: list[UnitTask], bars: Progress, metrics: RestoreMetrics | None
) -> list[UnitResult]:
    """The records: one bar per source topic as a single-process restore shows them, fed by the
    workers' batches, which the one metrics registry counts too."""
    expected: dict[tuple[str, str], int | None] = {}
    for task in tasks:
        assert task.checked is not None
        for totals in run_totals(task.checked).values():
            key = (totals.source_topic, totals.target_topic)
            before = expected.get(key, 0)
            expected[key] = None if before is None or totals.expected is None else before + totals.expected
    topic_bars: dict[str, ProgressTask] = {
        source: bars.task(f"restore {source} -> {target}", total=total, unit="records")
        for (source, target), total in expected.items()
    }

    def produced(source_topic: str, target_topic: str, records: int, size: int) -> None:
        topic_bars[source_topic].advance(records, data_bytes=size)
        if metrics is not None:
            metrics.records_produced(target_topic, records, size)

    if metrics is not None:
        metrics.producing(True)
    try:
        return pool.run(tasks, _IN_WORKER[produce_unit], on_report=produced)
    finally:
        if metrics is not None:
            metrics.producing(False)
        for bar in topic_bars.values():
            bar.close()
