"""The erase stage: records of given keys or header values removed from the backups themselves,
crash-safe and verifiable (docs/format.md, "Erasure"; docs/erasure.md).

What it offers:

- plan: :func:`plan_erase` scans a store's backups for the records a
  :class:`kbackup.format.record_match.RecordMatcher` matches and says, in counts, which segments
  hold them (an :class:`ErasePlan` of :class:`BackupErasePlan`), changing nothing.
- execute: :func:`execute_erase` rewrites those segments, commits a new manifest revision per
  increment, writes the erasure record and removes the old objects, crash-safe (:class:`EraseResult`).
- verify: :func:`verify_key_erased` proves a key is gone from every segment and names the erasure
  records that list it (:class:`KeyProof`).
"""

from kbackup.erase.execute import EraseResult, execute_erase, new_erase_run_id
from kbackup.erase.plan import BackupErasePlan, ErasePlan, plan_erase
from kbackup.erase.verify import KeyProof, verify_key_erased, verify_keys_erased

__all__ = [
    "BackupErasePlan",
    "ErasePlan",
    "EraseResult",
    "KeyProof",
    "execute_erase",
    "new_erase_run_id",
    "plan_erase",
    "verify_key_erased",
    "verify_keys_erased",
]
