"""The root of a kafka-backup config file: one file may hold the sections of several commands."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from kbackup.app.settings import DrillSettings, ThreePhaseSettings
from kbackup.backup.settings import BackupSettings, SourceSettings
from kbackup.core.config import StorageSettings, StrictModel, load_config
from kbackup.mapping.settings import MappingSettings
from kbackup.reset.settings import OffsetResetSettings
from kbackup.restore.settings import RestoreSettings, TargetSettings


class KBackupConfig(StrictModel):
    """Everything a config file can say. Each command checks that the sections it needs are there."""

    mode: Literal["backup", "restore", "offset-reset", "three-phase-restore", "drill"] | None = Field(
        default=None,
        description="What the file is for (informative; every command reads the sections it needs).",
    )
    backup_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._=+@,-]{1,200}$",
        description="Name of the backup in the storage location; `--backup-id` overrides it.",
    )
    source: SourceSettings | None = Field(default=None, description="The cluster backed up.")
    target: TargetSettings | None = Field(default=None, description="The cluster restored to.")
    storage: StorageSettings = Field(default_factory=StorageSettings, description="Where backups live.")
    backup: BackupSettings = Field(default_factory=BackupSettings, description="How a backup is taken.")
    restore: RestoreSettings = Field(default_factory=RestoreSettings, description="How a backup is replayed.")
    mapping: MappingSettings = Field(
        default_factory=MappingSettings, description="Where the Spark offset-mapping job runs."
    )
    offset_reset: OffsetResetSettings = Field(
        default_factory=OffsetResetSettings, description="How consumer groups are moved."
    )
    three_phase: ThreePhaseSettings = Field(
        default_factory=ThreePhaseSettings, description="The resumable three-phase restore."
    )
    drill: DrillSettings = Field(default_factory=DrillSettings, description="The disaster-recovery drill.")


def load(path: str | Path) -> KBackupConfig:
    """Read and validate a config file (no network access)."""
    return load_config(path, KBackupConfig)
