"""list / describe / validate on backups written with the format's own writer (no Kafka needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbackup.backup.inspect import describe_backup, list_backups, validate_backup
from kbackup.cli.main import run
from kbackup.core.errors import NotFoundError
from kbackup.format.layout import manifest_key, object_key
from kbackup.format.segments import PartitionSegmentWriter, SegmentLimits
from kbackup.storage import LocalStorage
from tests.support.backup_builder import write_increment


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    store = LocalStorage(tmp_path / "store")
    write_increment(store, tmp_path, 0, {0: (0, 20), 1: (0, 5)}, groups={"g": {0: 12}})
    write_increment(store, tmp_path, 1, {0: (20, 30), 1: (5, 5)}, groups={"g": {0: 30, 1: 5}})
    return store


def rewrite_manifest(storage: LocalStorage, increment: int, **changes: object) -> None:
    key = manifest_key("b", increment)
    raw = json.loads(storage.get_bytes(key))
    raw.update(changes)
    storage.local_path(key).write_text(json.dumps(raw))


def test_list_and_describe(storage: LocalStorage) -> None:
    [row] = list_backups(storage)
    assert (row["backup_id"], row["increments"], row["records"], row["partitions"]) == ("b", 2, 35, 2)
    assert row["last_finished_at"] == "2026-01-02T00:01:00.000Z"
    info = describe_backup(storage, "b")
    partitions = {p["partition"]: p for p in info["partitions"]}
    assert (partitions[0]["start_offset"], partitions[0]["end_offset"], partitions[0]["records"]) == (
        0,
        30,
        30,
    )
    assert (partitions[0]["min_timestamp"], partitions[0]["max_timestamp"]) == (1_000, 1_029)
    assert partitions[0]["segments"] == 3 + 2  # 20 records in segments of 7, then 10
    assert info["consumer_groups"]["increment"] == 1
    assert info["topics"][0]["configs"] == {"cleanup.policy": "compact"}
    with pytest.raises(NotFoundError):
        describe_backup(storage, "other")


def test_a_sound_backup_validates(storage: LocalStorage) -> None:
    report = validate_backup(storage, "b", deep=True)
    assert report.errors == []
    assert report.warnings == []
    assert report.segments_checked == 6
    assert report.records == 35


def test_orphan_segments_are_warnings(storage: LocalStorage, tmp_path: Path) -> None:
    writer = PartitionSegmentWriter(
        storage, backup_id="b", run_id="dead", source_cluster="src", topic="t", partition=0,
        limits=SegmentLimits(), scratch_dir=tmp_path,
    )  # fmt: skip
    writer.append(30, 0, 0, None, b"x", None)
    writer.finish()
    report = validate_backup(storage, "b")
    assert report.errors == []
    assert len(report.warnings) == 1
    assert "1 object(s)" in report.warnings[0]
    assert "dead" in report.warnings[0]


def test_a_gap_between_increments_is_an_error(storage: LocalStorage) -> None:
    raw = json.loads(storage.get_bytes(manifest_key("b", 1)))
    raw["partitions"][0]["start_offset"] = 22
    storage.local_path(manifest_key("b", 1)).write_text(json.dumps(raw))
    errors = validate_backup(storage, "b").errors
    assert any("t/0: starts at 22, the previous increment ended at 20 (records missing)" in e for e in errors)


def test_record_count_and_range_mismatches_are_errors(storage: LocalStorage) -> None:
    raw = json.loads(storage.get_bytes(manifest_key("b", 0)))
    raw["partitions"][0]["record_count"] = 19
    raw["partitions"][0]["end_offset"] = 15
    raw["segments"][0]["record_count"] = 9
    storage.local_path(manifest_key("b", 0)).write_text(json.dumps(raw))
    errors = validate_backup(storage, "b").errors
    assert any("increment 0, t/0: 19 records, its segments hold" in e for e in errors)
    assert any("past the increment's end 15" in e for e in errors)
    assert any("claims 9 records in offsets 0..6" in e for e in errors)


def test_missing_and_truncated_segments_are_errors(storage: LocalStorage) -> None:
    manifest = json.loads(storage.get_bytes(manifest_key("b", 0)))
    first, second = manifest["segments"][0]["key"], manifest["segments"][1]["key"]
    storage.delete(object_key("b", first))
    path = storage.local_path(object_key("b", second))
    path.write_bytes(path.read_bytes()[:-10])
    errors = validate_backup(storage, "b").errors
    assert any(first in e and "is missing" in e for e in errors)
    assert any(second in e and "bytes, increment 0 says" in e for e in errors)


def test_group_offsets_beyond_the_data_are_warnings(storage: LocalStorage, tmp_path: Path) -> None:
    write_increment(storage, tmp_path, 2, {0: (30, 31), 1: (5, 5)}, groups={"late": {1: 9}})
    report = validate_backup(storage, "b")
    assert report.errors == []
    assert report.warnings == [
        "increment 2: group late committed t/1 offset 9, beyond the backup's end (5) for it"
    ]


def test_broken_chain_is_reported_not_raised(storage: LocalStorage) -> None:
    rewrite_manifest(storage, 1, previous_run_id="someone-else")
    report = validate_backup(storage, "b")
    assert not report.ok
    assert "follows run someone-else" in report.errors[0]
    [row] = list_backups(storage)
    assert "follows run someone-else" in row["error"]


def test_cli_validate_and_list_print_results(
    storage: LocalStorage, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["validate", "--path", str(storage.root), "--backup-id", "b", "--deep"]) == 0
    assert (
        "backup b: OK (2 increment(s), 35 records, 6 segment(s) re-read and checksummed)"
        in capsys.readouterr().out
    )
    assert run(["list", "--path", str(storage.root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["backups"][0]["records"] == 35
    rewrite_manifest(storage, 1, previous_run_id="someone-else")
    assert run(["validate", "--path", str(storage.root), "--backup-id", "b"]) == 8
    assert "follows run someone-else" in capsys.readouterr().err
    assert run(["list", "--path", str(storage.root)]) == 0
    assert "DAMAGED" in capsys.readouterr().out
