"""``prune`` and the cluster-metadata files (docs/prune.md; docs/format.md, "Retention"): the file
of each increment whose manifest goes goes with it, a kept increment's never; a file no manifest
names goes at once when no run can name it any more, else only past the grace period and while no
backup holds a lease (a running backup writes its file before its manifest). A prune stopped at
any of its deletions leaves a backup that ``validate --deep`` accepts, and the next prune finishes.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kbackup.backup.inspect import validate_backup
from kbackup.format.catalog import BackupCatalog
from kbackup.format.generations import Lease, lease_key, utc_iso
from kbackup.format.layout import manifest_key, object_key
from kbackup.prune.execute import execute_prune
from kbackup.prune.plan import plan_prune
from kbackup.prune.settings import RetentionSettings
from kbackup.storage import LocalStorage
from tests.support.cli_run import RunCli
from tests.support.metadata_backups import commit_increment, day_of, metadata_bytes

#: Increments 0 and 1 hold only records before this time; increment 2's lie after it.
CUT = day_of(2)
POLICY = RetentionSettings(before=CUT)
GRACE = RetentionSettings(orphan_grace="1h")


@pytest.fixture
def store(tmp_path: Path) -> LocalStorage:
    """Backup ``b``: increments 0, 1 and 2, each with one segment and its cluster-metadata file."""
    storage = LocalStorage(tmp_path / "store")
    for increment in range(3):
        commit_increment(storage, tmp_path, increment)
    return storage


def named_files(storage: LocalStorage) -> dict[int, str]:
    """Each increment read now, and the key of the cluster-metadata file its manifest names."""
    return {
        manifest.increment: object_key("b", manifest.cluster_metadata.key)
        for manifest in BackupCatalog(storage).load("b").manifests
        if manifest.cluster_metadata is not None
    }


def metadata_keys(storage: LocalStorage) -> set[str]:
    """The files under metadata/, from the folder itself."""
    root = storage.root
    return {str(path.relative_to(root)) for path in (root / "b" / "metadata").iterdir()}


def age(storage: LocalStorage, key: str, seconds: float) -> None:
    """Make an object ``seconds`` old."""
    then = time.time() - seconds
    os.utime(storage.local_path(key), (then, then))


def stray(storage: LocalStorage, increment: int, run: str, *, seconds_old: float = 0) -> str:
    """A cluster-metadata file no manifest names, as a run that did not commit leaves it."""
    key = f"b/metadata/{increment:08d}-{run}-0badc0de.json"
    assert storage.put_bytes_if_absent(key, metadata_bytes(increment))
    age(storage, key, seconds_old)
    return key


def test_the_files_of_dropped_increments_go_and_a_kept_increments_stays(
    store: LocalStorage, cli: RunCli
) -> None:
    files = named_files(store)
    [item] = plan_prune(store, POLICY).backups
    assert item.action == "trim"
    assert sorted(item.metadata_files) == [files[0], files[1]]
    assert item.metadata_bytes == sum(store.local_path(files[i]).stat().st_size for i in (0, 1))
    assert item.orphans == []

    # What the plan shows, as text and as JSON; nothing goes without --execute.
    args = ["prune", "-p", str(store.root), "--backup-id", "b", "--before", CUT.isoformat()]
    code, out, err = cli(*args)
    assert code == 0, err
    assert "2 segment(s) and 2 manifest(s) go with 2 cluster-metadata or group-history file(s)" in out
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    assert json.loads(out)["backups"][0]["metadata_files_removed"] == 2
    assert metadata_keys(store) == set(files.values())

    code, out, err = cli(*args, "--execute")
    assert code == 0, err
    assert metadata_keys(store) == {files[2]}
    assert named_files(store) == {2: files[2]}
    report = validate_backup(store, "b", deep=True)
    assert (report.errors, report.warnings, report.cluster_metadata_checked) == ([], [], 1)


def test_a_file_a_kept_manifest_names_is_never_deleted(store: LocalStorage) -> None:
    """Even when a dropped manifest names it too (which no run writes, but a copied manifest may)."""
    files = named_files(store)
    path = store.local_path(manifest_key("b", 0))
    raw = json.loads(path.read_bytes())
    raw["cluster_metadata"] = json.loads(store.get_bytes(manifest_key("b", 2)))["cluster_metadata"]
    path.write_text(json.dumps(raw))
    [item] = plan_prune(store, POLICY).backups
    assert item.metadata_files == [files[1]]
    assert files[2] not in item.orphans
    assert files[0] in item.orphans  # named by no manifest now, of a committed increment: garbage
    execute_prune(store, plan_prune(store, POLICY))
    assert metadata_keys(store) == {files[2]}


def test_a_file_of_a_committed_increment_no_manifest_names_goes_at_once(store: LocalStorage) -> None:
    """A second file of increment 1 (a run that lost the race for it): no manifest can name it."""
    key = stray(store, 1, "dead")
    [item] = plan_prune(store, GRACE).backups
    assert (item.orphans, item.orphans_kept) == ([key], 0)
    execute_prune(store, plan_prune(store, GRACE))
    assert metadata_keys(store) == set(named_files(store).values())


def test_a_running_backups_file_stays_until_older_than_the_grace_and_unleased(store: LocalStorage) -> None:
    """Increment 3's file, as a backup running now writes it before its manifest."""
    young = stray(store, 3, "run3", seconds_old=60)
    [item] = plan_prune(store, GRACE).backups
    assert (item.orphans, item.orphans_kept) == ([], 1)

    age(store, young, 2 * 3600)
    lease = Lease(
        backup_id="b",
        run_id="run3",
        holder="test",
        acquired_at=utc_iso(time.time()),
        expires_at=time.time() + 300,
    )
    store.put_bytes_if_absent(lease_key("b", "run3"), lease.to_json_bytes())
    [item] = plan_prune(store, GRACE).backups
    assert (item.orphans, item.orphans_kept) == ([], 1), "a live lease keeps even an old file"

    store.delete_many([lease_key("b", "run3")])
    [item] = plan_prune(store, GRACE).backups
    assert (item.orphans, item.orphans_kept) == ([young], 0)
    execute_prune(store, plan_prune(store, GRACE))
    assert metadata_keys(store) == set(named_files(store).values())


