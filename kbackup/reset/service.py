"""From a config file to a reset plan, and the timestamp lookups the timestamp strategy needs."""

from __future__ import annotations

from pathlib import Path

from kbackup.config import KBackupConfig
from kbackup.core.errors import ConfigError
from kbackup.core.kafka import KafkaClients
from kbackup.core.progress import Progress
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.segments import iter_segment_batches
from kbackup.reset.plan import ResetPlan
from kbackup.reset.planner import MappingIndex, PlanRequest, RecordTimestampLookup, plan_offset_reset
from kbackup.reset.sources import SourceOffsets, from_backup, from_live_source
from kbackup.storage import Storage, open_storage


def load_backup(config: KBackupConfig) -> tuple[Storage, Backup]:
    if not config.backup_id:
        raise ConfigError("backup_id is required to read the groups' offsets from a backup")
    storage = open_storage(config.storage)
    return storage, BackupCatalog(storage).load(config.backup_id)


def source_offsets_for(
    config: KBackupConfig, groups: list[str]
) -> tuple[SourceOffsets, Backup | None, Storage | None]:
    settings = config.offset_reset
    if settings.source_offsets == "live":
        if config.source is None:
            raise ConfigError("offset_reset.source_offsets: live needs a 'source' section")
        storage, backup = load_backup(config) if config.backup_id else (None, None)
        cluster = settings.source_cluster or (backup.source_cluster if backup else None)
        if cluster is None:
            raise ConfigError(
                "offset_reset.source_cluster is required when reading offsets from the live source"
            )
        return from_live_source(config.source, groups, cluster, backup), backup, storage
    storage, backup = load_backup(config)
    if settings.source_cluster and settings.source_cluster != backup.source_cluster:
        raise ConfigError(
            f"offset_reset.source_cluster is {settings.source_cluster!r} but backup {backup.backup_id} "
            f"is from {backup.source_cluster!r}"
        )
    return from_backup(backup, storage.url), backup, storage


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
            for batch in iter_segment_batches(storage, backup.backup_id, segment):
                offsets = batch.column("offset").to_pylist()
                timestamps = batch.column("timestamp").to_pylist()
                for found, timestamp in zip(offsets, timestamps, strict=True):
                    if found >= offset:
                        return int(timestamp)
        return None

    return lookup


def plan_from_config(
    config: KBackupConfig,
    *,
    groups: list[str] | None = None,
    mapping: MappingIndex | None = None,
    progress: Progress | None = None,
) -> ResetPlan:
    if config.target is None:
        raise ConfigError("a 'target' section (the cluster the groups move to) is required")
    settings = config.offset_reset
    chosen_groups = groups if groups else settings.groups
    source, backup, storage = source_offsets_for(config, chosen_groups)
    if mapping is None and settings.mapping_file:
        from kbackup.reset.mapping_input import load_mapping_index

        target_cluster_id = KafkaClients(config.target).cluster_info().cluster_id
        mapping = load_mapping_index(
            Path(settings.mapping_file), source.info.source_cluster, target_cluster_id
        )
    topic_mapping = (
        settings.topic_mapping if settings.topic_mapping is not None else config.restore.topic_mapping
    )
    record_timestamp = (
        timestamps_from_backup(storage, backup)
        if settings.strategy == "timestamp"
        and settings.timestamp is None  # a fixed point in time needs no record timestamps
        and storage is not None
        and backup is not None
        else None
    )
    return plan_offset_reset(
        PlanRequest(
            target=config.target,
            source=source,
            strategy=settings.strategy,
            groups=chosen_groups,
            topic_mapping=topic_mapping,
            mapping=mapping,
            scan_all_partitions=settings.scan_all_partitions,
            fixed_offset=settings.offset,
            fixed_timestamp=settings.timestamp,
            record_timestamp=record_timestamp,
            timeout_secs=settings.timeout_secs,
            uncommitted=settings.uncommitted_partitions,
        ),
        progress=progress,
    )
