"""Working out each group's new offsets on the target. Reads the target; changes nothing.

Method per target topic, chosen automatically under ``strategy: header-based``:

- **binary-search**: the target topic has the source's partition count and
  no mapping is forced, so target partition p holds source partition p in
  order. The position is found with about log2(n) single-record fetches.
  If a probe meets records of another source partition, the topic was
  repartitioned and the plan stops with an error asking for a mapping.
- **merged-search**: the partition counts differ, no mapping is given and the
  request asks for it (the three-phase restore, whose audit recounts the
  re-reads afterwards). A target partition then interleaves several source
  partitions, each still in order, so the binary search runs once per source
  partition with probes that skip the others' records, and the position is the
  earliest unprocessed record any of them found (the reference's ``min``), or
  one past the last restored record if the group had processed them all. The
  re-reads (processed records of other source partitions after the position)
  are unknown without a scan: the plan says so. Each search looks only below
  the earliest record found so far
  (:func:`kbackup.offsets.translate.merged_search`).
- **mapping**: the partition counts differ, ``scan_all_partitions`` is set,
  or the strategy is ``from-mapping``: positions and re-read counts come from
  the mapping file's exact ranges.

``strategy: timestamp`` (data restored without headers) asks ListOffsets for the first offset
stamped at or after the time, then looks from there for the first record a consumer sees stamped
so (:mod:`kbackup.reset.timestamp_search`): ListOffsets also answers with transaction markers,
stamped when their transaction committed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from kbackup import __version__
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import ConfigError, KafkaOperationError, NotFoundError, PreconditionError
from kbackup.core.gc_tuning import few_collections
from kbackup.core.kafka import Admin, KafkaClients, PartitionRange, PartitionReader, open_admin
from kbackup.core.progress import Progress
from kbackup.core.types import TopicPartitionKey
from kbackup.format.manifest import utc_now_iso
from kbackup.format.reset_plan import (
    GroupReset,
    Method,
    OriginOffset,
    PartitionOffsets,
    PartitionReset,
    ResetPlan,
    TargetInfo,
)
from kbackup.offsets.ranges import OffsetRange, PartitionIndex, index_by_target
from kbackup.offsets.translate import SearchResult, merged_search, search_position
from kbackup.reset.probe import PartitionProbe, probe_consumer_properties
from kbackup.reset.settings import Strategy
from kbackup.reset.sources import RecordTimestampLookup, SourceOffsets
from kbackup.reset.timestamp_search import RecordRuns, TimestampSearch, first_stamped_at_or_after

#: (target topic, target partition) -> the mapping's ranges in it.
MappingIndex = dict[TopicPartitionKey, PartitionIndex]

MAPPING_HINT = (
    "run 'kafka-backup show-offset-mapping ... --output mapping.json' and set offset_reset.mapping_file"
)


@dataclass
class PlanRequest:
    target: KafkaConnection
    source: SourceOffsets
    strategy: Strategy = "header-based"
    #: Groups to move; empty: every group in the source offsets.
    groups: list[str] = field(default_factory=list)
    #: Source topic -> target topic, as the restore renamed them.
    topic_mapping: dict[str, str] = field(default_factory=dict)
    mapping: MappingIndex | None = None
    scan_all_partitions: bool = False
    fixed_offset: int | None = None
    #: ``strategy: timestamp`` with a point in time: every partition moves to the first target
    #: record at or after it, instead of the committed record's own timestamp.
    fixed_timestamp: int | None = None
    record_timestamp: RecordTimestampLookup | None = None
    #: Planning stops with an error after this long (probes on a slow or huge target).
    timeout_secs: float | None = None
    #: A source partition the group never committed on: start it at the first restored record, or leave it.
    uncommitted: Literal["earliest", "skip"] = "earliest"
    #: The target group of source group G is ``group_prefix + G`` (the drill moves copies of the groups).
    group_prefix: str = ""
    #: Only the groups' offsets on these source topics are planned (the topics restored); None: all.
    source_topics: list[str] | None = None
    #: The next step printed when a repartitioned topic needs a mapping and none was given.
    mapping_hint: str = MAPPING_HINT
    #: Without a mapping, place a repartitioned topic by a binary search per source partition
    #: (``merged-search``) instead of refusing.
    search_repartitioned: bool = False
    #: ``strategy: rewind``: the Kafka cluster id of the backup's source, which the target must be
    #: (the groups move back on the cluster they committed on; no translation).
    rewind_cluster_id: str | None = None
    #: ``strategy: rewind``: each topic's Kafka topic id in the backup, which the live topic must
    #: have (a topic deleted and re-created under its name holds other records at those offsets).
    rewind_topic_ids: dict[str, str | None] = field(default_factory=dict)


class _Planner:
    def __init__(self, request: PlanRequest, progress: Progress | None = None) -> None:
        self.request = request
        self.progress = progress or Progress(enabled=False)
        self.admin: Admin = open_admin(request.target)
        self.clients = KafkaClients(request.target, client_id="kafka-backup-reset-probe")
        self.cluster_id = self.admin.cluster_id()
        self._reader: PartitionReader | None = None
        self._probes: dict[TopicPartitionKey, PartitionProbe] = {}
        #: Binary-search answers by (target partition, source topic, source partition, committed
        #: offset): groups committed at the same offset share one search.
        self._searches: dict[tuple[TopicPartitionKey, str, int, int], SearchResult] = {}
        #: Merged-search answers by (target partition, source topic, committed offsets).
        self._merged: dict[tuple[TopicPartitionKey, str, tuple[int, ...]], SearchResult | None] = {}
        #: ``strategy: timestamp``: the records read per target partition, and the answers by
        #: (target partition, timestamp) with the fetches each took: groups at one time share one.
        self._record_runs: dict[TopicPartitionKey, RecordRuns] = {}
        self._stamped: dict[tuple[TopicPartitionKey, int], tuple[int, TimestampSearch, int]] = {}
        self.ranges: dict[TopicPartitionKey, PartitionRange] = {}
        self.warnings: list[str] = []

    @property
    def reader(self) -> PartitionReader:
        if self._reader is None:
            self._reader = PartitionReader(self.clients, properties=probe_consumer_properties())
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def probe(self, key: TopicPartitionKey) -> PartitionProbe:
        if key not in self._probes:
            self._probes[key] = PartitionProbe(
                self.reader,
                topic=key[0],
                partition=key[1],
                source_cluster=self.request.source.info.source_cluster,
                end_offset=self.ranges[key].log_end,
            )
        return self._probes[key]

    def group_topics(self, group: str) -> list[str]:
        """The source topics the group committed on that the plan covers."""
        topics = {topic for topic, _ in self.request.source.groups[group]}
        if self.request.source_topics is not None:
            topics &= set(self.request.source_topics)
        return sorted(topics)

    def target_topic(self, source_topic: str) -> str:
        if self.request.strategy == "rewind":
            return source_topic  # in place: the topics the groups committed on
        return self.request.topic_mapping.get(source_topic, source_topic)

    def plan(self) -> ResetPlan:
        request = self.request
        source = request.source
        if request.strategy == "rewind" and self.cluster_id != request.rewind_cluster_id:
            raise PreconditionError(
                f"a rewind moves groups back on the cluster the backup was taken from "
                f"({request.rewind_cluster_id}), and {','.join(request.target.bootstrap_servers)} is "
                f"cluster {self.cluster_id}",
                hint="give the source cluster's servers (-b, or its source section), or translate onto a "
                "restored cluster without --in-place",
            )
        groups = request.groups or sorted(source.groups)
        unknown = [group for group in groups if group not in source.groups]
        if unknown:
            raise NotFoundError(
                f"group(s) {', '.join(unknown)} have no offsets in the source snapshot ({source.info.kind}, "
                f"taken {source.info.taken_at})",
                hint="check offset_reset.groups; 'kafka-backup describe' lists a backup's groups",
            )
        outside = [group for group in groups if source.groups[group] and not self.group_topics(group)]
        if outside:
            # Not in the plan at all: execute would otherwise refuse such a group while it runs.
            self.warnings.append(
                f"group(s) {', '.join(outside)} committed only on topics that were not restored "
                f"(restore.topics): not moved"
            )
            groups = [group for group in groups if group not in outside]
        source_topics = sorted({topic for group in groups for topic in self.group_topics(group)})
        if request.strategy == "rewind":
            self.check_same_topics(source_topics)
        target_counts = self.admin.partition_counts(self.target_topic(topic) for topic in source_topics)
        self.ranges = self.admin.partition_ranges(
            (topic, partition) for topic, count in target_counts.items() for partition in range(count)
        )
        prefix = request.group_prefix
        descriptions = self.admin.describe_groups(prefix + group for group in groups)
        currents = self.admin.committed_offsets_of(prefix + group for group in groups)
        group_plans = []
        deadline = None if request.timeout_secs is None else time.monotonic() + request.timeout_secs
        self.search_in_offset_order(groups, target_counts, deadline)
        with self.progress.task("planning groups", total=len(groups), unit="groups") as group_bar:
            for done, group in enumerate(groups):
                self.check_deadline(deadline, f"{done} of {len(groups)} group(s) planned")
                group_bar.advance()
                target_group = prefix + group
                current = currents[target_group]
                rows: list[PartitionReset] = []
                for topic in self.group_topics(group):
                    rows.extend(
                        self.plan_topic(group, topic, target_counts[self.target_topic(topic)], current)
                    )
                group_plans.append(
                    GroupReset(
                        group_id=target_group,
                        source_group_id=group if prefix else None,
                        target_state=descriptions[target_group].state,
                        partitions=rows,
                    )
                )
        touched = sorted(
            {(row.target_topic, row.target_partition) for g in group_plans for row in g.partitions}
        )
        return ResetPlan(
            created_at=utc_now_iso(),
            tool_version=__version__,
            strategy=request.strategy,
            source=source.info,
            target=TargetInfo(cluster_id=self.cluster_id, bootstrap_servers=request.target.bootstrap_servers),
            target_partitions=[
                PartitionOffsets(
                    topic=t,
                    partition=p,
                    log_start=self.ranges[(t, p)].log_start,
                    log_end=self.ranges[(t, p)].log_end,
                )
                for t, p in touched
            ],
            groups=group_plans,
            warnings=self.warnings,
        )

    def check_same_topics(self, topics: list[str]) -> None:
        """A rewind's topics are the ones the backup read (same topic id), not re-created since."""
        live = self.admin.topic_ids(topics)
        for topic in topics:
            then = self.request.rewind_topic_ids.get(topic)
            if then is not None and live.get(topic) is not None and live[topic] != then:
                raise PreconditionError(
                    f"topic {topic} was deleted and re-created since the backup read it (topic id "
                    f"{then} then, {live[topic]} now): its offsets of then name other records",
                    hint="rewind the other topics (offset_reset.groups), or restore this one",
                )

    def check_deadline(self, deadline: float | None, progress: str) -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise KafkaOperationError(
                f"planning stopped after offset_reset.timeout_secs={self.request.timeout_secs:g}s with "
                f"{progress}; nothing was changed",
                hint="raise offset_reset.timeout_secs, or plan fewer groups at a time",
                retryable=True,
            )

    def search_in_offset_order(
        self, groups: list[str], target_counts: dict[str, int], deadline: float | None
    ) -> None:
        """Run every binary search of the plan up front, partition by partition, in increasing
        committed offset.

        The answers are the same in any order; this order moves the probes forward through each
        partition, so a probe's fetch mostly continues where the last one stopped (no new
        assignment, the next records already prefetched) instead of jumping between partitions
        with a round trip each: planning for many groups reads each partition about once.
        """
        wanted: dict[tuple[TopicPartitionKey, str, int], set[int]] = {}
        for group in groups:
            for topic in self.group_topics(group):
                target_topic = self.target_topic(topic)
                method, committed, partitions = self.topic_inputs(group, topic, target_counts[target_topic])
                if method == "binary-search":
                    for partition in partitions:
                        searched = wanted.setdefault(((target_topic, partition), topic, partition), set())
                        searched.add(committed.get(partition) or 0)

        if not wanted:
            return
        with self.progress.task(
            "searching target offsets",
            total=sum(len(offsets) for offsets in wanted.values()),
            unit="searches",
        ) as search_bar:
            for (key, topic, partition), offsets in sorted(wanted.items()):
                for offset in sorted(offsets):
                    self.check_deadline(deadline, f"searches running on {key[0]}/{key[1]}")
                    self.search(key, topic, partition, offset)
                    search_bar.advance()

    def search(self, key: TopicPartitionKey, topic: str, partition: int, offset: int) -> SearchResult:
        """Where source offset ``offset`` of ``topic``/``partition`` lands on the target (binary search)."""
        memo = (key, topic, partition, offset)
        if memo not in self._searches:
            probe = self.probe(key)
            span = self.ranges[key]
            self._searches[memo] = search_position(
                lambda t: probe.first_at_or_after(t, topic, partition), span.log_start, span.log_end, offset
            )
        return self._searches[memo]

    def method_for(self, topic: str, source_count: int, target_count: int) -> Method:
        strategy = self.request.strategy
        if strategy == "rewind":
            if source_count != target_count:
                raise PreconditionError(
                    f"topic {topic} has {target_count} partitions now and had {source_count} in the "
                    "backup: its offsets of then do not fit it (re-created?)",
                    hint="rewind the other topics (offset_reset.groups), or restore this one",
                )
            return "rewind"
        if strategy == "from-mapping":
            return "mapping"
        if strategy == "header-based":
            if source_count != target_count or self.request.scan_all_partitions:
                if self.request.mapping is None and self.request.search_repartitioned:
                    return "merged-search"
                if self.request.mapping is None:
                    raise ConfigError(
                        f"topic {topic} was restored into {target_count} partitions from {source_count} "
                        "(or scan_all_partitions is set): header-based translation needs the offset mapping",
                        hint=self.request.mapping_hint,
                    )
                return "mapping"
            return "binary-search"
        return strategy

    def topic_inputs(
        self, group: str, topic: str, target_count: int
    ) -> tuple[Method, dict[int, int], list[int]]:
        """How the group's positions on ``topic`` are found, its committed offsets there by source
        partition, and the partitions that get a row (for every method but the mapping, which
        plans each target partition). The up-front searches and the rows both come from here."""
        source = self.request.source
        committed = {p: c for (t, p), c in source.groups[group].items() if t == topic}
        source_count = len(self.source_partitions(topic, committed))
        method = self.method_for(topic, source_count, target_count)
        # A rewind moves only what the group had committed then; the rest stays as it is.
        skip_uncommitted = self.request.uncommitted == "skip" or method == "rewind"
        partitions = [
            partition
            for partition in range(min(source_count, target_count))
            if partition in committed or not skip_uncommitted
        ]
        return method, committed, partitions

    def source_partitions(self, topic: str, committed: dict[int, int]) -> list[int]:
        """Every source partition of ``topic``: any of them may feed a repartitioned target partition."""
        count = self.request.source.partition_counts.get(topic, max(committed, default=-1) + 1)
        return list(range(count))

    def plan_topic(
        self, group: str, topic: str, target_count: int, current: dict[TopicPartitionKey, int]
    ) -> list[PartitionReset]:
        method, committed, partitions = self.topic_inputs(group, topic, target_count)
        target_topic = self.target_topic(topic)
        if method == "mapping":
            return [
                self.plan_from_mapping(topic, target_topic, q, committed, current)
                for q in range(target_count)
            ]
        if method == "merged-search":
            return [self.plan_merged(topic, target_topic, q, committed, current) for q in range(target_count)]
        if method == "rewind":
            later = sorted(p for (t, p) in current if t == topic and p not in committed)
            if later:
                self.warnings.append(
                    f"group {group} had no committed offset on {topic} partition(s) "
                    f"{', '.join(map(str, later))} then: left where they are"
                )
            return [
                self.rewound(group, topic, partition, committed[partition], current)
                for partition in partitions
            ]
        return [
            self.plan_partition(method, topic, target_topic, partition, committed.get(partition), current)
            for partition in partitions
        ]

    def gap(self, topic: str, partition: int, offset: int | None) -> int:
        ends = self.request.source.backup_end
        if offset is None or ends is None or (topic, partition) not in ends:
            return 0
        return max(0, offset - ends[(topic, partition)])

    def retention_gap(self, topic: str, partition: int, offset: int | None) -> int:
        starts = self.request.source.backup_start
        if offset is None or not starts or (topic, partition) not in starts:
            return 0
        return max(0, starts[(topic, partition)] - offset)

    def plan_partition(
        self,
        method: Method,
        topic: str,
        target_topic: str,
        partition: int,
        offset: int | None,
        current: dict[TopicPartitionKey, int],
    ) -> PartitionReset:
        key = (target_topic, partition)
        span = self.ranges[key]
        notes: list[str] = []
        if offset is None:
            notes.append("no committed offset on the source: starts at the first restored record")
        expected: OriginOffset | None = None
        rereads: int | None = 0
        probes = 0
        new_offset: int | None
        if method == "binary-search":
            new_offset, expected, probes = self.searched_position(key, topic, partition, offset, notes)
        elif method == "timestamp":
            new_offset, probes, note = self.timestamp_position(topic, partition, key, offset)
            rereads = None
            notes.append("timestamp-based: records sharing the committed record's millisecond are re-read")
            if note:
                notes.append(note)
        elif method == "earliest":
            new_offset, rereads = span.log_start, None
        elif method == "latest":
            new_offset, rereads = span.log_end, None
        elif method == "offset":
            new_offset, rereads = self.fixed_offset(key), None
        else:  # pragma: no cover - method_for returns only the methods above
            raise AssertionError(method)
        return PartitionReset(
            target_topic=target_topic,
            target_partition=partition,
            source_topic=topic,
            source_committed={partition: offset},
            target_committed=current.get(key),
            new_offset=new_offset,
            method=method,
            expected_origin=expected,
            rereads=rereads,
            recovery_gap=self.gap(topic, partition, offset),
            retention_gap=self.retention_gap(topic, partition, offset),
            probes=probes,
            notes=notes,
        )

    def rewound(
        self, group: str, topic: str, partition: int, offset: int, current: dict[TopicPartitionKey, int]
    ) -> PartitionReset:
        """Strategy rewind: the group back at ``offset`` on the partition it committed it on; below
        the log start now, at the log start (a retention gap, said); beyond its end, refused."""
        key = (topic, partition)
        span = self.ranges[key]
        notes: list[str] = []
        if offset > span.log_end:
            raise PreconditionError(
                f"group {group} was at offset {offset} of {topic}/{partition}, beyond its log end "
                f"{span.log_end} now: the topic was re-created or its log truncated since",
                hint="leave this group out (offset_reset.groups), or restore the topic from the backup",
            )
        new_offset = max(offset, span.log_start)
        retention_gap = new_offset - offset
        if retention_gap:
            notes.append(
                f"retention removed offsets {offset}..{span.log_start - 1}, which the group had not "
                f"processed then: it starts at the log start {span.log_start}"
            )
        now = current.get(key)
        rereads = 0 if now is None else max(0, now - new_offset)
        if now is not None and now < new_offset:
            notes.append(f"moves forward: skips {new_offset - now} offset(s) it is behind now")
        return PartitionReset(
            target_topic=topic,
            target_partition=partition,
            source_topic=topic,
            source_committed={partition: offset},
            target_committed=now,
            new_offset=new_offset,
            method="rewind",
            rereads=rereads,
            retention_gap=retention_gap,
            notes=notes,
        )

    def searched_position(
        self, key: TopicPartitionKey, topic: str, partition: int, offset: int | None, notes: list[str]
    ) -> tuple[int | None, OriginOffset | None, int]:
        """Strategy header-based by binary search on target partition ``key``, fed by one source
        partition: the new offset (None: nothing of it was restored, said in ``notes``), the origin
        of the record there, and the reads it took."""
        target_topic = key[0]
        probe = self.probe(key)
        result = self.search(key, topic, partition, offset or 0)
        foreign = {item for item in probe.sources_seen if item != (topic, partition)}
        if foreign:
            raise PreconditionError(
                f"target partition {target_topic}/{partition} holds records of other source partitions "
                f"({', '.join(f'{t}/{p}' for t, p in sorted(foreign))}): it was repartitioned",
                hint="build the offset mapping with 'kafka-backup show-offset-mapping' and set "
                "offset_reset.mapping_file (or scan_all_partitions: true)",
            )
        if result.record_at_position is None and result.position == self.ranges[key].log_start:
            notes.append("no restored record of this source partition on the target")
            return None, None, result.probes
        expected = None
        if result.record_at_position is not None:
            expected = OriginOffset(
                topic=topic, partition=partition, offset=result.record_at_position.source_offset
            )
        return result.position, expected, result.probes

    def fixed_offset(self, key: TopicPartitionKey) -> int:
        """Strategy offset: ``offset_reset.offset``, refused outside the target partition's range."""
        span = self.ranges[key]
        if self.request.fixed_offset is None:
            raise ConfigError("offset_reset.offset is required with strategy: offset")
        if not span.log_start <= self.request.fixed_offset <= span.log_end:
            raise PreconditionError(
                f"offset {self.request.fixed_offset} is outside {key[0]}/{key[1]}'s "
                f"range {span.log_start}..{span.log_end}"
            )
        return self.request.fixed_offset

    def plan_merged(
        self,
        topic: str,
        target_topic: str,
        partition: int,
        committed: dict[int, int],
        current: dict[TopicPartitionKey, int],
    ) -> PartitionReset:
        """A repartitioned target partition, by :func:`kbackup.offsets.translate.merged_search`."""
        key = (target_topic, partition)
        span = self.ranges[key]
        probe = self.probe(key)
        ends = self.request.source.backup_end or {}
        sources = self.source_partitions(topic, committed)
        memo = (key, topic, tuple(committed.get(p) or 0 for p in sources))
        if memo not in self._merged:
            self._merged[memo] = merged_search(
                lambda t, source, limit: probe.first_at_or_after(t, topic, source, limit),
                span.log_start,
                span.log_end,
                {p: c for p, c in committed.items() if c is not None},
                sources,
                {p: end for (name, p), end in ends.items() if name == topic},
            )
        result = self._merged[memo]
        expected: OriginOffset | None = None
        if result is None:
            notes = ["no restored record of this topic on this target partition"]
        else:
            notes = [
                "repartitioned: records of other source partitions before the position are read again "
                "(counted by the audit's mapping)"
            ]
            if result.record_at_position is not None:
                origin = result.record_at_position
                expected = OriginOffset(
                    topic=topic, partition=origin.source_partition, offset=origin.source_offset
                )
        return PartitionReset(
            target_topic=target_topic,
            target_partition=partition,
            source_topic=topic,
            # Every source partition may feed this one: the verify and the audit judge the records
            # around the position by these.
            source_committed={p: committed.get(p) for p in sources},
            target_committed=current.get(key),
            new_offset=None if result is None else result.position,
            method="merged-search",
            expected_origin=expected,
            rereads=None,
            recovery_gap=sum(self.gap(topic, p, committed.get(p)) for p in sources),
            retention_gap=sum(self.retention_gap(topic, p, committed.get(p)) for p in sources),
            probes=0 if result is None else result.probes,
            notes=notes,
        )

    def timestamp_position(
        self, topic: str, partition: int, key: TopicPartitionKey, offset: int | None
    ) -> tuple[int, int, str | None]:
        """The first record on ``key`` a consumer sees stamped at or after the committed record's
        time (or ``offset_reset.timestamp``), else the partition's end; the reads that took, and a
        note on them for the plan."""
        if self.request.fixed_timestamp is not None:
            timestamp: int | None = self.request.fixed_timestamp
        elif self.request.record_timestamp is None:
            raise ConfigError(
                "strategy: timestamp needs the backup (or live source) to read record timestamps"
            )
        else:
            timestamp = self.request.record_timestamp(topic, partition, offset or 0)
        end = self.ranges[key].log_end
        if timestamp is None:
            return end, 0, None
        if (key, timestamp) not in self._stamped:
            # Every offset below ListOffsets' answer is stamped earlier; the answer itself may be a
            # transaction marker (stamped at its commit) or an aborted record.
            listed = self.admin.offsets_for_times({key: timestamp})[key]
            start = end if listed < 0 else min(listed, end)
            runs = self._record_runs.get(key)
            if runs is None:
                runs = self._record_runs[key] = RecordRuns(
                    self.reader, topic=key[0], partition=key[1], end_offset=end
                )
            fetches = runs.fetches
            found = first_stamped_at_or_after(runs, start, end, timestamp)
            self._stamped[(key, timestamp)] = (start, found, runs.fetches - fetches)
        start, found, fetches = self._stamped[(key, timestamp)]
        if start >= end:
            return end, 0, None
        note = (
            f"first record stamped >= {timestamp} at or after offset {start} (ListOffsets' answer): "
            f"{found.probes} read(s), {fetches} fetch(es)"
        )
        if found.out_of_order:
            note += (
                f"; the records read are not in timestamp order: a record stamped >= {timestamp} "
                "that the search did not read may lie before the position (it would be skipped)"
            )
        return found.position, found.probes, note

    def plan_from_mapping(
        self,
        topic: str,
        target_topic: str,
        partition: int,
        committed: dict[int, int],
        current: dict[TopicPartitionKey, int],
    ) -> PartitionReset:
        if self.request.mapping is None:
            raise ConfigError(
                "strategy: from-mapping needs offset_reset.mapping_file", hint=self.request.mapping_hint
            )
        key = (target_topic, partition)
        index = self.request.mapping.get(key)
        sources = sorted(source for source in (index.by_source if index else {}) if source[0] == topic)
        feeding = [p for _, p in sources]
        thresholds = {(topic, p): committed[p] for p in feeding if p in committed}
        position = index.position(thresholds, sources=sources) if index is not None and sources else None
        expected = (
            OriginOffset(topic=position.origin[0], partition=position.origin[1], offset=position.origin[2])
            if position is not None and position.origin is not None
            else None
        )
        return PartitionReset(
            target_topic=target_topic,
            target_partition=partition,
            source_topic=topic,
            source_committed={p: committed.get(p) for p in feeding},
            target_committed=current.get(key),
            new_offset=position.offset if position is not None else None,
            method="mapping",
            expected_origin=expected,
            rereads=position.reprocessed if position is not None else 0,
            recovery_gap=sum(self.gap(topic, p, committed.get(p)) for p in feeding),
            retention_gap=sum(self.retention_gap(topic, p, committed.get(p)) for p in feeding),
            notes=[] if sources else ["no restored record of this topic in the mapping for this partition"],
        )


def plan_offset_reset(request: PlanRequest, *, progress: Progress | None = None) -> ResetPlan:
    """Build a reset plan (reads the target cluster; changes nothing)."""
    planner = _Planner(request, progress)
    try:
        with few_collections():
            return planner.plan()
    finally:
        planner.close()


def mapping_index(ranges: Iterable[OffsetRange]) -> MappingIndex:
    """The mapping's ranges indexed by target partition, for position look-ups."""
    return index_by_target(list(ranges))
