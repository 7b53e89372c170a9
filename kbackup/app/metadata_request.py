"""The metadata restore as ``restore-metadata`` and ``three-phase-restore`` ask for it: the config's
``restore_metadata`` section, its target and storage (flags over them), and ``restore.topic_mapping``
so that ACLs on renamed topics come back on the new names."""

from __future__ import annotations

from kbackup.app.config import KBackupConfig
from kbackup.app.overrides import backup_id_of, storage_settings, target_connection
from kbackup.core.config import KafkaConnection
from kbackup.format.catalog import BackupCatalog
from kbackup.format.metadata_plan import MetadataPlan
from kbackup.restore import MetadataResult, execute_metadata_plan, plan_metadata_restore
from kbackup.storage import open_storage


def plan_metadata(
    config: KBackupConfig,
    *,
    bootstrap_servers: str | None = None,
    path: str | None = None,
    backup_id: str | None = None,
) -> MetadataPlan:
    """Plan the restore of the backup's cluster metadata onto the target; changes nothing."""
    target = target_connection(config, bootstrap_servers)
    chosen = backup_id_of(config, backup_id)
    storage = open_storage(storage_settings(config, path, run=True))
    backup = BackupCatalog(storage).load(chosen)
    return plan_metadata_restore(
        backup=backup,
        storage=storage,
        target=target,
        settings=config.restore_metadata,
        topic_mapping=dict(config.restore.topic_mapping),
    )


def execute_metadata(
    config: KBackupConfig, plan: MetadataPlan, *, target: KafkaConnection, dry_run: bool = False
) -> MetadataResult:
    """Apply a reviewed plan; the passwords come from the config's password source."""
    return execute_metadata_plan(plan, target, config.restore_metadata, dry_run=dry_run)
