"""Where a backup's chain of increments stands: the next number, what it covers, what it last said.

A run starts it from the backup's committed manifests (``ChainState.of``), moves it on after each
increment it commits (``committed``), and asks it whether an increment would say anything new
(``nothing_new``); docs/format.md describes the chain (each manifest names its predecessor).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import Backup, PartitionCoverage, merge_partition
from kbackup.format.manifest import ConsumerGroupsSnapshot, Manifest, PartitionEntry, SegmentEntry, TopicEntry


@dataclass
class ChainState:
    """Where the backup's chain of increments stands: the next number and what is covered."""

    increment: int
    previous_run_id: str | None
    coverage: dict[TopicPartitionKey, PartitionCoverage]
    topics: dict[str, TopicEntry]
    #: Each topic as the committed increments last recorded it (``topics`` runs ahead of them).
    committed_topics: dict[str, TopicEntry] = field(default_factory=dict)
    #: The latest group snapshot the committed increments hold.
    groups: ConsumerGroupsSnapshot | None = None
    #: The partitions the latest committed increment lists: one it lists and the next does not (its
    #: topic deleted, or no longer selected) is news, which ``coverage`` (every partition ever)
    #: cannot tell.
    latest_partitions: frozenset[TopicPartitionKey] = frozenset()

    @classmethod
    def of(cls, backup: Backup | None) -> ChainState:
        if backup is None:
            return cls(increment=0, previous_run_id=None, coverage={}, topics={})
        return cls(
            increment=backup.latest.increment + 1,
            previous_run_id=backup.latest.run_id,
            coverage=backup.coverage(),
            topics=dict(backup.topics),
            committed_topics=dict(backup.topics),
            groups=backup.consumer_groups,
            latest_partitions=frozenset((entry.topic, entry.partition) for entry in backup.latest.partitions),
        )

    def remember_topics(self, entries: list[TopicEntry]) -> None:
        for entry in entries:
            self.topics[entry.name] = entry

    def committed(self, manifest: Manifest) -> None:
        for entry in manifest.partitions:
            merge_partition(self.coverage, entry)
        self.committed_topics.update({topic.name: topic for topic in manifest.topics})
        self.latest_partitions = frozenset((entry.topic, entry.partition) for entry in manifest.partitions)
        if manifest.consumer_groups is not None:
            self.groups = manifest.consumer_groups
        self.increment = manifest.increment + 1
        self.previous_run_id = manifest.run_id

    def nothing_new(
        self,
        entries: list[PartitionEntry],
        segments: list[SegmentEntry],
        groups: ConsumerGroupsSnapshot | None,
        topics: list[TopicEntry],
    ) -> bool:
        """Whether an increment of these would tell a reader nothing the backup does not say already.

        News is a record, an offset range that moved without records (transaction markers,
        aborted or compacted records: the backup covers further), a new partition or topic, a
        topic whose metadata changed, a partition the latest increment lists and this one does not
        (its topic deleted on the source, or no longer selected: the increment that notices a
        deletion still lists the partition, ended where it was read up to, and only the next one
        leaves it out, with or without a record to copy), or a group whose committed
        offsets moved, even with no new record (a consumer that caught up). A group's state alone
        (Stable, Empty) and the time of the snapshot are not. The first increment of a backup is
        always committed.
        """
        if self.increment == 0 or segments:
            return False
        if any(
            entry.end_offset != entry.start_offset or (entry.topic, entry.partition) not in self.coverage
            for entry in entries
        ):
            return False
        if any(self.committed_topics.get(topic.name) != topic for topic in topics):
            return False
        if self.latest_partitions - {(entry.topic, entry.partition) for entry in entries}:
            return False
        return groups is None or _positions(groups) == _positions(self.groups)


def _positions(snapshot: ConsumerGroupsSnapshot | None) -> dict[str, set[tuple[str, int, int, str | None]]]:
    """What a group snapshot says about positions: each group's committed offsets and metadata."""
    if snapshot is None:
        return {}
    return {
        group.group_id: {(item.topic, item.partition, item.offset, item.metadata) for item in group.offsets}
        for group in snapshot.groups
    }
