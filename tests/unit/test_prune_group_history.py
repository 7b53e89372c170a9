"""``prune`` and ``validate`` with group-history files (docs/format.md, "Group history"): the file
of each increment whose manifest goes goes with it, a kept increment's stays and still reads; a
file no manifest names is a warning for ``validate`` and garbage for ``prune``; a damaged one is
one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.backup.group_positions import describe_group_history
from kbackup.backup.inspect import validate_backup
from kbackup.format.catalog import BackupCatalog
from kbackup.format.layout import object_key
from kbackup.prune.execute import execute_prune
from kbackup.prune.plan import plan_prune
from kbackup.prune.settings import RetentionSettings
from kbackup.storage import LocalStorage
from tests.support.metadata_backups import commit_increment, day_of


@pytest.fixture
def store(tmp_path: Path) -> LocalStorage:
    """Backup ``b``: increments 0, 1 and 2, each with a cluster-metadata and a group-history file."""
    storage = LocalStorage(tmp_path / "store")
    for increment in range(3):
        commit_increment(storage, tmp_path, increment, group_history=True)
    return storage


def history_files(storage: LocalStorage) -> dict[int, str]:
    return {
        manifest.increment: object_key("b", manifest.group_history.key)
        for manifest in BackupCatalog(storage).load("b").manifests
        if manifest.group_history is not None
    }


def stored_history(storage: LocalStorage) -> set[str]:
    root = storage.root
    return {str(path.relative_to(root)) for path in (root / "b" / "groups").iterdir()}


def test_the_history_of_dropped_increments_goes_and_a_kept_ones_still_reads(store: LocalStorage) -> None:
    files = history_files(store)
    assert stored_history(store) == set(files.values())
    report = validate_backup(store, "b", deep=True)
    assert (report.ok, report.group_history_checked, report.warnings) == (True, 3, [])
    [item] = plan_prune(store, RetentionSettings(before=day_of(2))).backups
    assert files[0] in item.metadata_files
    assert files[1] in item.metadata_files
    assert files[2] not in item.metadata_files
    execute_prune(store, plan_prune(store, RetentionSettings(before=day_of(2))))
    assert stored_history(store) == {files[2]}
    report = validate_backup(store, "b", deep=True)
    assert (report.ok, report.group_history_checked, report.warnings) == (True, 1, [])
    # What is left reads on its own: increment 2's first reading is whole.
    info = describe_group_history(store, "b", "g")
    assert [row["offsets"][0]["offset"] for row in info["positions"]] == [10, 11]


def test_a_file_no_manifest_names_is_a_warning_then_garbage(store: LocalStorage, tmp_path: Path) -> None:
    key = "b/groups/00000001-deadrun-0badc0de.json"
    assert store.put_bytes_if_absent(key, b"{}")
    report = validate_backup(store, "b")
    assert report.ok
    assert any("under b/groups/ are in no manifest" in line and key in line for line in report.warnings)
    [item] = plan_prune(store, RetentionSettings(orphan_grace="1h")).backups
    assert key in item.orphans  # of a committed increment: no run can name it any more


def test_a_damaged_file_is_one_line_naming_it(store: LocalStorage) -> None:
    files = history_files(store)
    path = store.local_path(files[1])
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"offset', b'"0ffset') if b'"offset' in data else data[:-2] + b"]}")
    report = validate_backup(store, "b", deep=True)
    assert not report.ok
    [line] = report.errors
    assert line.startswith(f"group history {files[1]}")
    assert "\n" not in line
    path.write_bytes(data[:-1])
    [line] = validate_backup(store, "b").errors  # the listing alone sees the size
    assert files[1] in line
