"""What one run of a restore will do, worked out once and checked before anything is written.

The restore plan (``kbackup.restore.plan``) says what the whole restore is; a run of it starts
where earlier runs stopped. :func:`plan_run` reads that resume point, derives the segments still to
read, has the broker validate the topics to create, and checks those segments (sizes, SHA-256,
counts of partly selected ones). ``--dry-run`` prints it; a run executes it. Nothing here writes
to the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kbackup.core.kafka import KafkaClients
from kbackup.core.progress import Progress
from kbackup.restore.integrity import SegmentWork, remaining_segments, verify_work
from kbackup.restore.plan import Mode, RestorePlan
from kbackup.restore.resume import ResumePoint, resume_point
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.target import create_topics
from kbackup.storage import Storage


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
    dry_run: bool,
    scratch_dir: Path | None = None,
    progress: Progress | None = None,
) -> RunPlan:
    """The resume point, the segments still to read (checked), and the topics to create (validated)."""
    point = resume_point(plan, clients, settings, mode=mode, dry_run=dry_run)
    work = [
        item for state in point.states.values() for item in remaining_segments(state.plan, state.next_offset)
    ]
    run = RunPlan(plan=plan, mode=mode, point=point, work=work, counts={})
    create_topics(clients, plan, progress_topic=run.creates_progress_topic, validate_only=True)
    with progress or Progress(enabled=False) as bars:
        task = bars.task("check backup segments", total=len(work))
        run.counts = verify_work(
            storage,
            plan.backup_id,
            work,
            checksums=settings.verify_checksums,
            scratch_dir=scratch_dir,
            on_segment=lambda _item: task.advance(),
        )
    return run
