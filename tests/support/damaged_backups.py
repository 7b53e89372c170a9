"""The damaged backups of tests/fixtures/damaged_backups, copied for a test, and the restore command
line that reads them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbackup.core.config import EncryptionSettings
from kbackup.format.catalog import BackupCatalog, commit_revision
from kbackup.format.encryption import keys_for_new_backup
from kbackup.format.erasure import encode_erasure_record, erasure_key, parse_erasure_record
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import LocalStorage, Storage
from kbackup.storage.keys import new_key_text, open_key
from tests.support.erase_backups import erase_keys, keyed_backup, user_key

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "damaged_backups"


#: case -> what validate and restore must say about it, and the object it must name.
DAMAGE = {
    "truncated-segment": ("has 3005 bytes", "nightly/data/orders/0/00000000000000000010-"),
    "flipped-byte": ("SHA-256", "nightly/data/orders/0/00000000000000000020-"),
    "missing-segment": ("is missing", "nightly/data/orders/0/00000000000000000020-"),
    "unknown-version": ("format version 99", "nightly/manifests/00000000.json"),
    "bad-json": ("is not valid JSON", "nightly/manifests/00000000.json"),
}


def copy_of(case: str, tmp_path: Path) -> Path:
    store = tmp_path / case
    shutil.copytree(FIXTURES / case, store)
    return store


def restore_args(store: Path, cluster: LocalKafkaCluster, topic: str) -> list[str]:
    return ["restore", "-p", str(store), "--backup-id", "nightly", "-b", cluster.bootstrap_servers,
            "--topic-mapping", f"orders={topic}", "--exactly-once"]  # fmt: skip


#: The request every erased backup below was erased by.
REQUEST = "GDPR-1"


def erased_backup(storage: Storage, scratch: Path, backup_id: str = "nightly") -> None:
    """A keyed backup of three increments, erased of ``user-1`` by request ``GDPR-1``: every
    increment at revision 1, one erasure record."""
    keyed_backup(storage, backup_id, scratch)
    erase_keys(storage, backup_id, scratch, REQUEST, user_key(1))


def _edit_record(storage: Storage, edit: Callable[[dict[str, Any]], None]) -> None:
    key = erasure_key("nightly", REQUEST)
    record = json.loads(storage.get_bytes(key))
    edit(record)
    storage.put_bytes(key, json.dumps(record).encode())


def _add_one(record: dict[str, Any]) -> None:
    record["partitions"][0]["records"] += 1
    record["records"] += 1


def _record_of_another_backup(storage: Storage, scratch: Path) -> None:
    erased_backup(storage, scratch, "other")
    storage.put_bytes(erasure_key("nightly", REQUEST), storage.get_bytes(erasure_key("other", REQUEST)))


def _truncated(storage: Storage, _scratch: Path) -> None:
    key = erasure_key("nightly", REQUEST)
    storage.put_bytes(key, storage.get_bytes(key)[:-40])


def _record_without_revisions(storage: Storage, _scratch: Path) -> None:
    """A record of a request no revision notes: the real one copied under another request id."""
    record = json.loads(storage.get_bytes(erasure_key("nightly", REQUEST)))
    record["request_id"] = "GHOST-1"
    storage.put_bytes(erasure_key("nightly", "GHOST-1"), json.dumps(record).encode())


#: case -> (how an erased backup's erasure records are damaged, what validate must say of it).
ERASURE_DAMAGE: dict[str, tuple[Callable[[Storage, Path], None], str]] = {
    "truncated-record": (_truncated, f"erasure record nightly/erasures/{REQUEST}.json is not valid JSON"),
    "tampered-request-id": (
        lambda storage, _scratch: _edit_record(storage, lambda r: r.update(request_id="GDPR-2")),
        "says request GDPR-2 of backup nightly (moved?)",
    ),
    "record-of-another-backup": (
        _record_of_another_backup,
        f"says request {REQUEST} of backup other (moved?)",
    ),
    "counts-disagree": (
        lambda storage, _scratch: _edit_record(storage, _add_one),
        "records of orders/0 erased, the increments' erasure notes of GDPR-1 add up to",
    ),
    "total-disagrees": (
        lambda storage, _scratch: _edit_record(storage, lambda r: r.update(records=r["records"] + 1)),
        "records, its partitions add up to",
    ),
    "revision-not-written": (
        lambda storage, _scratch: _edit_record(storage, lambda r: r["revisions"].update({"0": 3})),
        "names revision 3 of increment 0, whose newest is revision 1",
    ),
    "increment-not-held": (
        lambda storage, _scratch: _edit_record(storage, lambda r: r["revisions"].update({"9": 1})),
        "names increment 9, which the backup does not hold",
    ),
    "increment-not-named": (
        lambda storage, _scratch: _edit_record(storage, lambda r: r["revisions"].pop("2")),
        f"increment 2 notes erasure {REQUEST}, whose record nightly/erasures/{REQUEST}.json does not name it",
    ),
    "record-without-revisions": (
        _record_without_revisions,
        "names revision 1 of increment 0, whose newest revision 1 has no erasure note of GHOST-1",
    ),
}


def sealed_erased_backup(store: Path, scratch: Path) -> Path:
    """An erased backup whose manifest revisions and erasure record are sealed under a new key
    (``store``/nightly; returns the key file). Its segments are the plain ones of an erased backup
    built beside it: enough for what validate checks without ``--deep`` (manifests, sizes,
    checksums, erasure records), not for a read of the records."""
    plain = LocalStorage(scratch / "plain-store")
    erased_backup(plain, scratch)
    shutil.copytree(scratch / "plain-store" / "nightly" / "data", store / "nightly" / "data")
    key_file = scratch / "backup.key"
    key_file.write_text(new_key_text())
    storage = LocalStorage(store)
    storage.key_encryption_key = open_key(EncryptionSettings(key_file=str(key_file)))
    keys = keys_for_new_backup(storage, "nightly")
    assert keys is not None
    for manifest in BackupCatalog(plain).load("nightly").manifests:
        commit_revision(storage, manifest, keys)
    key = erasure_key("nightly", REQUEST)
    record = parse_erasure_record(
        plain.get_bytes(key), key, backup_id="nightly", request_id=REQUEST, keys=None
    )
    storage.put_bytes(key, encode_erasure_record(record, keys))
    return key_file
