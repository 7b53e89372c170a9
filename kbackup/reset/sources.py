"""Where the groups' committed source offsets come from (a backup's snapshot, or the live source), and
the record timestamps the timestamp strategy reads from a backup."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import BackupIntegrityError, PreconditionError
from kbackup.core.kafka import open_admin
from kbackup.core.times import iso_utc, parse_iso
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import Backup
from kbackup.format.group_history import (
    Positions,
    finest_interval,
    histories_of,
    positions_of,
    positions_over_time,
)
from kbackup.format.manifest import utc_now_iso
from kbackup.format.reset_plan import SourceOffsetsInfo
from kbackup.format.segments import iter_segment_batches
from kbackup.storage import Storage

#: (source topic, partition, committed offset) -> timestamp of the first record at or after it, or None.
RecordTimestampLookup = Callable[[str, int, int], int | None]


@dataclass
class SourceOffsets:
    """Committed offsets per group on the source, with what the backup holds of each partition."""

    info: SourceOffsetsInfo
    #: group -> {(source topic, partition): committed offset}
    groups: dict[str, dict[TopicPartitionKey, int]]
    #: Partition count of each source topic.
    partition_counts: dict[str, int]
    #: End of what the backup holds per source partition (exclusive); None when unknown (live, no backup).
    backup_end: dict[TopicPartitionKey, int] | None = None
    #: Start of the restorable window where a prune moved it (kafka-backup prune); records below it
    #: were in the backup once and are not any more.
    backup_start: dict[TopicPartitionKey, int] | None = None
    group_states: dict[str, str | None] = field(default_factory=dict)


def window_starts(backup: Backup) -> dict[TopicPartitionKey, int]:
    """Where a prune moved each partition's window start (none: never pruned)."""
    if backup.retention is None:
        return {}
    moved = backup.retention.window_starts()
    return {key: item.start_offset for key, item in backup.coverage().items() if key in moved}


def from_backup(backup: Backup, storage_url: str) -> SourceOffsets:
    snapshot = backup.consumer_groups
    if snapshot is None:
        raise BackupIntegrityError(
            f"backup {backup.backup_id} holds no consumer-group snapshot",
            hint="take the backup with backup.consumer_group_snapshot: true, "
            "or read offsets from the live source",
        )
    return _of_backup(
        backup,
        SourceOffsetsInfo(
            kind="backup",
            taken_at=snapshot.taken_at,
            source_cluster=backup.source_cluster,
            backup_id=backup.backup_id,
            storage_url=storage_url,
        ),
        positions_of(snapshot),
        group_states={group.group_id: group.state for group in snapshot.groups},
    )


def _of_backup(
    backup: Backup,
    info: SourceOffsetsInfo,
    groups: Positions,
    group_states: dict[str, str | None] | None = None,
) -> SourceOffsets:
    """The groups' offsets of one reading, with what the backup holds of each partition."""
    coverage = backup.coverage()
    return SourceOffsets(
        info=info,
        groups=groups,
        partition_counts={name: topic.partitions for name, topic in backup.topics.items()},
        backup_end={key: item.end_offset for key, item in coverage.items()},
        backup_start=window_starts(backup),
        group_states=group_states or {},
    )


def from_backup_as_of(backup: Backup, storage: Storage, as_of: datetime) -> SourceOffsets:
    """The groups' committed offsets as they were at ``as_of``: the latest reading of the groups
    (group history or increment snapshot) that finished by then, so no offset in it was committed
    after ``as_of``; refused before the first reading and after the last (where the groups went
    since is not in the backup)."""
    histories = histories_of(storage, backup.manifests, backup.keys)
    readings = list(positions_over_time(backup.manifests, histories))
    if not readings:
        raise BackupIntegrityError(
            f"backup {backup.backup_id} holds no reading of the consumer groups",
            hint="take the backup with backup.consumer_group_snapshot: true",
        )
    asked = iso_utc(as_of)
    chosen = None
    for reading in readings:
        if parse_iso(reading.known_by) <= as_of:
            chosen = reading
    if chosen is None:
        raise PreconditionError(
            f"as of {asked} is before backup {backup.backup_id}'s first reading of the groups "
            f"({readings[0].known_by})",
            hint=f"choose a time at or after {readings[0].known_by}",
        )
    precision = finest_interval(histories)
    last = readings[-1]
    if chosen is last and as_of.timestamp() - parse_iso(last.known_by).timestamp() > (precision or 0):
        raise PreconditionError(
            f"as of {asked} is after backup {backup.backup_id}'s last reading of the groups "
            f"({last.known_by}): where they went since is not in the backup",
            hint=f"choose a time at or before {last.known_by}, or back up again first",
        )
    info = SourceOffsetsInfo(
        kind="backup",
        taken_at=chosen.taken_at,
        source_cluster=backup.source_cluster,
        backup_id=backup.backup_id,
        storage_url=storage.url,
        as_of=asked,
        precision_secs=precision,
    )
    return _of_backup(backup, info, chosen.positions)


