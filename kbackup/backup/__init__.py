"""Stage 1, backup: Kafka topics to versioned Parquet on object storage.

What the stage offers, the same way the other stages say theirs:

- **run a backup**: ``run_backup(BackupJob(...), ...)`` copies one increment (snapshot mode), or
  one every checkpoint until stopped (follow mode), and returns a ``BackupSummary``; its sections
  of the config are ``SourceSettings`` and ``BackupSettings``;
- **look at backups**: ``list_backups``, ``describe_backup``, ``describe_group_history`` (one
  group's positions over time), and ``validate_backup`` (a ``ValidationReport``; ``deep``
  re-reads every segment);
- **status**: ``collect_status`` (each backup's recovery point and, with a source, its lag) and
  ``find_breaches`` (the thresholds it misses);
- **rekey**: ``plan_rekey`` then ``execute_rekey``, the keyrings of encrypted backups re-wrapped
  under a new key-encryption key.

The names load their modules on first use (``__getattr__``): a command that only reads the config
sections does not import the copier, Kafka or Parquet.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kbackup.backup.group_positions import describe_group_history
    from kbackup.backup.inspect import ValidationReport, describe_backup, list_backups, validate_backup
    from kbackup.backup.rekey import RekeyPlan, execute_rekey, plan_rekey
    from kbackup.backup.runner import BackupJob, run_backup
    from kbackup.backup.settings import BackupSettings, SourceSettings
    from kbackup.backup.status import StatusReport, collect_status, find_breaches
    from kbackup.backup.summary import BackupSummary, CommittedIncrement

#: Each public name and the module of the stage that defines it.
_MODULE_OF = {
    "BackupJob": "runner",
    "run_backup": "runner",
    "BackupSummary": "summary",
    "CommittedIncrement": "summary",
    "BackupSettings": "settings",
    "SourceSettings": "settings",
    "list_backups": "inspect",
    "describe_backup": "inspect",
    "describe_group_history": "group_positions",
    "validate_backup": "inspect",
    "ValidationReport": "inspect",
    "collect_status": "status",
    "find_breaches": "status",
    "StatusReport": "status",
    "plan_rekey": "rekey",
    "execute_rekey": "rekey",
    "RekeyPlan": "rekey",
}

__all__ = [
    "BackupJob",
    "BackupSettings",
    "BackupSummary",
    "CommittedIncrement",
    "RekeyPlan",
    "SourceSettings",
    "StatusReport",
    "ValidationReport",
    "collect_status",
    "describe_backup",
    "describe_group_history",
    "execute_rekey",
    "find_breaches",
    "list_backups",
    "plan_rekey",
    "run_backup",
    "validate_backup",
]


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value
