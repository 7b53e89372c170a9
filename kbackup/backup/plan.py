"""What a backup run copies: which topics, which partitions, from which offset to which.

Pure logic over what the cluster and the existing backup say, so it is tested
without Kafka. The runner reads the cluster; this module decides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kbackup.backup.settings import TopicSelection
from kbackup.core.errors import NotFoundError, PreconditionError
from kbackup.core.logs import get_logger
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import Backup, PartitionCoverage

log = get_logger("backup.plan")


#: Kafka's own topics (__consumer_offsets, __transaction_state, ...) start with this.
INTERNAL_TOPIC_PREFIX = "__"
#: A pattern made only of characters legal in topic names names one topic (``.`` matches itself too).
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class TopicChoice:
    """The outcome of matching the include/exclude patterns against the cluster's topics."""

    selected: list[str]
    #: Include patterns that name one topic (no regex syntax) which the cluster does not have.
    missing: list[str] = field(default_factory=list)
    #: Regex include patterns that matched no topic (not an error: a pattern may match later).
    unmatched_patterns: list[str] = field(default_factory=list)


def is_internal_topic(name: str) -> bool:
    return name.startswith(INTERNAL_TOPIC_PREFIX)


def names_one_topic(pattern: str) -> bool:
    return bool(_TOPIC_NAME.match(pattern))


def select_topics(
    available: Iterable[str], selection: TopicSelection, *, include_internal: bool = False
) -> TopicChoice:
    """Topics matching an include pattern and no exclude pattern (full matches), sorted.

    Internal topics (``__*``) are left out unless ``include_internal``.
    """
    topics = sorted(set(available))
    includes = [re.compile(pattern) for pattern in selection.include]
    excludes = [re.compile(pattern) for pattern in selection.exclude]
    selected = []
    for topic in topics:
        if is_internal_topic(topic) and not include_internal:
            continue
        if any(p.fullmatch(topic) for p in includes) and not any(p.fullmatch(topic) for p in excludes):
            selected.append(topic)
    missing: list[str] = []
    unmatched: list[str] = []
    for pattern, compiled in zip(selection.include, includes, strict=True):
        if any(compiled.fullmatch(topic) for topic in topics):
            continue
        (missing if names_one_topic(pattern) else unmatched).append(pattern)
    return TopicChoice(selected=selected, missing=missing, unmatched_patterns=unmatched)


def check_missing_topics(choice: TopicChoice, *, on_missing: str, servers: str) -> None:
    """A named topic the cluster lacks: an error, or with ``on_missing_topic: warn`` a warning."""
    for pattern in choice.unmatched_patterns:
        log.warning("topic pattern %r matches no topic on %s", pattern, servers)
    if not choice.missing:
        return
    names = ", ".join(choice.missing)
    if on_missing == "warn":
        log.warning("topic(s) %s do not exist on %s: skipped (backup.on_missing_topic: warn)", names, servers)
        return
    raise NotFoundError(
        f"topic(s) {names} do not exist on {servers}",
        hint="fix source.topics.include, or set backup.on_missing_topic: warn to skip missing topics",
    )


@dataclass
class PartitionPlan:
    """What one increment copies of one source partition."""

    topic: str
    partition: int
    #: The increment's range starts here: the previous increment's end, else the log start.
    start_offset: int
    #: Records below this were deleted on the source (retention, DeleteRecords) before the run.
    log_start_offset: int
    #: Where the consumer starts reading: start_offset, or the log start if that is later.
    fetch_offset: int
    #: The increment's range ends here (exclusive); None while a follow-mode increment is open.
    end_offset: int | None

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)


def plan_partitions(
    partitions: Mapping[TopicPartitionKey, tuple[int, int]],
    coverage: Mapping[TopicPartitionKey, PartitionCoverage],
) -> list[PartitionPlan]:
    """Start and end offsets per partition.

    ``partitions`` maps each selected partition to ``(log_start_offset, end_offset)``
    as read from the cluster; ``coverage`` is what earlier increments hold.
    A partition continues where the backup ends; a new one starts at its log start.
    """
    plans = []
    for (topic, partition), (log_start, end) in sorted(partitions.items()):
        covered = coverage.get((topic, partition))
        start = covered.end_offset if covered is not None else log_start
        if end < start:
            raise PreconditionError(
                f"{topic}/{partition} ends at offset {end} on the source, but the backup already holds "
                f"it up to offset {start}: the topic was deleted and re-created, or this is another cluster",
                hint="back it up under a new backup id",
            )
        plans.append(
            PartitionPlan(
                topic=topic,
                partition=partition,
                start_offset=start,
                log_start_offset=log_start,
                fetch_offset=max(start, log_start),
                end_offset=end,
            )
        )
    return plans


def check_topic_identity(backup: Backup | None, topic_ids: Mapping[str, str | None]) -> None:
    """Refuse to continue a topic that was deleted and re-created (its offsets start over)."""
    if backup is None:
        return
    known = backup.topics
    for name, topic_id in topic_ids.items():
        previous = known.get(name)
        if previous is None or previous.topic_id is None or topic_id is None:
            continue
        if previous.topic_id != topic_id:
            raise PreconditionError(
                f"topic {name} was deleted and re-created on the source since the last increment "
                f"(topic id {previous.topic_id} then, {topic_id} now): its offsets started over",
                hint="back it up under a new backup id, or exclude it",
            )


def resolve_source_cluster_id(configured: str | None, kafka_cluster_id: str | None, servers: str) -> str:
    if configured:
        return configured
    if not kafka_cluster_id:
        raise PreconditionError(
            f"the cluster at {servers} reported no cluster id",
            hint="set backup.source_cluster_id (or --source-cluster-id) to name the source cluster",
        )
    return kafka_cluster_id


def check_same_source(backup: Backup | None, source_cluster_id: str, kafka_cluster_id: str | None) -> None:
    """A backup id holds one source cluster: its offsets mean nothing on another."""
    if backup is None:
        return
    if backup.source_cluster != source_cluster_id:
        raise PreconditionError(
            f"backup {backup.backup_id} holds source cluster {backup.source_cluster!r}, "
            f"this run reads {source_cluster_id!r}",
            hint="use another backup id for another cluster, or set backup.source_cluster_id to the "
            "backup's cluster id if this is the same cluster",
        )
    previous_kafka_id = backup.latest.source.kafka_cluster_id
    if previous_kafka_id and kafka_cluster_id and previous_kafka_id != kafka_cluster_id:
        raise PreconditionError(
            f"backup {backup.backup_id} was taken from Kafka cluster {previous_kafka_id}, "
            f"but {source_cluster_id!r} now answers as Kafka cluster {kafka_cluster_id}: "
            "its offsets are not a continuation of the backup",
            hint="use a new backup id for the new cluster",
        )
