"""A missing, damaged or unreadable backup is named before the first record is produced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbackup.core.errors import BackupIntegrityError
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.layout import manifest_key, object_key
from kbackup.format.segments import SegmentLimits
from kbackup.restore.integrity import remaining_segments, verify_work
from kbackup.restore.plan import TargetState, build_plan
from kbackup.restore.resume import ResumePoint
from kbackup.restore.run_plan import RunPlan, split_checked
from kbackup.restore.settings import RestoreSettings
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage


def build(tmp_path: Path) -> tuple[LocalStorage, Backup]:
    storage = LocalStorage(tmp_path / "store")
    builder = BackupBuilder(storage, "b1", scratch_dir=tmp_path, limits=SegmentLimits(max_records=40))
    builder.topic("t", 1)
    builder.partition(
        "t", 0, [BackupRecord(offset=o, value=b"x" * 10, timestamp=1000 + o) for o in range(100)]
    )
    builder.commit()
    return storage, BackupCatalog(storage).load("b1")


def work_of(backup: Backup, **settings: object) -> list:  # type: ignore[type-arg]
    state = TargetState(description="t", cluster_id="c", broker_count=1, topics={})
    plan = build_plan(backup, RestoreSettings.model_validate(settings), state, storage_url="s", now_ms=2000)
    return [item for p in plan.partitions for item in remaining_segments(p, p.offset_start)]


def test_sound_backup_counts_every_selected_record(tmp_path: Path) -> None:
    storage, backup = build(tmp_path)
    counts = verify_work(storage, "b1", work_of(backup), checksums=True)
    assert sorted(counts.values()) == [20, 40, 40]
    window = work_of(backup, time_window_start=1030, time_window_end=1050)
    assert sum(verify_work(storage, "b1", window, checksums=True).values()) == 20


def test_missing_segment_is_named(tmp_path: Path) -> None:
    storage, backup = build(tmp_path)
    segment = backup.manifests[0].segments[2]
    storage.delete(object_key("b1", segment.key))
    with pytest.raises(BackupIntegrityError, match=f"segment b1/{segment.key} is missing"):
        verify_work(storage, "b1", work_of(backup), checksums=True)


def test_truncated_segment_is_named_by_its_size(tmp_path: Path) -> None:
    storage, backup = build(tmp_path)
    segment = backup.manifests[0].segments[1]
    path = storage.local_path(object_key("b1", segment.key))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(
        BackupIntegrityError, match=f"segment b1/{segment.key} has {segment.size_bytes - 10} bytes"
    ):
        verify_work(storage, "b1", work_of(backup), checksums=False)


def test_flipped_byte_in_a_later_segment_fails_before_anything_is_read_for_producing(tmp_path: Path) -> None:
    storage, backup = build(tmp_path)
    segment = backup.manifests[0].segments[-1]
    path = storage.local_path(object_key("b1", segment.key))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    seen: list[str] = []
    with pytest.raises(BackupIntegrityError, match=f"segment b1/{segment.key} fails its SHA-256 check"):
        verify_work(
            storage, "b1", work_of(backup), checksums=True, on_segment=lambda w: seen.append(w.segment.key)
        )
    assert len(seen) == 2  # the first two were checked, the damaged third stopped the check
    # Without checksums only sizes are checked: the damage is found later, when the segment is read.
    verify_work(storage, "b1", work_of(backup), checksums=False)


def test_unknown_format_version_is_refused_naming_the_manifest(tmp_path: Path) -> None:
    storage, _backup = build(tmp_path)
    key = manifest_key("b1", 0)
    raw = json.loads(storage.get_bytes(key))
    raw["format_version"] = 99
    storage.put_bytes(key, json.dumps(raw).encode())
    with pytest.raises(BackupIntegrityError, match=r"manifest b1/manifests/00000000.json .*version"):
        BackupCatalog(storage).load("b1")


def test_resumed_work_counts_only_what_is_left(tmp_path: Path) -> None:
    storage, backup = build(tmp_path)
    state = TargetState(description="t", cluster_id="c", broker_count=1, topics={})
    plan = build_plan(backup, RestoreSettings(), state, storage_url="s", now_ms=2000)
    left = remaining_segments(plan.partitions[0], 50)
    assert [w.segment.first_offset for w in left] == [40, 80]
    assert sum(verify_work(storage, "b1", left, checksums=True).values()) == 50


def test_after_fencing_only_segments_read_from_another_offset_are_checked_again(tmp_path: Path) -> None:
    """The run checks every segment before it fences; the progress read after fencing may start a
    partition later (a run committed meanwhile): only the segments it reads from another offset are
    checked again, the others keep the counts of the first check."""
    storage, backup = build(tmp_path)
    state = TargetState(description="t", cluster_id="c", broker_count=1, topics={})
    plan = build_plan(backup, RestoreSettings(), state, storage_url="s", now_ms=2000)
    first = remaining_segments(plan.partitions[0], 10)
    checked = RunPlan(
        plan=plan,
        mode="exactly-once",
        point=ResumePoint(states={}, resumed=True, earlier={}),
        work=first,
        counts=verify_work(storage, "b1", first, checksums=True),
    )
    final = remaining_segments(plan.partitions[0], 50)
    known, added = split_checked(final, checked)
    assert [(w.segment.first_offset, w.from_offset) for w in added] == [(40, 50)]
    assert known == {final[1].segment.key: checked.counts[final[1].segment.key]}
    counts = {**known, **verify_work(storage, "b1", added, checksums=True)}
    assert sum(counts.values()) == 50
    # The same resume point: nothing is checked twice.
    assert split_checked(first, checked) == (checked.counts, [])
