"""The restore plan: what a restore will create and write, computed before anything is changed.

``build_plan`` is pure: it turns a loaded backup, the restore settings and what
the target cluster looks like (:class:`TargetState`, gathered by
:func:`kbackup.restore.target.inspect_target`) into a :class:`RestorePlan`, or
raises the error that names the bad input. ``--dry-run`` prints the plan
(:mod:`kbackup.restore.plan_text`); :mod:`kbackup.restore.runner` executes it.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from kbackup.core.errors import ConfigError, NotFoundError, PreconditionError
from kbackup.core.times import iso_of_ms, iso_utc, parse_iso
from kbackup.format.catalog import Backup, PartitionCoverage
from kbackup.format.manifest import SegmentEntry, TopicEntry
from kbackup.format.record_match import RecordMatcher
from kbackup.restore.record_filters import FilterRule, RecordFilter
from kbackup.restore.settings import ExistingTopicsPolicy, LogAppendTimePolicy, RestoreSettings
from kbackup.restore.topic_drift import (
    PARTITIONS,
    TIMESTAMP_POLICY,
    TIMESTAMP_TYPE,
    TopicDifference,
    copied_configs,
    topic_differences,
)

Mode = Literal["exactly-once", "idempotent"]
Routing = Literal["identity", "mapped", "repartition"]

LOG_APPEND_TIME = "LogAppendTime"
CREATE_TIME = "CreateTime"


@dataclass(frozen=True)
class TargetState:
    """What the plan needs to know about the target cluster (see kbackup.restore.target)."""

    #: Servers and protocol, safe to print.
    description: str
    cluster_id: str | None
    broker_count: int
    #: Partition count of every topic on the target.
    topics: dict[str, int]
    #: ``message.timestamp.type`` of the existing topics the restore writes to.
    timestamp_types: dict[str, str] = field(default_factory=dict)
    #: The brokers' ``log.message.timestamp.type`` (the default of created topics).
    default_timestamp_type: str = CREATE_TIME
    #: ``cleanup.policy`` of the existing topics the restore writes to.
    cleanup_policies: dict[str, str] = field(default_factory=dict)
    #: The brokers' ``log.cleanup.policy`` (the default of created topics).
    default_cleanup_policy: str = "delete"
    #: ``retention.ms`` of the existing topics the restore writes to (those with cleanup.policy delete).
    retention_ms: dict[str, int] = field(default_factory=dict)
    #: The brokers' default retention (log.retention.ms/minutes/hours), -1 for none.
    default_retention_ms: int = 7 * 24 * 3600 * 1000
    #: Whether the target can run transactions, and if not why.
    transactions_possible: bool = True
    transactions_note: str | None = None
    #: The configs set on each existing topic the restore writes to (not its broker defaults);
    #: a topic whose configs could not be read is missing.
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Replicas per partition of every topic on the target.
    replication_factors: dict[str, int] = field(default_factory=dict)


@dataclass
class PartitionPlan:
    """One source partition: where its records go and which of them."""

    source_topic: str
    source_partition: int
    target_topic: str
    routing: Routing
    #: The one target partition (identity, mapped); None when repartitioned by key.
    target_partition: int | None
    #: Partition count of the target topic.
    target_partitions: int
    #: Source offsets selected: ``offset_start <= offset < offset_end``.
    offset_start: int
    offset_end: int
    time_start: int | None
    time_end: int | None
    #: Segments holding selected records, in offset order.
    segments: list[SegmentEntry]
    #: Records of the segments entirely inside the selection (exact from the manifests).
    records_in_whole_segments: int
    #: Segments only partly inside the selection: their records must be counted.
    partial_segments: list[str]
    #: Records of the partial segments that pass, once counted (integrity check).
    counted_partial_records: int | None = None
    #: The rules of ``restore.filters`` that apply to this partition's topic, in their order.
    rules: tuple[FilterRule, ...] = ()

    @property
    def record_filter(self) -> RecordFilter:
        return RecordFilter(self.offset_start, self.offset_end, self.time_start, self.time_end)

    def counted_by_manifest(self, segment: SegmentEntry) -> bool:
        """Whether the manifest's count of the segment is exact: every record selected, and no
        filter rule can drop one (a rule whose time window misses the segment cannot)."""
        return self.record_filter.segment_inside(segment) and not any(
            rule.action == "drop" and rule.may_touch(segment) for rule in self.rules
        )

    @property
    def records_upper_bound(self) -> int:
        partial = set(self.partial_segments)
        return self.records_in_whole_segments + sum(
            segment.record_count for segment in self.segments if segment.key in partial
        )

    @property
    def expected_records(self) -> int | None:
        """Exact number of selected records, or None while partial segments are uncounted."""
        if not self.partial_segments:
            return self.records_in_whole_segments
        if self.counted_partial_records is None:
            return None
        return self.records_in_whole_segments + self.counted_partial_records

    @property
    def bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.segments)

    def target_partitions_fed(self) -> list[int]:
        """Target partitions this source partition may write to."""
        if self.target_partition is not None:
            return [self.target_partition]
        return list(range(self.target_partitions))

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_topic": self.source_topic,
            "source_partition": self.source_partition,
            "target_topic": self.target_topic,
            "routing": self.routing,
            "target_partition": self.target_partition,
            "offset_start": self.offset_start,
            "offset_end": self.offset_end,
            "segments": len(self.segments),
            "bytes": self.bytes,
            "expected_records": self.expected_records,
            "records_upper_bound": self.records_upper_bound,
            "filter_rules": [rule.number for rule in self.rules],
        }


@dataclass
class TopicPlan:
    """One source topic and the target topic it is restored into."""

    source_topic: str
    target_topic: str
    source_partitions: int
    target_partitions: int
    routing: Routing
    #: The restore creates the target topic (with ``configs``).
    create: bool
    configs: dict[str, str]
    #: ``message.timestamp.type`` the target topic has (or will have) while records are restored.
    timestamp_type: str
    #: Explicit ``source -> target`` partition map (routing "mapped").
    partition_map: dict[int, int] = field(default_factory=dict)
    #: ``cleanup.policy`` the target topic has (or will have).
    cleanup_policy: str = "delete"
    #: Set to LogAppendTime once its records are restored (``restore.log_append_time: switch-after``).
    switch_to_log_append_time: bool = False
    #: An existing target topic: how it differs from the backup's topic (``restore.existing_topics``).
    differences: list[TopicDifference] = field(default_factory=list)
    #: An existing target topic: configs set on it before the first record (``existing_topics: apply``).
    config_changes: dict[str, str] = field(default_factory=dict)
    #: An existing target topic: partitions added to it before the first record, up to
    #: ``target_partitions`` (``existing_topics: apply``).
    partitions_added: int = 0

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_topic": self.source_topic,
            "target_topic": self.target_topic,
            "source_partitions": self.source_partitions,
            "target_partitions": self.target_partitions,
            "routing": self.routing,
            "create": self.create,
            "configs": self.configs,
            "timestamp_type": self.timestamp_type,
            "switch_to_log_append_time": self.switch_to_log_append_time,
            "cleanup_policy": self.cleanup_policy,
            "partition_map": {str(k): v for k, v in self.partition_map.items()},
            "differences": [difference.to_dict() for difference in self.differences],
            "config_changes": self.config_changes,
            "partitions_added": self.partitions_added,
        }


def unit_name(partition: PartitionPlan) -> str:
    """A unit of a restore on worker processes or Spark: one source partition."""
    return f"{partition.source_topic}-{partition.source_partition}"


@dataclass
class RestorePlan:
    """Everything a restore will do; pure data, printed by --dry-run."""

    restore_id: str
    backup_id: str
    storage_url: str
    source_cluster: str
    target: str
    target_cluster_id: str | None
    mode: Mode
    mode_reason: str
    origin_headers: bool
    #: Which setting decided ``origin_headers`` (printed by --dry-run).
    origin_headers_reason: str
    progress_topic: str
    #: The progress topic does not exist yet and is created before the first transaction.
    create_progress_topic: bool
    replication_factor: int | None
    time_start: int | None
    time_end: int | None
    topics: list[TopicPlan]
    partitions: list[PartitionPlan]
    warnings: list[str] = field(default_factory=list)
    #: ``restore.log_append_time``: what happens to target topics that use LogAppendTime.
    log_append_time: LogAppendTimePolicy = "keep-original"
    #: ``restore.existing_topics``: what happens to existing target topics that differ from the backup's.
    existing_topics: ExistingTopicsPolicy = "validate"
    #: ``engine: spark`` or worker processes: the plan is one unit of the restore (one source
    #: partition, in its own task).
    unit: str | None = None
    #: Every rule of ``restore.filters``, in order (each partition holds those of its topic).
    filter_rules: list[FilterRule] = field(default_factory=list)

    def filter_topics(self, rule: FilterRule) -> list[str]:
        """The source topics of the plan that ``rule`` applies to."""
        return sorted({p.source_topic for p in self.partitions if rule in p.rules})

    @property
    def transactional_id(self) -> str:
        """One per restore, and one per unit on the Spark engine and on worker processes: a retried
        task fences its own zombie (the same unit's earlier attempt) and no other unit."""
        base = f"kafka-backup-restore-{self.restore_id}"
        return base if self.unit is None else f"{base}-{self.unit}"

    def unit_transactional_ids(self) -> list[str]:
        """The transactional id each unit of this restore has on worker processes or Spark: those a
        run in one process fences, so that an earlier run's orphaned workers stop writing."""
        base = f"kafka-backup-restore-{self.restore_id}"
        return [f"{base}-{unit_name(partition)}" for partition in self.partitions]

    @property
    def expected_records(self) -> int | None:
        counts = [partition.expected_records for partition in self.partitions]
        return None if any(count is None for count in counts) else sum(c for c in counts if c is not None)

    @property
    def records_upper_bound(self) -> int:
        return sum(partition.records_upper_bound for partition in self.partitions)

    @property
    def segments(self) -> list[SegmentEntry]:
        return [segment for partition in self.partitions for segment in partition.segments]

    def topic(self, source_topic: str) -> TopicPlan:
        for topic in self.topics:
            if topic.source_topic == source_topic:
                return topic
        raise KeyError(source_topic)

    def to_dict(self) -> dict[str, Any]:
        return {
            "restore_id": self.restore_id,
            "backup_id": self.backup_id,
            "storage": self.storage_url,
            "source_cluster": self.source_cluster,
            "target": self.target,
            "target_cluster_id": self.target_cluster_id,
            "mode": self.mode,
            "mode_reason": self.mode_reason,
            "transactional_id": self.transactional_id if self.mode == "exactly-once" else None,
            "origin_headers": self.origin_headers,
            "origin_headers_reason": self.origin_headers_reason,
            "progress_topic": self.progress_topic if self.mode == "exactly-once" else None,
            "create_progress_topic": self.create_progress_topic and self.mode == "exactly-once",
            "time_window": {"start": self.time_start, "end": self.time_end},
            "log_append_time": self.log_append_time,
            "existing_topics": self.existing_topics,
            "filters": [
                {
                    "rule": rule.number,
                    "action": rule.action,
                    "matches": rule.describe(),
                    "source_topics": self.filter_topics(rule),
                }
                for rule in self.filter_rules
            ],
            "topics": [topic.to_dict() for topic in self.topics],
            "partitions": [partition.to_dict() for partition in self.partitions],
            "expected_records": self.expected_records,
            "records_upper_bound": self.records_upper_bound,
            "segments": len(self.segments),
            "bytes": sum(segment.size_bytes for segment in self.segments),
            "warnings": self.warnings,
        }


# ---------------------------------------------------------------------------
# Selection: which source topics and partitions, renamed to which target topics.


@dataclass(frozen=True)
class RestoredTopic:
    """A source topic a restore replays: its target topic name and its selected partitions."""

    entry: TopicEntry
    target_topic: str
    partitions: list[int]


def _known(backup: Backup, topic: str, key: str) -> None:
    if topic not in backup.topics:
        raise NotFoundError(
            f"restore.{key}: topic {topic!r} is not in backup {backup.backup_id!r} "
            f"(it holds: {', '.join(sorted(backup.topics)) or 'no topics'})",
            hint="use the topic's name on the source cluster",
        )


def restored_topics(backup: Backup, settings: RestoreSettings) -> list[RestoredTopic]:
    """The source topics and partitions a restore replays, each with its target topic name.

    Raises NotFoundError naming a topic, pattern or partition the backup does not hold.
    """
    _check_named_topics(backup, settings)
    coverage = backup.coverage()
    selected: list[RestoredTopic] = []
    targets: dict[str, str] = {}
    for name in _matching_topics(backup, settings):
        target = settings.topic_mapping.get(name, name)
        if target in targets:
            raise ConfigError(
                f"restore.topic_mapping: source topics {targets[target]!r} and {name!r} would both be "
                f"restored into {target!r}",
                hint="give each source topic its own target topic",
            )
        targets[target] = name
        held = sorted(p for (topic, p) in coverage if topic == name)
        partitions = _selected_partitions(backup, settings, name, held)
        selected.append(RestoredTopic(entry=backup.topics[name], target_topic=target, partitions=partitions))
    return selected


def _check_named_topics(backup: Backup, settings: RestoreSettings) -> None:
    """Every topic a per-topic setting names is in the backup."""
    for key, topics in (
        ("topic_mapping", settings.topic_mapping),
        ("partitions", settings.partitions),
        ("partition_mapping", settings.partition_mapping),
        ("offset_ranges", settings.offset_ranges),
        ("target_partitions", settings.target_partitions),
    ):
        for topic in topics:
            _known(backup, topic, key)
    if isinstance(settings.repartition, list):
        for topic in settings.repartition:
            _known(backup, topic, "repartition")


def _matching_topics(backup: Backup, settings: RestoreSettings) -> list[str]:
    """The backup's topics ``restore.topics`` matches (all of them when it is empty), sorted."""
    names = sorted(backup.topics)
    if not settings.topics:
        return names
    chosen: set[str] = set()
    for pattern in settings.topics:
        matched = {name for name in names if re.fullmatch(pattern, name)}
        if not matched:
            raise NotFoundError(
                f"restore.topics: {pattern!r} matches no topic of backup {backup.backup_id!r} "
                f"(it holds: {', '.join(names) or 'no topics'})"
            )
        chosen |= matched
    return sorted(chosen)


def _selected_partitions(backup: Backup, settings: RestoreSettings, name: str, held: list[int]) -> list[int]:
    """The partitions of topic ``name`` the restore replays, of those the backup ``held``."""
    wanted = settings.partitions.get(name)
    if wanted is not None:
        missing = sorted(set(wanted) - set(held))
        if missing:
            raise NotFoundError(
                f"restore.partitions: backup {backup.backup_id!r} holds no partition "
                f"{', '.join(map(str, missing))} of topic {name!r} (it holds: {held})"
            )
        held = sorted(set(wanted))
    for partition in settings.offset_ranges.get(name, {}):
        if partition not in held:
            raise NotFoundError(
                f"restore.offset_ranges: partition {partition} of topic {name!r} is not selected "
                f"or not in backup {backup.backup_id!r}"
            )
    return held


# ---------------------------------------------------------------------------
# Identity of a restore: same command, same id; the id names its transactions and progress.


def restore_identity(backup: Backup, settings: RestoreSettings, target_cluster: str) -> str:
    """A stable id for "this backup, this selection, into this cluster".

    Built from the settings as written (not from what they resolve to today), so
    a later increment of the backup does not change the id: running the same
    command again continues, and restores what the new increments added. Origin
    headers on or off are the exception: records with and without them are two
    different restores, so the id takes the resolved value (an increment that
    changes ``backup.include_offset_headers`` under a restore that follows it
    starts a new restore).
    """
    identity = {
        "v": 1,
        "backup_id": backup.backup_id,
        "source_cluster": backup.source_cluster,
        "target_cluster": target_cluster,
        "topics": sorted(settings.topics),
        "partitions": {t: sorted(p) for t, p in sorted(settings.partitions.items())},
        "topic_mapping": dict(sorted(settings.topic_mapping.items())),
        "partition_mapping": {
            t: {str(p): q for p, q in sorted(m.items())}
            for t, m in sorted(settings.partition_mapping.items())
        },
        "repartition": settings.repartition
        if isinstance(settings.repartition, bool)
        else sorted(settings.repartition),
        "time_window": [settings.time_window_start, settings.time_end],
        "offset_ranges": {
            t: {str(p): [r.start, r.end] for p, r in sorted(ranges.items())}
            for t, ranges in sorted(settings.offset_ranges.items())
        },
        # As written: a keys file is named by its path, so keys added to the file continue the
        # restore (with the longer list) rather than start another one that restores it all again.
        **(
            {"filters": [rule.model_dump(mode="json") for rule in settings.filters]}
            if settings.filters
            else {}
        ),
        # Resolved: unset and true (the default before the key could be unset) give the same id, so
        # a restore begun with the earlier default continues.
        "origin_headers": origin_headers_of(backup, settings)[0],
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return digest[:20]


def origin_headers_of(backup: Backup, settings: RestoreSettings) -> tuple[bool, str]:
    """Whether the restore stamps origin headers, and which setting said so.

    ``restore.include_original_offset_header`` (``--origin-headers/--no-origin-headers``) when set;
    else ``backup.include_offset_headers`` as the backup's newest increment recorded it.
    """
    chosen = settings.include_original_offset_header
    if chosen is not None:
        return chosen, f"restore.include_original_offset_header: {str(chosen).lower()}"
    if "include_offset_headers" not in backup.latest.settings:
        return backup.offset_headers, "the backup does not record backup.include_offset_headers"
    return (
        backup.offset_headers,
        f"backup taken with backup.include_offset_headers: {str(backup.offset_headers).lower()}",
    )


# ---------------------------------------------------------------------------
# The plan.


def _routing(
    selected: RestoredTopic, settings: RestoreSettings, target_partitions: int, target_exists: bool
) -> tuple[Routing, dict[int, int]]:
    name = selected.entry.name
    explicit = settings.partition_mapping.get(name)
    if explicit:
        routes = {p: explicit.get(p, p) for p in selected.partitions}
        bad = {p: q for p, q in routes.items() if q >= target_partitions}
        if bad:
            p, q = next(iter(sorted(bad.items())))
            raise PreconditionError(
                f"restore.partition_mapping: partition {p} of topic {name!r} goes to partition {q} of "
                f"target topic {selected.target_topic!r}, which has only {target_partitions} partition(s)",
                hint="map it to an existing partition, or add partitions to the target topic",
            )
        return "mapped", routes
    if settings.repartitions(name) and target_partitions != selected.entry.partitions:
        return "repartition", {}
    too_high = [p for p in selected.partitions if p >= target_partitions]
    if too_high:
        where = "has" if target_exists else "would be created with"
        raise PreconditionError(
            f"target topic {selected.target_topic!r} {where} {target_partitions} partition(s), fewer than "
            f"the {selected.entry.partitions} of source topic {name!r} in the backup "
            f"(source partition {too_high[0]} has no partition {too_high[0]} to go to)",
            hint="set restore.repartition (by key, like Kafka's default partitioner), a "
            "restore.partition_mapping, or add partitions to the target topic (restore.existing_topics: "
            "apply adds them up to the source's count)",
        )
    return "identity", {p: p for p in selected.partitions}


def _created_configs(
    entry: TopicEntry, settings: RestoreSettings, target: TargetState, warnings: list[str]
) -> dict[str, str]:
    configs = copied_configs(
        entry.configs, copy=settings.copy_topic_configs, excluded=settings.exclude_topic_configs
    )
    replicas = settings.replication_factor or target.broker_count
    min_isr = configs.get("min.insync.replicas")
    if min_isr is not None and min_isr.isdigit() and replicas and int(min_isr) > replicas:
        del configs["min.insync.replicas"]
        warnings.append(
            f"topic {entry.name}: min.insync.replicas={min_isr} is not copied: the target has "
            f"{replicas} replica(s) per partition, so no write with acks=all could succeed"
        )
    return configs


def build_plan(
    backup: Backup,
    settings: RestoreSettings,
    target: TargetState,
    *,
    storage_url: str,
    now_ms: int | None = None,
) -> RestorePlan:
    """Check the backup selection against the target and say what the restore will do."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    warnings: list[str] = []
    selected = restored_topics(backup, settings)
    if settings.as_of is not None:
        check_as_of(backup, settings.as_of)
    coverage = backup.coverage()
    target_id = target.cluster_id or target.description
    restore_id = restore_identity(backup, settings, target_id)

    drift = existing_topic_drift(selected, settings, target, warnings)
    rules = compiled_rules(settings)
    topics: list[TopicPlan] = []
    partitions: list[PartitionPlan] = []
    for item in selected:
        name, target_topic = item.entry.name, item.target_topic
        exists = target_topic in target.topics
        differences = drift.get(target_topic, [])
        changes, added = _applied(differences) if settings.existing_topics == "apply" else ({}, 0)
        count = _partition_count(item, settings, target, warnings, added=added)
        routing, routes = _routing(item, settings, count, exists)
        configs = {} if exists else _created_configs(item.entry, settings, target, warnings)
        made_create_time = False
        if exists:
            timestamp_type = target.timestamp_types.get(target_topic, target.default_timestamp_type)
            cleanup_policy = changes.get(
                "cleanup.policy", target.cleanup_policies.get(target_topic, target.default_cleanup_policy)
            )
        else:
            timestamp_type = configs.get(TIMESTAMP_TYPE, target.default_timestamp_type)
            cleanup_policy = configs.get("cleanup.policy", target.default_cleanup_policy)
            if timestamp_type == LOG_APPEND_TIME and settings.log_append_time != "rewrite":
                # The broker would stamp every restored record with the restore time.
                configs[TIMESTAMP_TYPE] = timestamp_type = CREATE_TIME
                made_create_time = True
        switch = (
            settings.log_append_time == "switch-after"
            and _copied_timestamp_type(item.entry, settings, target) == LOG_APPEND_TIME
            and timestamp_type != LOG_APPEND_TIME
        )
        topics.append(
            TopicPlan(
                source_topic=name,
                target_topic=target_topic,
                source_partitions=item.entry.partitions,
                target_partitions=count,
                routing=routing,
                create=not exists,
                configs=configs,
                timestamp_type=timestamp_type,
                partition_map=routes if routing == "mapped" else {},
                cleanup_policy=cleanup_policy,
                switch_to_log_append_time=switch,
                differences=differences,
                config_changes=changes,
                partitions_added=added,
            )
        )
        _timestamp_warning(topics[-1], settings, warnings, made_create_time=made_create_time)
        if routing == "identity" and count > item.entry.partitions:
            warnings.append(
                f"target topic {target_topic} has {count} partitions, the source had "
                f"{item.entry.partitions}: records keep their partition numbers and partitions "
                f"{item.entry.partitions}..{count - 1} stay empty (restore.repartition spreads them by key)"
            )
        topic_rules = tuple(rule for rule, applies in rules if applies(name))
        topic_partitions = [
            _partition_plan(
                coverage[(name, p)], settings, target_topic, routing, routes.get(p), count, topic_rules
            )
            for p in item.partitions
        ]
        partitions.extend(topic_partitions)
        if timestamp_type != LOG_APPEND_TIME:
            _retention_warning(topics[-1], topic_partitions, target, now_ms, warnings)

    mode, reason = _mode(settings, target, warnings)
    origin_headers, origin_reason = origin_headers_of(backup, settings)
    if not origin_headers:
        warnings.append(
            f"origin headers are off ({origin_reason}): header-based "
            "offset translation (show-offset-mapping, offset-reset strategy header-based) is impossible "
            "for the restored records"
        )
        if mode == "idempotent":
            warnings.append(
                "without transactions and without origin headers a stopped restore cannot find where it "
                "ended: running it again restores every selected record again"
            )
    if any(topic.routing == "repartition" for topic in topics):
        warnings.append(
            "repartitioned topics interleave several source partitions in each target partition: a "
            "consumer group moved across re-reads the records interleaved before its position"
        )
    for rule, _applies in rules:
        if not any(rule in partition.rules for partition in partitions):
            warnings.append(f"restore.filters {rule.describe()}: applies to no topic this restore writes")
    return RestorePlan(
        filter_rules=[rule for rule, _applies in rules],
        log_append_time=settings.log_append_time,
        existing_topics=settings.existing_topics,
        restore_id=restore_id,
        backup_id=backup.backup_id,
        storage_url=storage_url,
        source_cluster=backup.source_cluster,
        target=target.description,
        target_cluster_id=target.cluster_id,
        mode=mode,
        mode_reason=reason,
        origin_headers=origin_headers,
        origin_headers_reason=origin_reason,
        progress_topic=settings.progress_topic,
        create_progress_topic=settings.progress_topic not in target.topics,
        replication_factor=settings.replication_factor,
        time_start=settings.time_window_start,
        time_end=settings.time_end,
        topics=topics,
        partitions=partitions,
        warnings=warnings,
    )


def check_as_of(backup: Backup, as_of: datetime) -> None:
    """``restore.as_of`` within what the backup holds: its last increment copied every record the
    source held when it read its end offsets, just after its group snapshot (docs/restore.md)."""
    latest = backup.latest
    snapshot = latest.consumer_groups
    covered = (snapshot.finished_at or snapshot.taken_at) if snapshot is not None else latest.started_at
    if as_of > parse_iso(covered):
        raise PreconditionError(
            f"restore as of {iso_utc(as_of)} is after what backup {backup.backup_id} holds: its last "
            f"increment read the source's end offsets at about {covered}",
            hint=f"choose a time at or before {covered}, or back up again first",
        )


def _partition_count(
    item: RestoredTopic, settings: RestoreSettings, target: TargetState, warnings: list[str], *, added: int
) -> int:
    """The partition count of the target topic while records are restored (``added``: the
    partitions ``existing_topics: apply`` adds to an existing one first)."""
    name, target_topic = item.entry.name, item.target_topic
    wanted = settings.target_partitions.get(name)
    if target_topic in target.topics:
        count = target.topics[target_topic] + added
        if wanted is not None and wanted != count and settings.existing_topics != "apply":
            warnings.append(
                f"topic {target_topic} exists with {count} partition(s); restore.target_partitions "
                f"({wanted}) applies only to topics the restore creates and to restore.existing_topics: apply"
            )
        return count
    if not settings.create_topics:
        raise NotFoundError(
            f"target topic {target_topic!r} does not exist on {target.description} and "
            "restore.create_topics is false",
            hint="create it, or set restore.create_topics: true",
        )
    return wanted if wanted is not None else item.entry.partitions


def existing_topic_drift(
    selected: list[RestoredTopic], settings: RestoreSettings, target: TargetState, warnings: list[str]
) -> dict[str, list[TopicDifference]]:
    """How each existing target topic differs from the backup's, by target topic; what
    ``restore.existing_topics`` says about it added to ``warnings``, or, with ``fail``, a
    PreconditionError naming every topic that differs (before anything is written)."""
    drift: dict[str, list[TopicDifference]] = {}
    for item in selected:
        topic = item.target_topic
        if topic not in target.topics:
            continue
        configs = target.topic_configs.get(topic)
        if configs is None and settings.copy_topic_configs:
            warnings.append(
                f"the configs of target topic {topic} could not be read: only its partition count is "
                "compared with the backup's"
            )
        drift[topic] = topic_differences(
            item.entry,
            configs or {},
            target.topics[topic],
            copy=settings.copy_topic_configs and configs is not None,
            excluded=settings.exclude_topic_configs,
            wanted_partitions=settings.target_partitions.get(item.entry.name),
            replicas=target.replication_factors.get(topic),
            timestamp_type_left_to=TIMESTAMP_POLICY,
        )
    refused: dict[str, list[TopicDifference]] = {}
    for topic, differences in drift.items():
        for difference in differences:
            if settings.existing_topics == "fail" and difference.left_to is None:
                refused.setdefault(topic, []).append(difference)
            else:
                warnings.extend(_difference_warning(topic, difference, settings.existing_topics))
    if refused:
        named = "; ".join(
            f"{topic} ({', '.join(d.describe() for d in differences)})"
            for topic, differences in refused.items()
        )
        raise PreconditionError(
            f"restore.existing_topics is fail and {len(refused)} existing target topic(s) differ from the "
            f"backup: {named}",
            hint="restore.existing_topics: apply sets the backup's configs and adds partitions before the "
            "first record; validate restores into the topics as they are; or change the topics yourself",
        )
    return drift


def _difference_warning(topic: str, difference: TopicDifference, policy: ExistingTopicsPolicy) -> list[str]:
    """The warning of one difference under ``policy`` (none for a config apply sets: the plan
    shows it)."""
    said = f"target topic {topic} differs from the backup, {difference.describe()}"
    if policy == "apply" and difference.fixable:
        if difference.name != PARTITIONS:
            return []
        return [f"{said}: restore.existing_topics: {difference.note}"]
    if difference.fixable:
        return [f"{said}: restored into as it is (restore.existing_topics: validate; apply would change it)"]
    if policy == "validate":
        return [f"{said}: restored into as it is ({difference.note})"]
    return [f"{said}: {difference.note}"]


def _applied(differences: list[TopicDifference]) -> tuple[dict[str, str], int]:
    """What ``existing_topics: apply`` changes: the configs it sets, the partitions it adds."""
    changes: dict[str, str] = {}
    added = 0
    for difference in differences:
        if not difference.fixable or difference.backup_value is None:
            continue
        if difference.name == PARTITIONS:
            added = int(difference.backup_value) - int(difference.target_value or 0)
        else:
            changes[difference.name] = difference.backup_value
    return changes, added


def _copied_timestamp_type(entry: TopicEntry, settings: RestoreSettings, target: TargetState) -> str:
    """The timestamp type a topic gets on the target with the source's configs copied."""
    if settings.copy_topic_configs and TIMESTAMP_TYPE not in settings.exclude_topic_configs:
        return entry.configs.get(TIMESTAMP_TYPE, target.default_timestamp_type)
    return target.default_timestamp_type


def _timestamp_warning(
    topic: TopicPlan, settings: RestoreSettings, warnings: list[str], *, made_create_time: bool
) -> None:
    """What happens to the timestamps of a topic that uses, or would use, LogAppendTime
    (``made_create_time``: the plan creates it as CreateTime instead)."""
    name = topic.target_topic
    if topic.timestamp_type == LOG_APPEND_TIME:
        if settings.log_append_time == "rewrite":
            warnings.append(
                f"target topic {name} uses LogAppendTime (restore.log_append_time: rewrite): the broker "
                "rewrites every restored record's timestamp to the time it is written (the original is "
                "kept in the x-kafka-backup-timestamp header only if origin headers are on)"
            )
        return
    if topic.switch_to_log_append_time:
        warnings.append(
            f"target topic {name} is switched to LogAppendTime once its records are restored "
            "(restore.log_append_time: switch-after): restored records keep their original timestamps, "
            "records produced after the switch get the broker's time, and records other producers write "
            "to it before the switch keep their own"
        )
    elif made_create_time:
        warnings.append(
            f"target topic {name} is created with message.timestamp.type CreateTime instead of "
            "LogAppendTime, so every restored record keeps its original timestamp; records produced to "
            "it later keep their producers' timestamps too (restore.log_append_time: switch-after "
            "switches it to LogAppendTime after the restore, rewrite keeps LogAppendTime)"
        )


def refuse_rewritten_timestamps(plan: RestorePlan, written_topics: Iterable[str]) -> None:
    """Refuse to write into an existing LogAppendTime topic, unless ``restore.log_append_time: rewrite``:
    the broker would stamp every restored record with the restore time."""
    if plan.log_append_time == "rewrite":
        return
    written = set(written_topics)
    for topic in plan.topics:
        if not topic.create and topic.timestamp_type == LOG_APPEND_TIME and topic.target_topic in written:
            raise PreconditionError(
                f"target topic {topic.target_topic!r} exists with message.timestamp.type LogAppendTime: "
                "the broker would stamp every restored record with the restore time instead of its "
                "original timestamp",
                hint="set the topic to CreateTime (kafka-configs.sh --alter --entity-type topics "
                f"--entity-name {topic.target_topic} --add-config message.timestamp.type=CreateTime; "
                "restore.log_append_time: switch-after switches it back after the restore), delete it "
                "so the restore creates it, or accept the restore time with restore.log_append_time: "
                "rewrite (--log-append-time rewrite)",
            )


def _retention_warning(
    topic: TopicPlan,
    partitions: list[PartitionPlan],
    target: TargetState,
    now_ms: int,
    warnings: list[str],
) -> None:
    """Records older than the target topic's retention are deleted by the target right after the restore."""
    if topic.create:
        if "delete" not in topic.configs.get("cleanup.policy", "delete"):
            return
        raw = topic.configs.get("retention.ms")
        retention = int(raw) if raw is not None and raw.lstrip("-").isdigit() else target.default_retention_ms
    elif "retention.ms" in topic.config_changes and "delete" in topic.cleanup_policy:
        # existing_topics: apply sets the backup's retention before the first record.
        raw = topic.config_changes["retention.ms"]
        retention = int(raw) if raw.lstrip("-").isdigit() else target.default_retention_ms
    else:
        if topic.target_topic not in target.retention_ms:
            return
        retention = target.retention_ms[topic.target_topic]
    if retention < 0:
        return
    oldest = min(
        (s.min_timestamp for p in partitions for s in p.segments if s.min_timestamp >= 0),
        default=None,
    )
    if oldest is not None and oldest < now_ms - retention:
        warnings.append(
            f"target topic {topic.target_topic} keeps records for retention.ms={retention}, but the oldest "
            f"selected record is from {format_time(oldest)}: the target deletes such records soon after "
            "they are restored (list retention.ms in restore.exclude_topic_configs, or raise it)"
        )


def _partition_plan(
    coverage: PartitionCoverage,
    settings: RestoreSettings,
    target_topic: str,
    routing: Routing,
    target_partition: int | None,
    target_partitions: int,
    rules: tuple[FilterRule, ...] = (),
) -> PartitionPlan:
    start, end = coverage.start_offset, coverage.end_offset
    chosen = settings.offset_ranges.get(coverage.topic, {}).get(coverage.partition)
    if chosen is not None:
        if chosen.start is not None:
            start = max(start, chosen.start)
        if chosen.end is not None:
            end = min(end, chosen.end)
        end = max(start, end)
    record_filter = RecordFilter(start, end, settings.time_window_start, settings.time_end)
    segments = [segment for segment in coverage.segments if record_filter.segment_overlaps(segment)]
    partition = PartitionPlan(
        source_topic=coverage.topic,
        source_partition=coverage.partition,
        target_topic=target_topic,
        routing=routing,
        target_partition=None if routing == "repartition" else target_partition,
        target_partitions=target_partitions,
        offset_start=start,
        offset_end=end,
        time_start=settings.time_window_start,
        time_end=settings.time_end,
        segments=segments,
        records_in_whole_segments=0,
        partial_segments=[],
        rules=rules,
    )
    whole = [segment for segment in segments if partition.counted_by_manifest(segment)]
    whole_keys = {segment.key for segment in whole}
    partition.records_in_whole_segments = sum(segment.record_count for segment in whole)
    partition.partial_segments = [segment.key for segment in segments if segment.key not in whole_keys]
    return partition


def compiled_rules(settings: RestoreSettings) -> list[tuple[FilterRule, Callable[[str], bool]]]:
    """Each rule of ``restore.filters`` ready to apply (its keys file read once, here), with the
    test of the source topics it applies to; a bad keys file or entry is a ConfigError naming it."""
    compiled: list[tuple[FilterRule, Callable[[str], bool]]] = []
    for number, rule in enumerate(settings.filters, start=1):
        matcher = None if rule.is_empty() else RecordMatcher.from_settings(rule)
        compiled.append(
            (
                FilterRule(number, rule.action, matcher, rule.time_window_start, rule.time_window_end),
                rule.applies_to,
            )
        )
    return compiled


def _mode(settings: RestoreSettings, target: TargetState, warnings: list[str]) -> tuple[Mode, str]:
    if settings.exactly_once is False:
        return "idempotent", "restore.exactly_once is false"
    if target.transactions_possible:
        return "exactly-once", "records and progress are committed together in transactions"
    note = target.transactions_note or "the target cannot run transactions"
    if settings.exactly_once is True:
        raise PreconditionError(
            f"restore.exactly_once is true but {note}",
            hint="fix the target's transaction settings, or set restore.exactly_once: false",
        )
    warnings.append(f"exactly-once mode is not possible ({note}): restoring in the idempotent mode")
    return "idempotent", note


def format_time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{ms} ({iso_of_ms(ms)})"
