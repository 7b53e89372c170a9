"""A local folder failing in the middle of a backup, a restore and a prune: the faults of
test_fault_storage.py (S3) and test_fault_cloud_storage.py (Cloud Storage, Azure), on the folder.

A folder has no server to stop, and the tests run as root, whom permissions do not stop: the
filesystem itself refuses, at a storage call the run's own progress picks (the backup's third
segment or its first manifest, a third of the way into restoring, the prune's second delete). Just
before that call an obstacle is put in its way: a folder where the segment must be renamed into
place or where the object to delete lies (rename and unlink fail with EISDIR), a file where the
manifests' folder must be made (mkdir fails with EEXIST), or the segment to read renamed away.
The run ends with one line and its exit code, no manifest names a missing or partial object
(validate --deep), and with the obstacle gone the same command completes with every record once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from kbackup.backup.inspect import validate_backup
from kbackup.cli.main import run
from kbackup.core.errors import BackupIntegrityError, StorageError
from kbackup.format.catalog import BackupCatalog
from kbackup.format.segments import SegmentLimits
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.sandbox.synthetic_backup import BackupBuilder
from kbackup.storage import LocalStorage
from tests.support.backup_io import read_backup
from tests.support.config_files import config_file
from tests.support.crash_restores import check_exactly_once, source_records
from tests.support.daily_backup import BASE_TIME, DAY_MS, daily_backup
from tests.support.kafka_io import Record, consume_all, create_topic, end_offsets, produce

pytestmark = pytest.mark.slow

PARTITIONS = 3
RECORDS_PER_PARTITION = 60
SEGMENT_RECORDS = 6
SEGMENTS = PARTITIONS * RECORDS_PER_PARTITION // SEGMENT_RECORDS
#: The segment upload at whose start the store fails.
FAILING_UPLOAD = 3
#: A restore reads every segment once to check it before the first record, then again to restore:
#: the store fails a third of the way into restoring.
FAILING_READ = SEGMENTS + SEGMENTS // 3
TRANSACTION_RECORDS = 10


@dataclass
class Fault:
    """What the hook did: the obstacle it put in the store's way, and how to take it away."""

    obstacle: Path
    clear: Callable[[], None]


class Hook(NamedTuple):
    """The ``call``-th call of LocalStorage's ``method`` (of one key), counting only keys that hold
    ``within``: ``obstruct(storage, key)`` puts an obstacle in its way first."""

    method: str
    call: int
    obstruct: Callable[[LocalStorage, str], Fault]
    within: str = ""


def at_call(monkeypatch: pytest.MonkeyPatch, hook: Hook) -> list[Fault]:
    """Sets ``hook`` on LocalStorage; the list gets what its obstruct did."""
    original: Callable[..., Any] = getattr(LocalStorage, hook.method)
    calls = itertools.count(1)
    faults: list[Fault] = []

    def counted(storage: LocalStorage, key: str, *args: Any, **kwargs: Any) -> Any:
        if hook.within in key and next(calls) == hook.call:
            faults.append(hook.obstruct(storage, key))
        return original(storage, key, *args, **kwargs)

    monkeypatch.setattr(LocalStorage, hook.method, counted)
    return faults


def folder_in_place_of(storage: LocalStorage, key: str) -> Fault:
    """An empty folder where the object ``key`` is to be (renaming a file over it fails, EISDIR),
    or in place of the object (unlinking it fails, EISDIR): the object itself is kept aside."""
    path = storage.local_path(key)
    aside = path.with_name(f"{path.name}.aside")
    if path.exists():
        path.rename(aside)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir()

    def clear() -> None:
        path.rmdir()
        if aside.exists():
            aside.rename(path)

    return Fault(path, clear)


def file_in_place_of_folder(storage: LocalStorage, key: str) -> Fault:
    """A regular file where the folder of ``key``, not made yet, must be created (mkdir fails)."""
    folder = storage.local_path(key).parent
    assert not folder.exists(), f"{folder} is there already: the obstacle would not be met"
    folder.write_bytes(b"in the way")
    return Fault(folder, folder.unlink)


def renamed_away(storage: LocalStorage, key: str) -> Fault:
    path = storage.local_path(key)
    aside = path.with_name(f"{path.name}.aside")
    path.rename(aside)

    def clear() -> None:
        aside.rename(path)

    return Fault(path, clear)


@dataclass
class FolderRun:
    """Runs of the CLI in this process against a folder of this test's own."""

    store: Path
    monkeypatch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture[str]

    def fails(self, args: list[str], hook: Hook, exit_code: int) -> tuple[Fault, str]:
        """Run with the obstacle put at ``hook``'s call: the run must fail with ``exit_code`` in one
        line and no traceback. Returns the fault (not yet cleared) and that line."""
        with self.monkeypatch.context() as hooked:
            faults = at_call(hooked, hook)
            code = run(args)
        err = self.capsys.readouterr().err
        assert faults, f"the run made fewer than {hook.call} {hook.method} calls: no fault"
        assert code == exit_code, err
        assert "Traceback" not in err, err
        (line,) = [line for line in err.splitlines() if ": error: " in line]
        return faults[0], line

    def completes(self, args: list[str]) -> None:
        assert run(args) == 0, self.capsys.readouterr().err


@pytest.fixture
def folder_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> FolderRun:
    return FolderRun(tmp_path / "store", monkeypatch, capsys)


def temporary_files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.name.startswith(".tmp-")]


