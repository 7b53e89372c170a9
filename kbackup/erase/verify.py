"""``erase --verify``: the proof that a key is gone from a backup, and which erasure record lists it.

Every segment of every increment (each newest manifest revision, as a restore reads them) is
scanned for the key; every erasure record of the backup is opened and asked whether it lists the
key (the keyed hash of the key under the record's own secret). Only counts and request ids come
out, never the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbackup.erase.plan import matched_keys
from kbackup.format.catalog import BackupCatalog
from kbackup.format.erasure import erasures_prefix, parse_erasure_record, request_of_key
from kbackup.format.record_match import EntrySet, RecordMatcher
from kbackup.storage import Storage


@dataclass
class KeyProof:
    backup_id: str
    segments_checked: int = 0
    records_checked: int = 0
    #: Records still holding the key, per segment (object key relative to the backup).
    found: dict[str, int] = field(default_factory=dict)
    #: Erasure records (request ids) that list the key.
    listed_by: list[str] = field(default_factory=list)
    #: Every erasure record of the backup.
    requests: int = 0

    @property
    def gone(self) -> bool:
        return not self.found

    def to_dict(self) -> dict[str, Any]:
        return {
            "backup_id": self.backup_id,
            "gone": self.gone,
            "segments_checked": self.segments_checked,
            "records_checked": self.records_checked,
            "records_found": sum(self.found.values()),
            "segments_holding_it": sorted(self.found),
            "listed_by": self.listed_by,
            "erasure_records": self.requests,
        }


def verify_key_erased(
    storage: Storage, backup_ids: list[str], key: bytes, *, scratch_dir: Path | None = None
) -> list[KeyProof]:
    """Per backup: whether any segment still holds ``key``, and which erasure records list it."""
    return verify_keys_erased(storage, backup_ids, [key], scratch_dir=scratch_dir)[0]


def verify_keys_erased(
    storage: Storage, backup_ids: list[str], keys: list[bytes], *, scratch_dir: Path | None = None
) -> list[list[KeyProof]]:
    """For each of ``keys``, per backup: whether any segment still holds it, and which erasure
    records list it. Each segment is read once for all the keys (a request's file may list
    thousands), the keys it holds counted as it is read."""
    every_key = RecordMatcher(keys=EntrySet(exact=frozenset(keys)))
    catalog = BackupCatalog(storage)
    proofs: list[list[KeyProof]] = [[] for _ in keys]
    for backup_id in backup_ids:
        backup = catalog.load(backup_id)
        backup_proofs = [KeyProof(backup_id) for _ in keys]
        for manifest in backup.manifests:
            for segment in manifest.segments:
                held = matched_keys(storage, backup, segment, every_key, scratch_dir)
                for key, proof in zip(keys, backup_proofs, strict=True):
                    proof.segments_checked += 1
                    proof.records_checked += segment.record_count
                    if held[key]:
                        proof.found[segment.key] = held[key]
        for info in storage.list(erasures_prefix(backup_id)):
            request_id = request_of_key(info.key)
            if request_id is None:
                continue
            record = parse_erasure_record(
                storage.get_bytes(info.key),
                info.key,
                backup_id=backup_id,
                request_id=request_id,
                keys=backup.keys,
            )
            for key, proof in zip(keys, backup_proofs, strict=True):
                proof.requests += 1
                if record.lists_key(key):
                    proof.listed_by.append(request_id)
        for number, proof in enumerate(backup_proofs):
            proofs[number].append(proof)
    return proofs
