"""What one run of a restore will do, worked out once and checked before anything is written.

The restore plan (``kbackup.restore.plan``) says what the whole restore is; a run of it starts
where earlier runs stopped. :func:`plan_run` reads that resume point, derives the segments still to
read, refuses to write into an existing LogAppendTime topic (unless told to), has the broker
validate the topics to create, and checks those segments (sizes, SHA-256, counts of partly
selected ones). ``--dry-run`` prints it; a run executes it. Nothing here writes to the target.

A run in the exactly-once mode plans twice: first without fencing (so a damaged segment is
refused before the transactional producer registers anything on the target), then, once
``init_transactions`` has fenced earlier runs, :func:`plan_run_after_fence` reads the progress
again (only a fenced read is final: an earlier run could otherwise still commit behind it) and
checks the segments the final resume point adds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kbackup.core.errors import PreconditionError
from kbackup.core.faults import crash_point
from kbackup.core.kafka import KafkaClients
from kbackup.core.logs import get_logger
from kbackup.core.progress import Progress
from kbackup.format.encryption import BackupKeys
from kbackup.restore.integrity import SegmentWork, remaining_segments, verify_work
from kbackup.restore.plan import Mode, RestorePlan, refuse_rewritten_timestamps
from kbackup.restore.resume import ResumePoint, resume_point
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.target import PurgePlan, create_topics, purge_target_topics
from kbackup.storage import Storage

log = get_logger("restore.run_plan")


@dataclass
class RunPlan:
    """Where each source partition starts in this run, and the segments still to read."""

    plan: RestorePlan
    #: The mode of this run (the plan's, unless ``exactly_once: auto`` found no transactions).
    mode: Mode
    point: ResumePoint
    #: In restore order.
    work: list[SegmentWork]
    #: Selected records of each segment to read, by segment key, where they were counted.
    counts: dict[str, int]

    @property
    def creates_progress_topic(self) -> bool:
        return self.mode == "exactly-once" and self.plan.create_progress_topic

    @property
    def records_to_write(self) -> int | None:
        """Records this run will produce; None where segments were not counted."""
        if not all(item.segment.key in self.counts for item in self.work):
            return None
        return sum(self.counts[item.segment.key] for item in self.work)

    @property
    def records_upper_bound(self) -> int:
        return sum(item.segment.record_count for item in self.work)

    def expected_per_topic(self) -> dict[str, int | None]:
        """Records this run must produce per source topic (None: not all counted)."""
        expected: dict[str, int | None] = {topic.source_topic: 0 for topic in self.plan.topics}
        for item in self.work:
            topic = item.partition.source_topic
            count, total = self.counts.get(item.segment.key), expected[topic]
            expected[topic] = None if count is None or total is None else total + count
        return expected


def plan_run(
    plan: RestorePlan,
    storage: Storage,
    clients: KafkaClients,
    settings: RestoreSettings,
    *,
    mode: Mode,
    scratch_dir: Path | None = None,
    progress: Progress | None = None,
    keys: BackupKeys | None = None,
) -> RunPlan:
    """The resume point, the segments still to read (checked), and the topics to create (validated).

    Nothing is fenced: progress held by an open transaction is counted, not waited for.
    """
    point = resume_point(plan, clients, settings, mode=mode, dry_run=True)
    work = _work_of(point)
    run = RunPlan(plan=plan, mode=mode, point=point, work=work, counts={})
    refuse_rewritten_timestamps(plan, {item.partition.target_topic for item in work})
    create_topics(clients, plan, progress_topic=run.creates_progress_topic, validate_only=True)
    run.counts = _check(run.work, storage, plan, settings, scratch_dir, progress, keys)
    return run


def plan_run_after_fence(
    checked: RunPlan,
    storage: Storage,
    clients: KafkaClients,
    settings: RestoreSettings,
    *,
    mode: Mode,
    scratch_dir: Path | None = None,
    progress: Progress | None = None,
    reread: bool = False,
    keys: BackupKeys | None = None,
) -> RunPlan:
    """The run's final plan, once earlier runs are fenced: the resume point read again (now final),
    and only the segments it adds to ``checked`` (the plan made before fencing) checked.

    In the idempotent mode nothing is fenced and the resume point does not change: ``checked`` is
    final, unless ``reread`` (something may have produced since ``checked`` was made).
    """
    if mode == "idempotent" and checked.mode == "idempotent" and not reread:
        return checked
    plan = checked.plan
    point = resume_point(plan, clients, settings, mode=mode, dry_run=False)
    run = RunPlan(plan=plan, mode=mode, point=point, work=_work_of(point), counts={})
    refuse_rewritten_timestamps(plan, {item.partition.target_topic for item in run.work})
    known, added = split_checked(run.work, checked)
    run.counts = {**known, **_check(added, storage, plan, settings, scratch_dir, progress, keys)}
    return run


def split_checked(work: list[SegmentWork], checked: RunPlan) -> tuple[dict[str, int], list[SegmentWork]]:
    """The counts ``checked`` already has for ``work`` (a segment read from the same offset), and
    the items it did not check."""
    before = {_read_from(item) for item in checked.work}
    known: dict[str, int] = {}
    added: list[SegmentWork] = []
    for item in work:
        if _read_from(item) not in before:
            added.append(item)
        elif item.segment.key in checked.counts:
            known[item.segment.key] = checked.counts[item.segment.key]
    return known, added


def _read_from(item: SegmentWork) -> tuple[str, int]:
    """A segment and the offset its selected records are read from (which decides their count)."""
    return item.segment.key, max(item.from_offset, item.segment.first_offset)


def _work_of(point: ResumePoint) -> list[SegmentWork]:
    return [
        item for state in point.states.values() for item in remaining_segments(state.plan, state.next_offset)
    ]


def _check(
    work: list[SegmentWork],
    storage: Storage,
    plan: RestorePlan,
    settings: RestoreSettings,
    scratch_dir: Path | None,
    progress: Progress | None,
    keys: BackupKeys | None,
) -> dict[str, int]:
    """Sizes and SHA-256 of ``work``'s segments; the selected records of each one counted."""
    if not work:
        return {}
    with (
        progress or Progress(enabled=False) as bars,
        bars.task("check backup segments", total=len(work), unit="segments") as task,
    ):
        return verify_work(
            storage,
            plan.backup_id,
            work,
            checksums=settings.verify_checksums,
            scratch_dir=scratch_dir,
            on_segment=lambda _item: task.advance(),
            keys=keys,
        )


def purge_before_first_record(
    clients: KafkaClients, purge: PurgePlan | None, settings: RestoreSettings, *, mode: Mode
) -> list[str]:
    """``restore.purge_target``, once per restore: after earlier runs are fenced, before the
    first record. What a run restored is its resume point (the exactly-once progress, or the
    origin headers at the target's ends), read again now from the plan made before any purge:
    an earlier run that restored anything is continued, never purged. A run killed after the
    purge and before its first committed record left nothing of its own there (an open
    transaction is aborted by the fence), so its rerun purges again. What was purged, a line per topic.
    """
    if purge is None or purge.skipped or not purge.steps:
        return []
    if resume_point(purge.original, clients, settings, mode=mode, dry_run=False).resumed:
        if purge.how == "topics":
            # This run was planned for created topics: only a new plan continues the earlier run.
            raise PreconditionError(
                "an earlier run of this restore restored records into the target since this run "
                "was planned: its topics are not purged",
                hint="run the same command again: it continues that run without purging",
            )
        log.info("an earlier run of this restore restored into the target: nothing purged")
        return []
    purged = purge_target_topics(clients, purge, timeout_secs=settings.timeout_secs)
    crash_point("restore:purged")
    return purged
