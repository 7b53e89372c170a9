"""Executing a prune plan in the crash-safe order of docs/format.md, "Retention".

For each backup: first the new retention generation (create-if-absent: one atomic write makes the
decision visible, and a second prune racing this one fails instead of overwriting it), then the
objects no manifest read through it lists: segments below the new windows, the cluster-metadata
files and the manifests below its first increment, older generations, garbage. A kill at any point
leaves a backup every reader accepts; at worst objects no manifest lists remain, and the next prune
removes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kbackup.core.errors import BackupIntegrityError, PreconditionError, StorageError
from kbackup.core.faults import crash_point
from kbackup.core.logs import get_logger
from kbackup.format.generations import leases_prefix, parse_lease, retention_key
from kbackup.prune.plan import BackupPlan, PrunePlan
from kbackup.storage import Storage

log = get_logger("prune")


@dataclass
class PruneResult:
    storage_url: str
    backups: list[dict[str, Any]] = field(default_factory=list)
    objects_removed: int = 0
    bytes_removed: int = 0
    #: Delete requests sent (a store that deletes in batches sends fewer than objects_removed).
    delete_requests: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "storage": self.storage_url,
            "objects_removed": self.objects_removed,
            "bytes_removed": self.bytes_removed,
            "delete_requests": self.delete_requests,
            "backups": self.backups,
        }


def execute_prune(
    storage: Storage, plan: PrunePlan, *, advanced: Callable[[int], None] | None = None
) -> PruneResult:
    """Carry out ``plan`` on ``storage``; ``advanced(n)`` after each delete request of n objects."""
    result = PruneResult(storage.url)
    for item in plan.backups:
        if item.action == "skip":
            continue
        _execute_backup(storage, item, result, advanced or (lambda _count: None))
        result.backups.append(
            {
                "backup_id": item.backup_id,
                "action": item.action,
                "objects_removed": item.deletes,
                "bytes_removed": item.bytes_removed,
                "new_generation": None if item.new_generation is None else item.new_generation.generation,
            }
        )
        result.objects_removed += item.deletes
        result.bytes_removed += item.bytes_removed
    return result


def _execute_backup(
    storage: Storage, item: BackupPlan, result: PruneResult, advanced: Callable[[int], None]
) -> None:
    retention_objects = list(item.retention_objects)
    if item.new_generation is not None:
        if item.new_generation.deleted:
            _check_no_lease(storage, item.backup_id)
        crash_point("prune:step")
        key = retention_key(item.backup_id, item.new_generation.generation)
        if not storage.put_bytes_if_absent(key, item.new_generation.to_json_bytes()):
            raise PreconditionError(
                f"backup {item.backup_id}: another prune committed retention generation "
                f"{item.new_generation.generation} while this one planned ({key}); nothing was removed",
                hint="run the prune again: it plans from the newer state",
            )
        if item.new_generation.deleted:
            retention_objects.append(key)  # the removal's own generation goes last of all
        log.info(
            "committed retention generation %d of %s",
            item.new_generation.generation,
            item.backup_id,
            extra={"backup_id": item.backup_id, "generation": item.new_generation.generation},
        )
    # What the new generation no longer lists, oldest first; the retention folder of a removed
    # backup last (until then its newest generation says the backup is removed).
    for keys in (
        item.segments,
        item.metadata_files,
        item.manifests,
        item.generations,
        item.orphans,
        item.leases,
        item.objects,
        retention_objects,
    ):
        _delete(storage, keys, result, advanced)


def _delete(
    storage: Storage, keys: Sequence[str], result: PruneResult, advanced: Callable[[int], None]
) -> None:
    if not keys:
        return
    batch = storage.delete_batch_size
    for start in range(0, len(keys), batch):
        chunk = keys[start : start + batch]
        result.delete_requests += storage.delete_many(
            chunk, before_each_request=lambda: crash_point("prune:step")
        )
        advanced(len(chunk))


def _check_no_lease(storage: Storage, backup_id: str) -> None:
    """A backup about to be removed whole must have no live lease now (one may have started since
    the plan was made)."""
    now = datetime.now(UTC).timestamp()
    for info in storage.list(leases_prefix(backup_id)):
        try:
            lease = parse_lease(storage.get_bytes(info.key), info.key)
        except (BackupIntegrityError, StorageError):
            continue  # unreadable, or released since the listing: not a live lease
        if lease.live(now):
            raise PreconditionError(
                f"backup {backup_id} is being written by {lease.holder} (run {lease.run_id}) since the plan "
                "was made; it was not removed",
                hint="run the prune again once that backup has finished",
            )
