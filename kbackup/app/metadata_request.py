"""The metadata restore as ``restore-metadata`` and ``three-phase-restore`` ask for it: the config's
``restore_metadata`` section, its target and storage (flags over them), and ``restore.topic_mapping``
so that ACLs on renamed topics come back on the new names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kbackup.app.config import KBackupConfig
from kbackup.app.overrides import backup_id_of, storage_settings, target_connection
from kbackup.core.config import KafkaConnection
from kbackup.core.files import write_file
from kbackup.core.logs import get_logger
from kbackup.format.catalog import BackupCatalog
from kbackup.format.metadata_plan import MetadataPlan
from kbackup.restore import MetadataResult, execute_metadata_plan, plan_metadata_restore
from kbackup.storage import open_storage

log = get_logger("restore.metadata")


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
        restore=config.restore,
    )


def metadata_phase(config: KBackupConfig, plan_file: Path) -> dict[str, Any]:
    """``three-phase-restore``'s first phase (``restore_metadata.enabled``): plan, keep the plan
    beside the run's state for review afterwards, execute it; what it did, for the state file."""
    plan = plan_metadata(config)
    write_file(plan_file, plan.to_json_bytes(), "three-phase-restore metadata plan (three_phase.state_dir)")
    result = execute_metadata(config, plan, target=target_connection(config, None))
    for line in plan.warnings:
        log.warning("%s", line)
    return {
        "plan": str(plan_file),
        "applied": len(result.applied),
        "unchanged": result.unchanged,
        "left": result.left,
        "warnings": plan.warnings,
    }


def execute_metadata(
    config: KBackupConfig, plan: MetadataPlan, *, target: KafkaConnection, dry_run: bool = False
) -> MetadataResult:
    """Apply a reviewed plan; the passwords come from the config's password source."""
    return execute_metadata_plan(plan, target, config.restore_metadata, dry_run=dry_run)