class RecordingStorage(LocalStorage):
    """A folder that notes the keys it is asked to delete, in order."""

    deleted: list[str]

    def _delete_batch(self, keys: Sequence[str]) -> None:
        self.deleted.extend(keys)
        super()._delete_batch(keys)


def test_the_files_go_after_the_segments_and_before_the_manifests_that_name_them(
    store: LocalStorage,
) -> None:
    """docs/format.md, "Prune write ordering", step 4."""
    recording = RecordingStorage(store.root)
    recording.deleted = []
    execute_prune(recording, plan_prune(recording, POLICY))
    folders = [key.split("/")[1] for key in recording.deleted]
    assert folders == ["data", "data", "metadata", "metadata", "manifests", "manifests"]


class Stopped(Exception):
    """The prune stopped here, as a kill would stop it."""


def test_a_prune_stopped_at_any_deletion_leaves_a_sound_backup_and_the_next_finishes(
    store: LocalStorage, tmp_path: Path
) -> None:
    template = tmp_path / "template"
    shutil.copytree(store.root, template)
    whole = plan_prune(store, POLICY).backups[0]
    execute_prune(store, plan_prune(store, POLICY))
    finished = {str(path.relative_to(store.root)) for path in store.root.rglob("*") if path.is_file()}
    assert whole.deletes == 6  # 2 segments, 2 metadata files, 2 manifests: each a step on a folder

    for stop_after in range(1, whole.deletes):
        root = tmp_path / f"stopped-{stop_after}"
        shutil.copytree(template, root)
        storage = LocalStorage(root)
        done = 0

        def advanced(count: int, stop_after: int = stop_after) -> None:
            nonlocal done
            done += count
            if done >= stop_after:
                raise Stopped

        with pytest.raises(Stopped):
            execute_prune(storage, plan_prune(storage, POLICY), advanced=advanced)
        report = validate_backup(storage, "b", deep=True)
        assert report.errors == [], f"stopped after {stop_after} deletion(s)"
        # The next prune removes what the stopped one left, a minute later as a cron would.
        later = datetime.now(UTC) + timedelta(minutes=1)
        execute_prune(storage, plan_prune(storage, POLICY, now=later))
        left = {str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()}
        assert left == finished, f"stopped after {stop_after} deletion(s)"
