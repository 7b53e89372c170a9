"""From a config file to a reset plan: the one place a reset request is assembled.

``offset-reset plan``, ``offset-reset-bulk``, the three-phase restore and the drill all plan through
:func:`plan_reset`, so each ``offset_reset`` setting (strategy, offset, timestamp, timeout, live
source offsets, topic mapping, mapping file, uncommitted partitions) and the restore's topic
selection mean the same thing in every command.
"""

from __future__ import annotations

from pathlib import Path

from kbackup.app.config import KBackupConfig
from kbackup.app.three_phase_run import mapping_files_of_backup, run_files
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import ConfigError, UsageError
from kbackup.core.kafka import open_admin
from kbackup.core.progress import Progress
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.reset_plan import ResetPlan
from kbackup.reset import (
    MAPPING_HINT,
    MappingIndex,
    PlanRequest,
    SourceOffsets,
    from_backup,
    from_backup_as_of,
    from_live_source,
    load_mapping_index,
    plan_offset_reset,
    timestamps_from_backup,
)
from kbackup.restore.plan import restored_topics
from kbackup.storage import Storage, open_storage


def load_backup(config: KBackupConfig) -> tuple[Storage, Backup]:
    if not config.backup_id:
        # Given nowhere (offset-reset-bulk has no --backup-id): the command was called wrong.
        raise UsageError(
            "no backup id: set backup_id in the config file (the groups' offsets are read from that backup)",
            hint="set backup_id, or read the offsets from the live source: offset_reset.source_offsets: live",
        )
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
        source = from_live_source(
            config.source, groups, cluster, backup, named_cluster_id=settings.live_source_cluster_id
        )
        return source, backup, storage
    storage, backup = load_backup(config)
    if settings.source_cluster and settings.source_cluster != backup.source_cluster:
        raise ConfigError(
            f"offset_reset.source_cluster is {settings.source_cluster!r} but backup {backup.backup_id} "
            f"is from {backup.source_cluster!r}"
        )
    if settings.as_of is not None:
        return from_backup_as_of(backup, storage, settings.as_of), backup, storage
    return from_backup(backup, storage.url), backup, storage


def reset_request(
    config: KBackupConfig,
    *,
    groups: list[str] | None = None,
    mapping: MappingIndex | None = None,
    group_prefix: str = "",
    search_repartitioned: bool = False,
) -> PlanRequest:
    """The reset stage's request for this config.

    ``groups`` (the command line's) replace ``offset_reset.groups``; ``mapping`` (the three-phase
    restore's own scan) replaces ``offset_reset.mapping_file``; the target group of source group
    G is ``group_prefix + G``; ``search_repartitioned`` (the three-phase restore's audit order)
    places repartitioned topics without a mapping by searching each source partition.
    """
    target = require_target(config)
    settings = config.offset_reset
    chosen_groups = groups if groups else settings.groups
    source, backup, storage = source_offsets_for(config, chosen_groups)
    mapping_hint = MAPPING_HINT
    rewind = settings.strategy == "rewind"
    if mapping is None and not rewind:  # a rewind translates nothing
        mapping, mapping_hint = configured_mapping(config, target, source.info.source_cluster)
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
    return PlanRequest(
        target=target,
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
        group_prefix=group_prefix,
        source_topics=restored_source_topics(config, backup),
        mapping_hint=mapping_hint,
        search_repartitioned=search_repartitioned,
        rewind_cluster_id=backup.latest.source.kafka_cluster_id if rewind and backup is not None else None,
        rewind_topic_ids=(
            {name: topic.topic_id for name, topic in backup.topics.items()}
            if rewind and backup is not None
            else {}
        ),
    )


def configured_mapping(
    config: KBackupConfig, target: KafkaConnection, source_cluster: str
) -> tuple[MappingIndex | None, str]:
    """The mapping ``offset_reset.mapping_file`` names, else the one a three-phase restore of this
    config built (so planning after that restore plans what its reset phase did, repartitioned
    topics included), and the hint to print if a topic needs a mapping and there is none."""
    settings = config.offset_reset
    if not settings.mapping_file and not config.backup_id:
        return None, MAPPING_HINT
    target_cluster_id = open_admin(target).cluster_id()
    if settings.mapping_file:
        path = Path(settings.mapping_file)
    else:
        path = run_files(config, target_cluster_id).mapping
        if not path.exists():
            return None, mapping_hint_naming(mapping_files_of_backup(config))
    return load_mapping_index(path, source_cluster, target_cluster_id), MAPPING_HINT


def mapping_hint_naming(written: list[Path]) -> str:
    """The hint, naming the mappings three-phase restores of this backup wrote with other settings."""
    if not written:
        return MAPPING_HINT
    others = f" (and {len(written) - 1} older)" if len(written) > 1 else ""
    return (
        f"three-phase-restore wrote {written[0]}{others} for this backup with other settings or flags: "
        f"if it is this restore's, set offset_reset.mapping_file: {written[0]}; otherwise {MAPPING_HINT}"
    )


def restored_source_topics(config: KBackupConfig, backup: Backup | None) -> list[str] | None:
    """The source topics ``restore.topics`` selects: the groups' offsets on the others have no
    restored records to move to. None (every topic) when it is unset, or without the backup."""
    if not config.restore.topics or backup is None:
        return None
    return [item.entry.name for item in restored_topics(backup, config.restore)]


def plan_reset(
    config: KBackupConfig,
    *,
    groups: list[str] | None = None,
    mapping: MappingIndex | None = None,
    group_prefix: str = "",
    progress: Progress | None = None,
    search_repartitioned: bool = False,
) -> ResetPlan:
    """Plan the groups' new offsets on the target (reads both sides; changes nothing)."""
    request = reset_request(
        config,
        groups=groups,
        mapping=mapping,
        group_prefix=group_prefix,
        search_repartitioned=search_repartitioned,
    )
    return plan_offset_reset(request, progress=progress)


def require_target(config: KBackupConfig) -> KafkaConnection:
    if config.target is None:
        raise UsageError(
            "no target cluster: set a target section in the config file (the cluster the groups move to)"
        )
    return config.target
