"""Where a run of a restore starts: what earlier runs of the same restore got to.

In the exactly-once mode, the progress records committed with the restored records (see
``kbackup.format.restore_progress``). Without transactions (the idempotent mode), the target's
origin headers:

For each target partition the restore writes to, the records at its end are
read backwards, in growing windows, until the last restored record of every
source partition that feeds it is found (or the partition's start is reached).
Records of one source partition reach each target partition in source order
from one idempotent producer, so a target partition holds a *prefix* of the
records routed to it: a record whose source offset is at or below the last one
found there has landed, every later one has not. Limits: docs/restore.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kbackup.core.kafka import Admin, KafkaClients, PartitionReader
from kbackup.core.logs import get_logger
from kbackup.core.types import TopicPartitionKey
from kbackup.format.origin import parse_origin
from kbackup.format.restore_progress import PartitionProgress
from kbackup.restore.plan import Mode, PartitionPlan, RestorePlan
from kbackup.restore.progress_store import read_progress
from kbackup.restore.settings import RestoreSettings

log = get_logger("restore.resume")

FIRST_WINDOW = 500


@dataclass
class LandedRecords:
    """For each source partition: per target partition, the highest source offset found there."""

    by_source: dict[TopicPartitionKey, dict[int, int]] = field(default_factory=dict)
    #: Target records read while looking.
    scanned: int = 0

    def last_offsets(self, source: TopicPartitionKey) -> dict[int, int]:
        return self.by_source.get(source, {})


def find_landed(
    clients: KafkaClients,
    partitions: list[PartitionPlan],
    source_cluster: str,
    *,
    timeout: float,
    missing_topics: frozenset[str] = frozenset(),
) -> LandedRecords:
    """Scan the end of every target partition the plan writes to for this restore's origin headers.

    ``missing_topics`` (the plan creates them) hold nothing and are not read.
    """
    feeders = _feeders(partitions, missing_topics)
    landed = LandedRecords()
    # Partitions not created yet hold nothing: they are left out of the answer.
    admin = Admin(clients)
    ends = admin.list_offsets(feeders, "latest", read_committed=False, missing_ok=True)
    starts = admin.list_offsets(ends, "earliest", read_committed=False, missing_ok=True)
    deadline = time.monotonic() + timeout
    with PartitionReader(clients) as reader:
        for (topic, partition), wanted in sorted(feeders.items()):
            if (topic, partition) not in ends or (topic, partition) not in starts:
                continue
            search = _BackwardSearch(reader, topic, partition, wanted, source_cluster, deadline, landed)
            found, window_end = search.run(starts[(topic, partition)], ends[(topic, partition)])
            for source, offset in found.items():
                landed.by_source.setdefault(source, {})[partition] = offset
            log.info(
                "%s/%s: last restored source offsets %s (scanned back to %s)",
                topic,
                partition,
                found,
                window_end,
                extra={"topic": topic, "partition": partition},
            )
    return landed


def _feeders(
    partitions: list[PartitionPlan], missing_topics: frozenset[str]
) -> dict[tuple[str, int], set[TopicPartitionKey]]:
    """Each existing target partition the plan writes to, and the source partitions feeding it."""
    feeders: dict[tuple[str, int], set[TopicPartitionKey]] = {}
    for plan in partitions:
        if plan.target_topic in missing_topics:
            continue
        for target_partition in plan.target_partitions_fed():
            feeders.setdefault((plan.target_topic, target_partition), set()).add(
                (plan.source_topic, plan.source_partition)
            )
    return feeders


@dataclass
class _BackwardSearch:
    """One target partition read backwards, in growing windows, for the last record of each of
    the ``wanted`` source partitions."""

    reader: PartitionReader
    topic: str
    partition: int
    wanted: set[TopicPartitionKey]
    source_cluster: str
    deadline: float
    #: Counts the records read.
    landed: LandedRecords

    def run(self, low: int, high: int) -> tuple[dict[TopicPartitionKey, int], int]:
        """The highest source offset found per wanted source partition, and where the search stopped."""
        found: dict[TopicPartitionKey, int] = {}
        window_end, size = high, FIRST_WINDOW
        while window_end > low and not self.wanted <= found.keys():
            window_start = max(low, window_end - size)
            # A later window is older: what an earlier (newer) window found stays.
            for source, offset in self._window(window_start, window_end).items():
                if source not in found:
                    found[source] = offset
            window_end, size = window_start, size * 4
        return found, window_end

    def _window(self, start: int, end: int) -> dict[TopicPartitionKey, int]:
        """The highest source offset of each wanted source partition among ``start..end``."""
        seen: dict[TopicPartitionKey, int] = {}
        for batch in self.reader.batches(
            self.topic,
            self.partition,
            start,
            end,
            timeout_secs=max(0.0, self.deadline - time.monotonic()),
        ):
            self.landed.scanned += len(batch)
            for message in batch:
                headers = message.headers()
                origin = parse_origin(headers if isinstance(headers, list) else None)
                if origin is None or origin.cluster != self.source_cluster:
                    continue
                source = (origin.topic, origin.partition)
                if source in self.wanted:
                    seen[source] = max(seen.get(source, -1), origin.offset)
        return seen


@dataclass
class PartitionState:
    """Where the restore of one source partition stands during a run."""

    plan: PartitionPlan
    next_offset: int
    restored_records: int
    complete: bool = False
    #: Idempotent resume: per target partition, the highest source offset already there.
    landed: dict[int, int] = field(default_factory=dict)

    def progress(self) -> PartitionProgress:
        return PartitionProgress(
            source_topic=self.plan.source_topic,
            source_partition=self.plan.source_partition,
            target_topic=self.plan.target_topic,
            next_offset=self.next_offset,
            restored_records=self.restored_records,
            complete=self.complete,
        )


@dataclass
class ResumePoint:
    """Where each source partition starts in this run, and what an earlier run did."""

    states: dict[TopicPartitionKey, PartitionState]
    resumed: bool
    #: Records restored by earlier runs (exactly-once progress), per source topic.
    earlier: dict[str, int]
    #: Dry runs: progress records held by an open transaction.
    undecided: int = 0
    warnings: list[str] = field(default_factory=list)


def resume_point(
    plan: RestorePlan,
    clients: KafkaClients,
    settings: RestoreSettings,
    *,
    mode: Mode,
    dry_run: bool = False,
) -> ResumePoint:
    """Read where earlier runs of this restore got to: the progress topic in the exactly-once
    ``mode``, else the origin headers at the end of the target partitions.

    A dry run does not wait for a progress record held by an open transaction (it counts them);
    a run calls this after fencing, when its own earlier transaction is already aborted.
    """
    progress_topic_exists = not plan.create_progress_topic
    states = {
        (p.source_topic, p.source_partition): PartitionState(
            plan=p,
            next_offset=p.offset_start,
            restored_records=0,
        )
        for p in plan.partitions
    }
    earlier: dict[str, int] = {}
    resumed = False
    undecided = 0
    stale: set[str] = set()
    if mode == "exactly-once":
        if progress_topic_exists:
            read = read_progress(
                clients,
                plan.progress_topic,
                plan.restore_id,
                timeout=settings.timeout_secs,
                wait_for_open_transactions=not dry_run,
            )
            undecided = read.undecided
            entries = {key: entry for key, entry in read.entries.items() if key in states}
            stale = _topics_lost_since(plan, clients, entries)
            for key, entry in entries.items():
                state = states[key]
                if state.plan.target_topic in stale:
                    continue
                resumed = True
                state.next_offset = max(state.next_offset, entry.next_offset)
                state.restored_records = entry.restored_records
                state.complete = entry.complete and entry.next_offset >= state.plan.offset_end
                earlier[key[0]] = earlier.get(key[0], 0) + entry.restored_records
    elif plan.origin_headers:
        landed = find_landed(
            clients,
            plan.partitions,
            plan.source_cluster,
            timeout=settings.timeout_secs,
            missing_topics=frozenset(t.target_topic for t in plan.topics if t.create),
        )
        for key, state in states.items():
            found = landed.last_offsets(key)
            if not found:
                continue
            resumed = True
            state.landed = dict(found)
            fed = state.plan.target_partitions_fed()
            if all(q in found for q in fed):
                state.next_offset = max(state.next_offset, min(found[q] for q in fed) + 1)
    warnings = [
        f"target topic {topic} holds fewer records than earlier runs of this restore committed to it "
        "(deleted, or deleted and created again): it is restored from the start"
        for topic in sorted(stale)
    ]
    return ResumePoint(
        states=states, resumed=resumed, earlier=earlier, undecided=undecided, warnings=warnings
    )


def _topics_lost_since(
    plan: RestorePlan, clients: KafkaClients, entries: dict[TopicPartitionKey, PartitionProgress]
) -> set[str]:
    """Target topics whose records the progress counts are gone: the topic was deleted since.

    Every committed record takes a target offset and end offsets never go back, so a
    topic whose end offsets add up to fewer than the records committed into it is not
    the topic the progress speaks of.
    """
    committed: dict[str, int] = {}
    for entry in entries.values():
        committed[entry.target_topic] = committed.get(entry.target_topic, 0) + entry.restored_records
    counts = {topic.target_topic: topic.target_partitions for topic in plan.topics}
    creating = {topic.target_topic for topic in plan.topics if topic.create}
    lost: set[str] = set()
    kept = {topic: records for topic, records in committed.items() if records and topic in counts}
    lost.update(topic for topic in kept if topic in creating)
    # Records in open transactions count too: every one of them took an offset. A partition
    # the plan counts may not exist yet (restore.existing_topics: apply adds it after this check):
    # it holds none of the records.
    ends = Admin(clients).list_offsets(
        [(topic, q) for topic in kept if topic not in creating for q in range(counts[topic])],
        "latest",
        read_committed=False,
        missing_ok=True,
    )
    for topic, records in kept.items():
        if topic not in creating and sum(end for (name, _), end in ends.items() if name == topic) < records:
            lost.add(topic)
    return lost
