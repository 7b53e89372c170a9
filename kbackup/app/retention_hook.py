"""A retention policy applied by a backup after each committed increment (``backup.retention``)."""

from __future__ import annotations

from collections.abc import Callable

from kbackup.core.errors import PreconditionError
from kbackup.core.logs import get_logger
from kbackup.prune import execute_prune, plan_prune
from kbackup.prune.settings import RetentionSettings
from kbackup.storage import Storage

log = get_logger("prune")


def apply_retention(storage: Storage, policy: RetentionSettings, backup_id: str) -> None:
    """Plan and execute ``policy`` as ``prune --execute`` would: over every backup in the store if
    it has rules across backups (the running one is leased, so it stays), else over ``backup_id``."""
    plan = plan_prune(storage, policy, None if policy.across_backups else [backup_id])
    refused = [item.needs_force for item in plan.backups if item.needs_force]
    if refused:
        raise PreconditionError(refused[0], hint="set backup.retention.force: true to allow it")
    result = execute_prune(storage, plan)
    if result.objects_removed:
        log.info(
            "retention removed %d object(s), %d bytes",
            result.objects_removed,
            result.bytes_removed,
            extra={"backup_id": backup_id, "objects_removed": result.objects_removed},
        )


def retention_after_commit(
    policy: RetentionSettings | None, backup_id: str
) -> Callable[[Storage], None] | None:
    """The hook a backup run calls after each committed increment, None without a policy."""
    if policy is None or policy.empty:
        return None
    return lambda storage: apply_retention(storage, policy, backup_id)