def assert_every_manifest_names_whole_objects(storage: LocalStorage, backup_id: str) -> None:
    if BackupCatalog(storage).exists(backup_id):
        assert validate_backup(storage, backup_id, deep=True).errors == []


#: Where the backup meets its obstacle, and the reason its one line gives.
BACKUP_FAULTS = {
    "segment-is-a-folder": (
        Hook("move_file", FAILING_UPLOAD, folder_in_place_of, "/data/"),
        " failed: Is a directory",
    ),
    "manifests-folder-is-a-file": (
        Hook("put_bytes_if_absent", 1, file_in_place_of_folder, "/manifests/"),
        ": File exists",
    ),
}


@pytest.mark.parametrize("obstacle", list(BACKUP_FAULTS))
def test_folder_fails_mid_backup(
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    folder_run: FolderRun,
    obstacle: str,
) -> None:
    """A segment's or the first manifest's write meets an obstacle: the backup fails in one line
    naming it (exit 7), and with it gone the same command completes."""
    topic, store = unique_name, folder_run.store
    create_topic(source_cluster, topic, partitions=PARTITIONS)
    produce(
        source_cluster,
        topic,
        [
            Record(key=b"k%d" % i, value=b"value-%d" % i, partition=i % PARTITIONS)
            for i in range(PARTITIONS * RECORDS_PER_PARTITION)
        ],
    )
    source = consume_all(source_cluster, topic, list(range(PARTITIONS)))
    config = config_file(
        tmp_path / "backup.yaml",
        backup_id="blocked",
        source={"bootstrap_servers": [source_cluster.bootstrap_servers], "topics": {"include": [topic]}},
        storage={"url": str(store)},
        backup={"segment_max_records": SEGMENT_RECORDS, "scratch_dir": str(tmp_path / "scratch")},
    )
    command = ["backup", "-c", str(config)]
    hook, reason = BACKUP_FAULTS[obstacle]
    fault, line = folder_run.fails(command, hook, StorageError.exit_code)
    assert f"{fault.obstacle}{reason}" in line, line
    fault.clear()
    storage = LocalStorage(store)
    assert temporary_files(store) == []
    assert_every_manifest_names_whole_objects(storage, "blocked")

    folder_run.completes(command)
    assert read_backup(storage, "blocked") == source
    assert validate_backup(storage, "blocked", deep=True).errors == []


def test_folder_fails_mid_restore(
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    folder_run: FolderRun,
) -> None:
    """A segment renamed away after the restore has checked it, a third of the way into restoring:
    the backup is damaged as far as the restore can tell (exit 8); renamed back, a rerun completes."""
    topic, store = unique_name, folder_run.store
    expected = {
        p: list(itertools.islice(source_records(p), RECORDS_PER_PARTITION)) for p in range(PARTITIONS)
    }
    builder = BackupBuilder(
        LocalStorage(store),
        "crash",
        source_cluster="crash-src",
        scratch_dir=tmp_path,
        limits=SegmentLimits(max_records=SEGMENT_RECORDS),
    )
    builder.topic(topic, PARTITIONS)
    for partition, records in expected.items():
        builder.partition(topic, partition, iter(records))
    builder.commit()
    config = config_file(
        tmp_path / "restore.yaml",
        backup_id="crash",
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage={"url": str(store)},
        restore={"transaction_max_records": TRANSACTION_RECORDS},
    )
    command = ["restore", "-c", str(config), "--exactly-once"]
    hook = Hook("local_path", FAILING_READ, renamed_away, "/data/")
    fault, line = folder_run.fails(command, hook, BackupIntegrityError.exit_code)
    assert f"{fault.obstacle.relative_to(store)} is missing" in line, line
    # End offsets count transaction markers too: a third of the way in, still below the records.
    stopped_at = sum(end_offsets(target_cluster, topic, range(PARTITIONS)).values())
    assert 0 < stopped_at < PARTITIONS * RECORDS_PER_PARTITION, (
        f"the target's end offsets sum to {stopped_at}"
    )
    fault.clear()

    folder_run.completes(command)
    check_exactly_once(target_cluster, topic, PARTITIONS, expected, seed=0)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_folder_fails_mid_prune(
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    folder_run: FolderRun,
) -> None:
    """Five daily increments, the first two pruned: a folder in place of the object the prune's
    second delete removes (unlink fails, EISDIR); with it gone, a rerun completes."""
    topic, store = unique_name, folder_run.store
    daily_backup(source_cluster, {"url": str(store)}, topic, "daily")
    source = consume_all(source_cluster, topic, [0, 1])
    config = config_file(tmp_path / "prune.yaml", backup_id="daily", storage={"url": str(store)})
    command = ["prune", "-c", str(config), "--before", iso(BASE_TIME + 2 * DAY_MS), "--execute"]
    hook = Hook("delete", 2, folder_in_place_of, "/data/")
    fault, line = folder_run.fails(command, hook, StorageError.exit_code)
    assert f"{fault.obstacle} failed: Is a directory" in line, line
    fault.clear()
    storage = LocalStorage(store)
    assert validate_backup(storage, "daily", deep=True).errors == []

    folder_run.completes(command)
    assert validate_backup(storage, "daily", deep=True).errors == []
    kept = [r for r in source if r.timestamp is not None and r.timestamp >= BASE_TIME + 2 * DAY_MS]
    assert read_backup(storage, "daily") == kept
