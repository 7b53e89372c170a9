"""The behaviour every storage backend must have; subclass with a ``storage`` fixture.

Beside the storage calls themselves, what the format builds on them, on backups written by the
format's own writer (no Kafka): ``validate --deep``, and a prune's create-if-absent commit and the
lease of a running backup (the pieces that keep a concurrent backup and prune safe).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kbackup.backup.inspect import validate_backup
from kbackup.backup.lease import LeaseKeeper
from kbackup.core.errors import PreconditionError, StorageError
from kbackup.format.catalog import BackupCatalog
from kbackup.format.layout import new_run_id
from kbackup.format.manifest import Manifest
from kbackup.format.segments import SegmentLimits
from kbackup.prune.execute import execute_prune
from kbackup.prune.plan import plan_prune
from kbackup.prune.settings import RetentionSettings
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import Storage

#: Records a week old, then records of now: a prune ``older_than: 1d`` trims the first increment.
A_WEEK_AGO_MS = int(time.time() * 1000) - 7 * 86_400_000
NOW_MS = int(time.time() * 1000)


def write_increment(
    storage: Storage, scratch: Path, first: int, timestamp_ms: int, *, commit: bool = True, run_id: str = ""
) -> Manifest | None:
    """Ten records of ``t`` from offset ``first`` on each of two partitions, four to a segment, as
    one increment of backup ``b``; ``commit=False`` stops before the manifest (a running backup's
    segments)."""
    builder = BackupBuilder(
        storage, "b", scratch_dir=scratch, limits=SegmentLimits(max_records=4), run_id=run_id or None
    )
    builder.topic("t", 2)
    for partition in (0, 1):
        records = [
            BackupRecord(offset, b"value %d" % offset, key=b"k", timestamp=timestamp_ms)
            for offset in range(first, first + 10)
        ]
        builder.partition("t", partition, records)
    return builder.commit() if commit else None


class StorageContract:
    def test_put_get_roundtrip_bytes(self, storage: Storage) -> None:
        payload = bytes(range(256)) * 10
        storage.put_bytes("backups/b1/manifest.json", payload)
        assert storage.get_bytes("backups/b1/manifest.json") == payload
        assert storage.size("backups/b1/manifest.json") == len(payload)
        assert storage.exists("backups/b1/manifest.json")

    def test_put_file_and_download(self, storage: Storage, tmp_path: Path) -> None:
        source = tmp_path / "segment.parquet"
        source.write_bytes(os.urandom(300_000))
        storage.put_file("data/t/0/seg-1.parquet", source)
        copy = tmp_path / "copy"
        storage.download("data/t/0/seg-1.parquet", copy)
        assert copy.read_bytes() == source.read_bytes()

    def test_move_file_stores_it_and_removes_the_local_file(self, storage: Storage, tmp_path: Path) -> None:
        source = tmp_path / "segment.parquet"
        payload = os.urandom(300_000)
        source.write_bytes(payload)
        storage.move_file("data/t/0/seg-2.parquet", source)
        assert not source.exists()
        assert storage.size("data/t/0/seg-2.parquet") == len(payload)
        copy = tmp_path / "copy"
        storage.download("data/t/0/seg-2.parquet", copy)
        assert copy.read_bytes() == payload

    def test_list_is_sorted_and_filtered_by_prefix(self, storage: Storage) -> None:
        for key in ["p/b", "p/a", "q/c", "p/sub/d"]:
            storage.put_bytes(key, key.encode())
        assert [info.key for info in storage.list("p/")] == ["p/a", "p/b", "p/sub/d"]
        assert {info.key: info.size for info in storage.list("q/")} == {"q/c": 3}

    def test_missing_object(self, storage: Storage) -> None:
        assert storage.size("nope") is None
        assert not storage.exists("nope")
        with pytest.raises(StorageError, match="nope"):
            storage.get_bytes("nope")

    def test_overwrite_replaces_whole_object(self, storage: Storage) -> None:
        storage.put_bytes("k", b"first version, longer")
        storage.put_bytes("k", b"second")
        assert storage.get_bytes("k") == b"second"

    def test_delete_is_idempotent(self, storage: Storage) -> None:
        storage.put_bytes("gone", b"x")
        storage.delete("gone")
        storage.delete("gone")
        assert storage.size("gone") is None

    def test_escaping_keys_refused_before_io(self, storage: Storage) -> None:
        with pytest.raises(StorageError, match="unsafe segment"):
            storage.put_bytes("../outside", b"x")

    def test_put_if_absent_never_overwrites(self, storage: Storage) -> None:
        assert storage.put_bytes_if_absent("m/00000000.json", b"first") is True
        assert storage.put_bytes_if_absent("m/00000000.json", b"second") is False
        assert storage.get_bytes("m/00000000.json") == b"first"
        assert [info.key for info in storage.list("m/")] == ["m/00000000.json"]

    def test_list_prefixes_gives_immediate_folders(self, storage: Storage) -> None:
        for key in ["b1/manifests/0.json", "b1/data/t/0/s.parquet", "b2/manifests/0.json", "top.txt"]:
            storage.put_bytes(key, b"x")
        assert storage.list_prefixes("") == ["b1", "b2"]
        assert storage.list_prefixes("b1/") == ["data", "manifests"]
        assert storage.list_prefixes("nope/") == []

    def test_check_writable_leaves_nothing(self, storage: Storage) -> None:
        storage.check_writable()
        assert list(storage.list("")) == []

    def test_listings_say_when_each_object_was_written(self, storage: Storage) -> None:
        """A prune removes an object no manifest lists only once it is older than the grace period:
        without a time it would never go."""
        storage.put_bytes("when/object", b"x")
        (info,) = storage.list("when/")
        assert info.modified is not None
        assert abs(info.modified - time.time()) < 60

    def test_validate_deep_reads_every_record_and_names_a_damaged_segment(
        self, storage: Storage, tmp_path: Path
    ) -> None:
        write_increment(storage, tmp_path, 0, NOW_MS)
        write_increment(storage, tmp_path, 10, NOW_MS)
        report = validate_backup(storage, "b", deep=True)
        assert (report.errors, report.warnings) == ([], [])
        segment = BackupCatalog(storage).load("b").manifests[1].segments[0]
        stored = bytearray(storage.get_bytes(f"b/{segment.key}"))
        stored[len(stored) // 2] ^= 0x20
        storage.put_bytes(f"b/{segment.key}", bytes(stored))
        errors = validate_backup(storage, "b", deep=True).errors
        assert [error for error in errors if segment.key in error and "SHA-256" in error], errors

    def test_two_prunes_planned_at_once_commit_one_retention_generation(
        self, storage: Storage, tmp_path: Path
    ) -> None:
        """The retention generation is written create-if-absent: the prune that commits second is
        refused and removes nothing, whatever the other removed."""
        write_increment(storage, tmp_path, 0, A_WEEK_AGO_MS)
        write_increment(storage, tmp_path, 10, NOW_MS)
        policy = RetentionSettings.model_validate({"older_than": "1d"})
        first, second = plan_prune(storage, policy), plan_prune(storage, policy)
        assert [item.action for item in first.backups] == ["trim"]
        execute_prune(storage, first)
        objects = sorted(info.key for info in storage.list("b/"))
        with pytest.raises(PreconditionError, match="another prune committed retention generation 1"):
            execute_prune(storage, second)
        assert sorted(info.key for info in storage.list("b/")) == objects
        backup = BackupCatalog(storage).load("b")
        assert [manifest.increment for manifest in backup.manifests] == [1]
        assert validate_backup(storage, "b", deep=True).errors == []

    def test_a_live_lease_keeps_a_running_backups_segments_from_the_orphan_sweep(
        self, storage: Storage, tmp_path: Path
    ) -> None:
        """Segments a running backup stored but has not committed yet look like orphans: while its
        lease is live a prune keeps them, past any grace period; once the lease is gone they go."""
        write_increment(storage, tmp_path, 0, NOW_MS)
        policy = RetentionSettings.model_validate({"older_than": "1d", "orphan_grace": "1s"})
        later = datetime.now(UTC) + timedelta(seconds=30)  # every object older than the grace
        run_id = new_run_id()
        with LeaseKeeper(storage, "b", run_id):
            write_increment(storage, tmp_path, 10, NOW_MS, commit=False, run_id=run_id)
            uncommitted = {
                info.key for info in storage.list("b/data/") if info.key.endswith(f"{run_id}.parquet")
            }
            assert len(uncommitted) == 6  # three segments of each partition
            (kept,) = plan_prune(storage, policy, now=later).backups
            assert (kept.orphans, kept.orphans_kept, kept.leased_by != []) == ([], 6, True)
            execute_prune(storage, plan_prune(storage, policy, now=later))
            assert uncommitted <= {info.key for info in storage.list("b/data/")}
        assert list(storage.list("b/leases/")) == []  # released
        (swept,) = plan_prune(storage, policy, now=later).backups
        assert set(swept.orphans) == uncommitted
        execute_prune(storage, plan_prune(storage, policy, now=later))
        report = validate_backup(storage, "b", deep=True)
        assert (report.errors, report.warnings) == ([], [])
