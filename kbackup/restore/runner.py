"""Executing a restore plan: check, fence, plan the run again, create topics, produce, commit, verify.

The pieces: :mod:`~kbackup.restore.run_plan` (where this run starts and what it reads, checked
before anything is written), :mod:`~kbackup.restore.segment_reader` (segments decoded ahead on a
thread), :mod:`~kbackup.restore.batches` (a batch to the records produced, with origin headers),
:mod:`~kbackup.restore.writer` (the producer, transactions and progress), and
:mod:`~kbackup.restore.summary` (what the run did). This module runs them in order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from kbackup.core.errors import InterruptedByUser, KBackupError, UnverifiedError, VerificationError
from kbackup.core.faults import crash_point
from kbackup.core.gc_tuning import few_collections
from kbackup.core.kafka import Admin, KafkaClients, KafkaException
from kbackup.core.logs import get_logger
from kbackup.core.progress import Progress
from kbackup.core.retry import call_with_retries
from kbackup.core.throttle import Throttle
from kbackup.core.types import TopicPartitionKey
from kbackup.format.encryption import BackupKeys
from kbackup.format.restore_progress import PartitionProgress
from kbackup.restore.batches import batch_records
from kbackup.restore.compaction import CompactionFacts, CompactionTally
from kbackup.restore.integrity import SegmentWork
from kbackup.restore.metrics import RestoreMetrics
from kbackup.restore.plan import Mode, PartitionPlan, RestorePlan
from kbackup.restore.resume import PartitionState
from kbackup.restore.run_plan import RunPlan, plan_run, plan_run_after_fence, purge_before_first_record
from kbackup.restore.segment_reader import READ_BATCH_RECORDS, PrefetchingReader, SegmentEnd
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.summary import RestoreSummary, TopicTotals
from kbackup.restore.target import (
    PurgePlan,
    change_existing_topics,
    create_topics,
    switch_to_log_append_time,
)
from kbackup.restore.unit_fence import fence_units, may_follow_a_run_in_units
from kbackup.restore.writer import TargetWriter
from kbackup.storage import Storage

log = get_logger("restore")

#: Told of each batch produced: (source topic, target topic, records, bytes); a worker process
#: sends it to the parent's one progress bar and metrics registry.
ProducedBatch = Callable[[str, str, int, int], None]


class StopSignal(Protocol):
    """Set to stop at the next batch: a ``threading.Event`` (the CLI's), or a ``multiprocessing``
    one that the parent of worker processes sets for all of them."""

    def is_set(self) -> bool: ...


class Restorer:
    """Runs one restore plan against the target."""

    def __init__(
        self,
        plan: RestorePlan,
        storage: Storage,
        clients: KafkaClients,
        settings: RestoreSettings,
        *,
        progress: Progress | None = None,
        scratch_dir: Path | None = None,
        stop: StopSignal | None = None,
        metrics: RestoreMetrics | None = None,
        keys: BackupKeys | None = None,
        throttle_share: int = 1,
        purge: PurgePlan | None = None,
        on_produced: ProducedBatch | None = None,
    ) -> None:
        self.plan = plan
        #: ``restore.purge_target``, done by :meth:`run` once earlier runs are fenced.
        self.purge = purge
        self.storage = storage
        #: An encrypted backup's keys (None: not encrypted).
        self.keys = keys
        self.clients = clients
        self.settings = settings
        self.progress = progress
        self.scratch_dir = scratch_dir
        #: Set by the CLI's signal handler: stop at the next batch, after committing what was produced.
        self.stop: StopSignal = stop or threading.Event()
        self.on_produced = on_produced
        self.warnings = list(plan.warnings)
        self.metrics = metrics
        self.writer = TargetWriter(plan, clients, settings, self.warnings, metrics=metrics)
        #: The rate limits (restore.max_*_per_second), this run's ``throttle_share`` of them (Spark
        #: tasks that run at once split them); asked after every batch produced.
        self.throttle = restore_throttle(settings, metrics).share(throttle_share)
        if metrics is not None:
            self.throttle.on_wait = metrics.throttled
        #: The batch just produced, not yet paid for: (records, bytes).
        self._owed = (0, 0)
        #: Source partitions whose progress advanced since the last commit.
        self._dirty: dict[TopicPartitionKey, PartitionState] = {}
        self._landed_by_topic: dict[str, int] = {}
        #: Compacted target topics, by source topic: what the target's cleaner may remove.
        self._compaction = {
            topic.source_topic: CompactionTally(topic.target_topic, topic.cleanup_policy)
            for topic in plan.topics
            if topic.compacted
        }

    def run(self) -> RestoreSummary:
        started = time.monotonic()
        checked = self.check(started)
        # Before the first write of any kind (the fence registers the transactional id): a refused
        # check leaves an existing topic as it was.
        changed = change_existing_topics(self.clients, self.plan)
        run = self.fenced(checked, started)
        purged = purge_before_first_record(self.clients, self.purge, self.settings, mode=run.mode)
        created = create_topics(self.clients, self.plan, progress_topic=run.creates_progress_topic)
        self._phase("topics created", started)
        produced = self.produce(run, started)
        return conclude(
            self.plan,
            self.clients,
            self.settings,
            [produced],
            created=created,
            seconds_since=started,
            changed=changed,
            purged=purged,
        )

    def check(self, started: float) -> RunPlan:
        """Every check that writes nothing to the target, from the progress as earlier runs left it
        (read without fencing): the timestamp types, the topics to create (validated by the
        broker), every segment still to read. A refused restore leaves the target as it was: the
        transactional producer of :meth:`fenced` already writes to it (its id, in
        __transaction_state)."""
        checked = plan_run(
            self.plan,
            self.storage,
            self.clients,
            self.settings,
            mode=self.plan.mode,
            scratch_dir=self.scratch_dir,
            progress=self.progress,
            keys=self.keys,
        )
        self._phase(f"{len(checked.work)} segment(s) checked", started)
        return checked

    def fenced(self, checked: RunPlan, started: float, *, reread: bool = False) -> RunPlan:
        """In the exactly-once mode, fence any earlier run of this restore and abort its open
        transaction: only progress read after that is final (an unfenced run could still commit),
        so it is read again, and the segments it adds are checked. ``reread``: read the resume
        point again in the idempotent mode too (a Spark task attempt after one that produced)."""
        mode = self.writer.fence()
        self._phase(f"mode {mode}", started)
        if mode == "exactly-once" and may_follow_a_run_in_units(self.plan):
            # An earlier run on workers writes under its units' ids, which the fence above leaves open.
            fence_units(self.plan, self.clients, self.settings)
            self._phase("units of earlier runs fenced", started)
        run = plan_run_after_fence(
            checked,
            self.storage,
            self.clients,
            self.settings,
            mode=mode,
            scratch_dir=self.scratch_dir,
            progress=self.progress,
            reread=reread,
            keys=self.keys,
        )
        self.warnings.extend(run.point.warnings)
        self._phase(f"{len(run.work)} segment(s) to read", started)
        return run

    def produce(self, run: RunPlan, started: float) -> ProducedPart:
        """Produce and commit what ``run`` has left to write; what was done, for :func:`conclude`."""
        totals = run_totals(run)
        if self.metrics is not None:
            report_planned(self.metrics, totals.values())
        with self.progress or Progress(enabled=False) as bars:
            tasks = {
                name: bars.task(
                    f"restore {t.source_topic} -> {t.target_topic}", total=t.expected, unit="records"
                )
                for name, t in totals.items()
            }
            if self.metrics is not None:
                self.metrics.producing(True)
            try:
                with few_collections():
                    self._produce_all(run, totals, tasks)
            finally:
                if self.metrics is not None:
                    self.metrics.producing(False)
                # Done, failed or interrupted: each bar stays where its topic got to, its clock stops.
                for task in tasks.values():
                    task.close()
        self._phase("records produced and committed", started)
        return ProducedPart(
            mode=run.mode,
            totals=list(totals.values()),
            landed_by_topic=dict(self._landed_by_topic),
            transactions=self.writer.transactions,
            timestamps_not_kept=self.writer.timestamps_not_kept,
            resumed=run.point.resumed,
            warnings=list(self.warnings),
            compaction=[tally.facts(resumed=run.point.resumed) for tally in self._compaction.values()],
            throttled_secs=self.throttle.waited_secs,
        )

    def _phase(self, what: str, started: float) -> None:
        log.info(
            "%s after %.2fs",
            what,
            time.monotonic() - started,
            extra={"backup_id": self.plan.backup_id, "restore_id": self.plan.restore_id},
        )

    def _complete(self, key: TopicPartitionKey, state: PartitionState) -> None:
        state.next_offset = max(state.next_offset, state.plan.offset_end)
        state.complete = True
        self._dirty[key] = state
        log.info(
            "%s/%d: restored to %s up to source offset %d (%d record(s) in this run)",
            key[0],
            key[1],
            state.plan.target_topic,
            state.next_offset,
            state.restored_records,
            extra={
                "backup_id": self.plan.backup_id,
                "restore_id": self.plan.restore_id,
                "topic": key[0],
                "partition": key[1],
                "target_topic": state.plan.target_topic,
            },
        )

    def _take_progress(self) -> list[PartitionProgress]:
        progress = [state.progress() for state in self._dirty.values()]
        self._dirty.clear()
        return progress

    def _produce_all(self, run: RunPlan, totals: dict[str, TopicTotals], tasks: dict[str, Any]) -> None:
        writer = self.writer
        writer.open()
        states = run.point.states
        # The last segment of each source partition: the partition is complete once it is read.
        last_work_of: dict[TopicPartitionKey, SegmentWork] = {}
        for item in run.work:
            last_work_of[(item.partition.source_topic, item.partition.source_partition)] = item
        batch_size = READ_BATCH_RECORDS
        if writer.transactional:
            batch_size = max(64, min(READ_BATCH_RECORDS, self.settings.transaction_max_records))
            # Partitions with nothing (left) to restore are recorded as complete in the first commit.
            for key, state in states.items():
                if key not in last_work_of and not state.complete:
                    self._complete(key, state)
        reader = PrefetchingReader(
            self.storage,
            self.plan.backup_id,
            run.work,
            batch_records=batch_size,
            scratch_dir=self.scratch_dir,
            keys=self.keys,
        )
        try:
            for entry in reader:
                if isinstance(entry, SegmentEnd):
                    key = (entry.work.partition.source_topic, entry.work.partition.source_partition)
                    if last_work_of.get(key) is entry.work:
                        self._complete(key, states[key])
                    continue
                segment_work, batch = entry
                self._write_batch(segment_work.partition, batch, states, totals, tasks)
                self._commit_or_stop()
            writer.finish(self._take_progress())
        except KBackupError:
            writer.abandon()
            raise
        except KafkaException as exc:
            writer.abandon()
            raise writer.translate(exc, "produce records") from None
        finally:
            reader.close()
        self._log_landed()

    def _log_landed(self) -> None:
        for name, landed in self._landed_by_topic.items():
            log.info(
                "%s: %d record(s) were already on the target",
                name,
                landed,
                extra={"backup_id": self.plan.backup_id, "restore_id": self.plan.restore_id, "topic": name},
            )

    def _write_batch(
        self,
        partition: PartitionPlan,
        batch: pa.RecordBatch,
        states: dict[TopicPartitionKey, PartitionState],
        totals: dict[str, TopicTotals],
        tasks: dict[str, Any],
    ) -> None:
        """Produce the selected records of one batch of a source partition (in the open
        transaction, if any) and count them; the partition's progress is committed with them."""
        key = (partition.source_topic, partition.source_partition)
        state = states[key]
        records = batch_records(
            state, batch, source_cluster=self.plan.source_cluster, stamp=self.plan.origin_headers
        )
        self._dirty[key] = state
        if records is None:
            return
        metrics = self.metrics
        topic_totals = totals[partition.source_topic]
        if records.dropped or records.tombstoned:
            topic_totals.dropped += records.dropped
            topic_totals.tombstoned += records.tombstoned
            if metrics is not None:
                metrics.records_filtered(
                    partition.target_topic, dropped=records.dropped, tombstoned=records.tombstoned
                )
        if records.already_landed:
            self._landed_by_topic[partition.source_topic] = (
                self._landed_by_topic.get(partition.source_topic, 0) + records.already_landed
            )
            if metrics is not None:
                metrics.records_already_landed(partition.target_topic, records.already_landed)
        produced = self.writer.produce(partition.target_topic, records) if records.offsets else 0
        crash_point("restore:batch-produced")
        crash_point("restore:records-produced", produced)
        tally = self._compaction.get(partition.source_topic)
        if tally is not None and produced:
            tally.add(records.targets, records.keys, records.values)
        state.restored_records += produced
        topic_totals.records += produced
        topic_totals.bytes += records.size
        tasks[partition.source_topic].advance(produced, data_bytes=records.size)
        self._owed = (produced, records.size)
        if metrics is not None:
            metrics.records_produced(partition.target_topic, produced, records.size)
        if self.on_produced is not None:
            self.on_produced(partition.source_topic, partition.target_topic, produced, records.size)

    def _commit_or_stop(self) -> None:
        """After a batch: commit the transaction when it is due; on a stop signal, commit what was
        produced and end the run."""
        writer = self.writer
        writer.serve_deliveries()
        (records, size), self._owed = self._owed, (0, 0)
        wait = self.throttle.reserve(records=records, data_bytes=size)
        # Due by the end of the wait: committed before it, so no transaction stays open while the
        # run waits on its rate limit (a long wait would outlast transaction.timeout.ms).
        if writer.transaction_due(after_secs=wait):
            writer.commit(self._take_progress(), begin_next=True)
        self.throttle.wait(wait)
        if self.stop.is_set():
            writer.finish(self._take_progress())
            raise InterruptedByUser(
                "restore stopped by a signal after committing what it had produced",
                hint="run the same command again to continue",
            )


def run_totals(run: RunPlan) -> dict[str, TopicTotals]:
    """Per source topic of the run's plan: what earlier runs restored, and what this run must."""
    expected = run.expected_per_topic()
    earlier = run.point.earlier
    return {
        t.source_topic: TopicTotals(
            t.source_topic,
            t.target_topic,
            # Earlier runs' counts are known from the exactly-once progress only.
            earlier=earlier.get(t.source_topic, 0)
            if run.mode == "exactly-once"
            else (None if run.point.resumed else 0),
            expected=expected[t.source_topic],
        )
        for t in run.plan.topics
    }


def report_planned(metrics: RestoreMetrics, totals: Iterable[TopicTotals]) -> None:
    """Before producing: each target topic's records in all and those earlier runs put there
    (``totals`` of one run, or of every unit of a Spark restore)."""
    planned: dict[str, int | None] = {}
    landed: dict[str, int] = {}
    for topic in totals:
        name, earlier = topic.target_topic, topic.earlier or 0
        before = planned.get(name, 0)
        planned[name] = (
            None if before is None or topic.expected is None else before + earlier + topic.expected
        )
        landed[name] = landed.get(name, 0) + earlier
    for name, count in planned.items():
        metrics.restore_planned(name, planned=count, landed=landed[name])


def restore_throttle(settings: RestoreSettings, metrics: RestoreMetrics | None = None) -> Throttle:
    """The restore's rate limits as set (no limit: a throttle that never waits); ``metrics`` hears them."""
    if metrics is not None:
        metrics.rate_limited(
            bytes_per_second=settings.max_bytes_per_second, records_per_second=settings.max_records_per_second
        )
    return Throttle(
        bytes_per_second=settings.max_bytes_per_second, records_per_second=settings.max_records_per_second
    )


@dataclass
class ProducedPart:
    """What producing a run plan did: the whole restore's on the local engine, one unit's on Spark."""

    mode: Mode
    totals: list[TopicTotals]
    #: Records found already on the target and not produced again (idempotent resume), per topic.
    landed_by_topic: dict[str, int]
    transactions: int
    timestamps_not_kept: int
    resumed: bool
    warnings: list[str]
    compaction: list[CompactionFacts]
    #: Seconds the run (or the unit's task) waited on its rate limits.
    throttled_secs: float = 0.0


def conclude(
    plan: RestorePlan,
    clients: KafkaClients,
    settings: RestoreSettings,
    parts: list[ProducedPart],
    *,
    created: list[str],
    seconds_since: float,
    changed: list[str] | None = None,
    purged: list[str] | None = None,
) -> RestoreSummary:
    """After every record is produced: wait until read_committed consumers see them (every run
    waits, also one with nothing left to write: the run that wrote the records may have stopped
    at this check), switch topics to LogAppendTime if asked, and check the counts. ``changed``: what
    ``restore.existing_topics: apply`` changed on existing topics before the first record."""
    # A unit that fell back to the idempotent mode (``exactly_once: auto``) makes the restore so.
    mode: Mode = "idempotent" if any(part.mode == "idempotent" for part in parts) else plan.mode
    if mode == "exactly-once":
        wait_until_visible(plan, clients, settings, [t.target_topic for t in plan.topics])
        log.info("commit markers written", extra={"backup_id": plan.backup_id, "restore_id": plan.restore_id})
    switched = switch_to_log_append_time(clients, plan)
    landed: dict[str, int] = {}
    for part in parts:
        for name, count in part.landed_by_topic.items():
            landed[name] = landed.get(name, 0) + count
    summary = RestoreSummary(
        restore_id=plan.restore_id,
        backup_id=plan.backup_id,
        mode=mode,
        target=plan.target,
        topics=merged_totals(plan, parts),
        created_topics=created,
        transactions=sum(part.transactions for part in parts),
        seconds=time.monotonic() - seconds_since,
        resumed=any(part.resumed for part in parts),
        already_landed=sum(landed.values()),
        timestamps_not_kept=sum(part.timestamps_not_kept for part in parts),
        warnings=list(dict.fromkeys(warning for part in parts for warning in part.warnings)),
        compaction=merged_compaction(parts),
        switched_to_log_append_time=switched,
        existing_topics_changed=list(changed or []),
        throttled_secs=sum(part.throttled_secs for part in parts),
        purged=list(purged or []),
    )
    check_counts(summary, landed)
    return summary


def merged_totals(plan: RestorePlan, parts: list[ProducedPart]) -> list[TopicTotals]:
    """Each topic's totals over the parts, in the plan's topic order."""
    merged: dict[str, TopicTotals] = {}
    for part in parts:
        for item in part.totals:
            into = merged.get(item.source_topic)
            if into is None:
                merged[item.source_topic] = TopicTotals(**item.__dict__)
                continue
            into.records += item.records
            into.bytes += item.bytes
            into.dropped += item.dropped
            into.tombstoned += item.tombstoned
            into.earlier = (
                None if into.earlier is None or item.earlier is None else into.earlier + item.earlier
            )
            into.expected = (
                None if into.expected is None or item.expected is None else into.expected + item.expected
            )
    return [merged[topic.source_topic] for topic in plan.topics if topic.source_topic in merged]


def merged_compaction(parts: list[ProducedPart]) -> list[CompactionFacts]:
    """Per compacted topic, the parts' facts added up (one part: its own)."""
    merged: dict[str, CompactionFacts] = {}
    for part in parts:
        for facts in part.compaction:
            before = merged.get(facts.topic)
            merged[facts.topic] = (
                facts
                if before is None
                else CompactionFacts(
                    facts.topic,
                    before.records + facts.records,
                    before.may_remove + facts.may_remove,
                    facts.why.split(":")[0] + ": counted within each source partition's records "
                    "(engine: spark and restore.workers restore each source partition on its own)",
                )
            )
    return list(merged.values())


def wait_until_visible(
    plan: RestorePlan, clients: KafkaClients, settings: RestoreSettings, topics: list[str]
) -> None:
    """Return only once read_committed consumers see every committed record.

    A commit returns when the coordinator has decided it; the markers that make
    the records readable reach each partition a moment later. Waiting for every
    partition's last stable offset to reach its end lets the next step (the
    mapping stage, a check) read the restored topics at once. Not seeing them
    fails the run: a mapping read now could miss records. The run is resumable
    (everything is committed), and a re-run checks again.
    """
    partitions = [
        (topic, q)
        for topic in topics
        for q in range(next(t.target_partitions for t in plan.topics if t.target_topic == topic))
    ]
    admin = Admin(clients)
    try:
        ends = admin.list_offsets(partitions, "latest", read_committed=False)
        pending = sorted(partitions)

        def below_their_ends() -> list[TopicPartitionKey]:
            nonlocal pending
            stable = admin.list_offsets(pending, "latest", read_committed=True)
            pending = [key for key in pending if stable[key] < ends[key]]
            return pending

        pending = call_with_retries(
            below_their_ends, within_secs=settings.timeout_secs, delay_secs=0.05, until=lambda left: not left
        )
        if pending:
            named = ", ".join(f"{topic}/{partition}" for topic, partition in pending[:5])
            more = f" and {len(pending) - 5} more" if len(pending) > 5 else ""
            raise UnverifiedError(
                f"restored records of {named}{more} were committed but not readable with "
                f"read_committed after {settings.timeout_secs:g}s (its last stable offset "
                "stays below its end: a commit marker not yet written, or another producer's "
                "open transaction on the topic)",
                hint="run the same command again: the records are committed and it checks again "
                "(restore.timeout_secs waits longer)",
                retryable=True,
            )
    except UnverifiedError:
        raise
    except KBackupError as exc:
        raise UnverifiedError(
            f"could not check that the restored records are readable with read_committed: {exc}",
            hint="run the same command again: the records are committed and it checks again",
            retryable=True,
        ) from exc


def check_counts(summary: RestoreSummary, landed_by_topic: dict[str, int]) -> None:
    """Every topic got the records its selection holds (earlier runs' and found-landed included)."""
    for topic in summary.topics:
        if topic.expected is None:
            continue
        done = topic.records + landed_by_topic.get(topic.source_topic, 0)
        if done != topic.expected:
            raise VerificationError(
                f"topic {topic.source_topic}: {done} record(s) restored, the backup selection holds "
                f"{topic.expected}",
                hint="run the same command again; report this if it repeats",
            )
    summary.verified = all(topic.expected is not None for topic in summary.topics)
