"""The root of a kafka-backup config file: one file may hold the sections of several commands."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from kbackup.backup.settings import BackupSettings, SourceSettings
from kbackup.core.config import StorageSettings, StrictModel, load_config
from kbackup.drill.settings import DrillSettings, ThreePhaseSettings
from kbackup.mapping.settings import MappingSettings
from kbackup.reset.settings import OffsetResetSettings
from kbackup.restore.settings import RestoreSettings, TargetSettings


class KBackupConfig(StrictModel):
    """Everything a config file can say. Each command checks that the sections it needs are there."""

    mode: Literal["backup", "restore", "offset-reset", "three-phase-restore", "drill"] | None = None
    backup_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._=+@,-]{1,200}$")
    source: SourceSettings | None = None
    target: TargetSettings | None = None
    storage: StorageSettings = Field(default_factory=StorageSettings)
    backup: BackupSettings = Field(default_factory=BackupSettings)
    restore: RestoreSettings = Field(default_factory=RestoreSettings)
    mapping: MappingSettings = Field(default_factory=MappingSettings)
    offset_reset: OffsetResetSettings = Field(default_factory=OffsetResetSettings)
    three_phase: ThreePhaseSettings = Field(default_factory=ThreePhaseSettings)
    drill: DrillSettings = Field(default_factory=DrillSettings)


def load(path: str | Path) -> KBackupConfig:
    """Read and validate a config file (no network access)."""
    return load_config(path, KBackupConfig)
