"""``rekey``: wrap encrypted backups' root keys under a new key-encryption key, without rewriting
any segment or manifest (docs/security.md "Re-keying").

Plan, then execute. Per backup, the execution writes keyring generation ``N + 1`` (the root key
wrapped by the new key) create-if-absent, reads it back and opens it with the new key, and only
then deletes the older generations. Killed at any point, the backup opens with the old key (the
older generation is still there) or with the new one (the new generation is committed), and
readers take the newest generation the configured key opens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kbackup.core.errors import EncryptionKeyError, NotFoundError, PreconditionError, UsageError
from kbackup.core.faults import crash_point
from kbackup.core.logs import get_logger
from kbackup.format.catalog import BackupCatalog
from kbackup.format.encryption import (
    BackupKeys,
    is_encrypted,
    keyring_generations,
    keyring_key,
    unlock,
    write_keyring_entry,
)
from kbackup.storage import KeyEncryptionKey, Storage

log = get_logger("rekey")


@dataclass
class RekeyItem:
    backup_id: str
    #: The generation the configured (old) key opens, and that key's id.
    from_generation: int
    from_key_id: str
    #: The generation the new key's wrap is committed as.
    to_generation: int
    #: Generations deleted once the new one is committed.
    older_generations: list[int] = field(default_factory=list)
    #: The new key's generation is committed already (a re-key stopped before it deleted the
    #: older ones): only the deletes are left.
    committed: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "backup_id": self.backup_id,
            "from_generation": self.from_generation,
            "from_key_id": self.from_key_id,
            "to_generation": self.to_generation,
            "older_generations": self.older_generations,
            "committed": self.committed,
        }


@dataclass
class RekeyPlan:
    storage_url: str
    new_key_id: str
    new_key_source: str
    items: list[RekeyItem] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "storage": self.storage_url,
            "new_key_id": self.new_key_id,
            "new_key_source": self.new_key_source,
            "backups": [item.to_dict() for item in self.items],
        }


def plan_rekey(storage: Storage, new_key: KeyEncryptionKey, backup_ids: list[str] | None = None) -> RekeyPlan:
    """What a re-key would do; opens each backup's key with the configured (old) key first, so a
    backup the old key does not open is refused before anything is written."""
    if storage.key_encryption_key is None:
        raise UsageError(
            "rekey needs the current key: set storage.encryption or --encryption-key, and give the new "
            "one with --new-encryption-key"
        )
    if backup_ids is None:
        catalog = BackupCatalog(storage)
        backup_ids = [name for name in catalog.backup_ids() if is_encrypted(storage, name)]
        if not backup_ids:
            raise NotFoundError(f"no encrypted backup in {storage.url}")
    plan = RekeyPlan(storage_url=storage.url, new_key_id=new_key.key_id, new_key_source=new_key.source)
    for backup_id in backup_ids:
        generations = [generation for generation, _ in keyring_generations(storage, backup_id)]
        if not generations:
            raise PreconditionError(
                f"backup {backup_id} in {storage.url} is not encrypted: there is nothing to re-key",
                hint="an unencrypted backup is encrypted by restoring it and backing it up again",
            )
        done = _opened_by(storage, backup_id, new_key)
        if done is not None and done.generation == max(generations):
            # Re-keyed before (maybe by a run that stopped before its deletes).
            plan.items.append(
                RekeyItem(
                    backup_id=backup_id,
                    from_generation=done.generation,
                    from_key_id=done.kek_id,
                    to_generation=done.generation,
                    older_generations=[g for g in generations if g < done.generation],
                    committed=True,
                )
            )
            continue
        keys = unlock(storage, backup_id)
        assert keys is not None
        plan.items.append(
            RekeyItem(
                backup_id=backup_id,
                from_generation=keys.generation,
                from_key_id=keys.kek_id,
                to_generation=max(generations) + 1,
                older_generations=generations,
            )
        )
    return plan


def _opened_by(storage: Storage, backup_id: str, key: KeyEncryptionKey) -> BackupKeys | None:
    """The backup's keys if ``key`` opens its keyring, else None (a KMS that cannot be reached is
    still an error)."""
    try:
        return unlock(storage, backup_id, key)
    except EncryptionKeyError as exc:
        if exc.retryable:
            raise
        return None


def execute_rekey(storage: Storage, plan: RekeyPlan, new_key: KeyEncryptionKey) -> list[str]:
    """Carry the plan out, backup by backup; the keyring objects written."""
    written = []
    for item in plan.items:
        if item.committed:
            for generation in item.older_generations:
                storage.delete(keyring_key(item.backup_id, generation))
                crash_point("rekey:older-generation-deleted")
            continue
        keys = unlock(storage, item.backup_id)
        assert keys is not None
        now = [generation for generation, _ in keyring_generations(storage, item.backup_id)]
        if max(now) + 1 != item.to_generation:
            raise PreconditionError(
                f"backup {item.backup_id}: its keyring changed since the plan (generation {max(now)} now)",
                hint="another rekey ran meanwhile; run rekey again",
            )
        crash_point("rekey:before-commit")
        if not write_keyring_entry(storage, item.backup_id, item.to_generation, keys.root_key, new_key):
            raise PreconditionError(
                f"backup {item.backup_id}: keyring generation {item.to_generation} was written by another "
                "rekey meanwhile",
                hint="run rekey again",
            )
        crash_point("rekey:committed")
        # Proof before anything is removed: the committed generation opens with the new key.
        check = unlock(storage, item.backup_id, new_key)
        if check is None or check.root_key != keys.root_key or check.generation != item.to_generation:
            raise PreconditionError(f"backup {item.backup_id}: the new keyring generation does not read back")
        for generation in now:
            storage.delete(keyring_key(item.backup_id, generation))
            crash_point("rekey:older-generation-deleted")
        written.append(keyring_key(item.backup_id, item.to_generation))
        log.info(
            "backup %s re-keyed to %s (keyring generation %d)",
            item.backup_id,
            new_key.key_id,
            item.to_generation,
            extra={"backup_id": item.backup_id},
        )
    return written
