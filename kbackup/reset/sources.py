"""Where the groups' committed source offsets come from: a backup's snapshot, or the live source."""

from __future__ import annotations

from dataclasses import dataclass, field

from kbackup.core.admin import open_admin
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import BackupIntegrityError
from kbackup.format.catalog import Backup
from kbackup.format.manifest import utc_now_iso
from kbackup.reset.plan import SourceOffsetsInfo

SourcePartitionKey = tuple[str, int]


@dataclass
class SourceOffsets:
    """Committed offsets per group on the source, with what the backup holds of each partition."""

    info: SourceOffsetsInfo
    #: group -> {(source topic, partition): committed offset}
    groups: dict[str, dict[SourcePartitionKey, int]]
    #: Partition count of each source topic.
    partition_counts: dict[str, int]
    #: End of what the backup holds per source partition (exclusive); None when unknown (live, no backup).
    backup_end: dict[SourcePartitionKey, int] | None = None
    group_states: dict[str, str | None] = field(default_factory=dict)


def from_backup(backup: Backup, storage_url: str) -> SourceOffsets:
    snapshot = backup.consumer_groups
    if snapshot is None:
        raise BackupIntegrityError(
            f"backup {backup.backup_id} holds no consumer-group snapshot",
            hint="take the backup with backup.consumer_group_snapshot: true, "
            "or read offsets from the live source",
        )
    groups = {
        group.group_id: {(item.topic, item.partition): item.offset for item in group.offsets}
        for group in snapshot.groups
    }
    coverage = backup.coverage()
    return SourceOffsets(
        info=SourceOffsetsInfo(
            kind="backup",
            taken_at=snapshot.taken_at,
            source_cluster=backup.source_cluster,
            backup_id=backup.backup_id,
            storage_url=storage_url,
        ),
        groups=groups,
        partition_counts={name: topic.partitions for name, topic in backup.topics.items()},
        backup_end={key: item.end_offset for key, item in coverage.items()},
        group_states={group.group_id: group.state for group in snapshot.groups},
    )


def from_live_source(
    connection: KafkaConnection, group_ids: list[str], source_cluster: str, backup: Backup | None
) -> SourceOffsets:
    """Read the groups' committed offsets from the source cluster now (when it is still up)."""
    admin = open_admin(connection)
    taken_at = utc_now_iso()
    ids = group_ids or admin.list_group_ids()
    groups = admin.committed_offsets_of(ids)
    topics = {topic for offsets in groups.values() for topic, _ in offsets}
    coverage = backup.coverage() if backup is not None else None
    return SourceOffsets(
        info=SourceOffsetsInfo(
            kind="live",
            taken_at=taken_at,
            source_cluster=source_cluster,
            backup_id=backup.backup_id if backup is not None else None,
            bootstrap_servers=connection.bootstrap_servers,
        ),
        groups=groups,
        partition_counts=admin.partition_counts(topics) if topics else {},
        backup_end={key: item.end_offset for key, item in coverage.items()} if coverage is not None else None,
        group_states={group_id: state.state for group_id, state in admin.describe_groups(ids).items()},
    )
