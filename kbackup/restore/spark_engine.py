"""A restore run by Spark tasks (``engine: spark``; docs/scaling.md).

The work is split by source partition (:mod:`~kbackup.restore.units`, which says the order of
steps): each unit is the restore plan narrowed to one source partition, run by the local engine's
:class:`~kbackup.restore.runner.Restorer` in a task, with its own producer. Order within a source
partition is the order one producer sends it in, as on the local engine; origin headers are the
same. Where a restore repartitions, several units feed one target partition, each with its own
producer: records of different source partitions interleave there on either engine, and each
source partition's order is kept.

A task attempt that dies is run again by Spark and resumes from its unit's committed progress
(exactly-once) or from the origin headers at the end of its target partitions (idempotent),
exactly as a rerun of the command does.
"""

from __future__ import annotations

from collections.abc import Callable

from kbackup.core.errors import KBackupError
from kbackup.core.logs import get_logger
from kbackup.core.spark import SparkEngine, job_failed, run_spark_tasks
from kbackup.restore.plan import RestorePlan
from kbackup.restore.summary import RestoreSummary
from kbackup.restore.units import UnitResult, UnitsEngine, UnitsJob, UnitTask, run_units

log = get_logger("restore.spark")


def run_on_spark(plan: RestorePlan, engine: SparkEngine, job: UnitsJob) -> RestoreSummary:
    """Run the restore ``plan`` as Spark tasks, one per source partition (see the module)."""
    session = engine.session("kafka-backup-restore")
    log.info(
        "restoring %d source partition(s) in Spark tasks on %s",
        len(plan.partitions),
        session.sparkContext.master,
        extra={"backup_id": plan.backup_id, "restore_id": plan.restore_id},
    )

    def run_job(
        tasks: list[UnitTask], task: Callable[[UnitTask], UnitResult], description: str
    ) -> list[UnitResult]:
        # The driver's loop is Spark's while the tasks run: /healthz leaves it unwatched (Spark's own
        # timeouts and task retries stand for it), as between the phases of a local restore.
        try:
            return run_spark_tasks(
                session, tasks, task, description=description, progress=job.progress, stop=job.stop
            )
        except KBackupError:
            raise
        except Exception as exc:
            raise job_failed(
                exc,
                what="the restore",
                hint="what was committed stays; the driver's and the executors' logs say more. Run the "
                "same command again: the restore continues where each source partition got to",
            ) from None

    # The rate limits are split over the units that produce at once: all of them, up to the cores
    # Spark has.
    units = UnitsEngine(run_job, parallelism=int(session.sparkContext.defaultParallelism))
    description = f"kafka-backup restore {plan.backup_id} ({plan.restore_id})"
    return run_units(plan, job, units, description=description)