def from_live_source(
    connection: KafkaConnection,
    group_ids: list[str],
    source_cluster: str,
    backup: Backup | None,
    *,
    named_cluster_id: str | None = None,
) -> SourceOffsets:
    """Read the groups' committed offsets from the source cluster now (when it is still up).

    Refuses, before reading any offset, a live cluster that is not the origin the restored records name
    (``source_cluster``; its Kafka cluster id as ``backup`` recorded it), unless ``named_cluster_id``
    (``offset_reset.live_source_cluster_id``) names the live cluster's id.
    """
    admin = open_admin(connection)
    check_live_cluster(admin.cluster_id(), connection, source_cluster, backup, named_cluster_id)
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
        backup_start=window_starts(backup) if backup is not None else None,
        group_states={group_id: state.state for group_id, state in admin.describe_groups(ids).items()},
    )


def origin_kafka_cluster_id(source_cluster: str, backup: Backup | None) -> str:
    """The Kafka cluster id of the origin the restored records name: the one the backup recorded when
    they name the backup's origin, else the origin id itself (a backup's origin id is its Kafka cluster
    id unless ``backup.source_cluster_id`` chose a label)."""
    if backup is not None and backup.source_cluster == source_cluster:
        return backup.latest.source.kafka_cluster_id or source_cluster
    return source_cluster


def check_live_cluster(
    live_id: str | None,
    connection: KafkaConnection,
    source_cluster: str,
    backup: Backup | None,
    named_cluster_id: str | None,
) -> None:
    """A group's committed offsets are positions in one cluster's partitions: read from any other
    cluster they would move the group to other records, skipping or re-reading them."""
    servers = ",".join(connection.bootstrap_servers)
    if named_cluster_id is not None:
        if live_id != named_cluster_id:
            raise PreconditionError(
                f"offset_reset.live_source_cluster_id is {named_cluster_id}, but the source cluster "
                f"{servers} answers as Kafka cluster {live_id}",
                hint=f"point source.bootstrap_servers at cluster {named_cluster_id}, or correct "
                "offset_reset.live_source_cluster_id",
            )
        return
    expected = origin_kafka_cluster_id(source_cluster, backup)
    if live_id == expected:
        return
    if backup is not None and backup.source_cluster == source_cluster:
        origin = f"backup {backup.backup_id} was taken from Kafka cluster {expected}"
        where = f"point source.bootstrap_servers at cluster {expected}"
    else:
        # Without the backup, only the origin id the headers carry is known: a Kafka cluster id
        # unless backup.source_cluster_id chose a label, and a label cannot be checked.
        origin = (
            f"the restored records' origin headers name cluster {expected!r} (offset_reset.source_cluster)"
        )
        where = (
            "point source.bootstrap_servers at the origin (set backup_id to compare with the Kafka "
            "cluster id its backup recorded)"
        )
    raise PreconditionError(
        f"offset_reset.source_offsets: live: the source cluster {servers} is Kafka cluster {live_id}, "
        f"but {origin}: group offsets read there would move the groups to the wrong records",
        hint=f"{where}; if cluster {live_id} is the origin under a label, or really holds these groups' "
        f"offsets for the restored records, say so with offset_reset.live_source_cluster_id: {live_id}",
    )


def timestamps_from_backup(storage: Storage, backup: Backup) -> RecordTimestampLookup:
    """The timestamp of the first backed-up record at or after a source offset (reads one segment)."""
    coverage = backup.coverage()

    def lookup(topic: str, partition: int, offset: int) -> int | None:
        item = coverage.get((topic, partition))
        if item is None:
            return None
        for segment in item.segments:
            if segment.last_offset < offset:
                continue
            for batch in iter_segment_batches(storage, backup.backup_id, segment, keys=backup.keys):
                offsets = batch.column("offset").to_pylist()
                timestamps = batch.column("timestamp").to_pylist()
                for found, timestamp in zip(offsets, timestamps, strict=True):
                    if found >= offset:
                        return int(timestamp)
        return None

    return lookup
