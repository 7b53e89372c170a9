from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from kbackup.core.errors import BackupIntegrityError, NotFoundError, PreconditionError
from kbackup.format.catalog import BackupCatalog, commit_manifest
from kbackup.format.layout import manifest_key, object_key
from kbackup.format.manifest import (
    Manifest,
    PartitionEntry,
    SegmentEntry,
    SourceInfo,
    parse_manifest,
    utc_now_iso,
)
from kbackup.format.segments import (
    PartitionSegmentWriter,
    SegmentLimits,
    check_segment_contents,
    iter_segment_batches,
)
from kbackup.storage import LocalStorage

#: One record as the tests write and read it: offset, timestamp, timestamp type, key, value, headers.
Row = tuple[int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def write_records(
    storage: LocalStorage, tmp_path: Path, records: list[Row], limits: SegmentLimits, run_id: str = "run-a"
) -> PartitionSegmentWriter:
    writer = PartitionSegmentWriter(
        storage,
        backup_id="b1",
        run_id=run_id,
        source_cluster="src",
        topic="orders",
        partition=2,
        limits=limits,
        scratch_dir=tmp_path,
    )
    for record in records:
        writer.append(*record)
    writer.finish()
    return writer


def sample_records(count: int, start: int = 0, step: int = 1) -> list[Row]:
    return [
        (
            start + i * step,
            1_700_000_000_000 + i,
            0,
            None if i % 5 == 0 else f"key-{i}".encode(),
            None if i % 7 == 0 else bytes([i % 256]) * (i % 50),
            [("h", b"1"), ("h", None), ("bin", b"\x00\xff")] if i % 3 == 0 else [],
        )
        for i in range(count)
    ]


def read_back(storage: LocalStorage, writer: PartitionSegmentWriter) -> list[Row]:
    rows: list[Row] = []
    for entry in writer.segments:
        for batch in iter_segment_batches(storage, "b1", entry):
            for row in batch.to_pylist():
                headers = [(h["key"], h["value"]) for h in row["headers"]]
                rows.append(
                    (
                        row["offset"],
                        row["timestamp"],
                        row["timestamp_type"],
                        row["key"],
                        row["value"],
                        headers,
                    )
                )
    return rows


def test_roundtrip_keeps_every_field(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    records = sample_records(1000, start=10, step=3)  # holes between offsets are kept
    writer = write_records(storage, tmp_path, records, SegmentLimits())
    assert len(writer.segments) == 1
    entry = writer.segments[0]
    assert (entry.first_offset, entry.last_offset, entry.record_count) == (10, 10 + 999 * 3, 1000)
    assert read_back(storage, writer) == records
    assert check_segment_contents(storage, "b1", entry, "src") == []


def test_segments_roll_at_record_limit(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    records = sample_records(2500)
    writer = write_records(storage, tmp_path, records, SegmentLimits(max_records=1000))
    assert [s.record_count for s in writer.segments] == [1000, 1000, 500]
    assert [s.first_offset for s in writer.segments] == [0, 1000, 2000]
    assert read_back(storage, writer) == records


def test_segments_roll_at_byte_limit_with_bounded_row_groups(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    big: list[Row] = [
        (i, i, 0, b"k", bytes(200_000), []) for i in range(40)
    ]  # 8 MB of incompressible-ish... zeros
    limits = SegmentLimits(max_bytes=50_000, row_group_bytes=600_000, compression="none")
    writer = write_records(storage, tmp_path, big, limits)
    assert len(writer.segments) >= 10
    assert sum(s.record_count for s in writer.segments) == 40
    assert all(s.record_count <= 3 for s in writer.segments)
    assert [r[0] for r in read_back(storage, writer)] == list(range(40))


def test_offsets_must_increase(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    writer = PartitionSegmentWriter(
        storage, backup_id="b1", run_id="r", source_cluster="s", topic="t", partition=0,
        limits=SegmentLimits(), scratch_dir=tmp_path,
    )  # fmt: skip
    writer.append(5, 0, 0, None, None, None)
    with pytest.raises(ValueError, match="offset 5 after 5"):
        writer.append(5, 0, 0, None, None, None)


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_damaged_segment_is_named(tmp_path: Path, damage: str) -> None:
    storage = LocalStorage(tmp_path / "store")
    writer = write_records(storage, tmp_path, sample_records(300), SegmentLimits())
    entry = writer.segments[0]
    path = storage.local_path(object_key("b1", entry.key))
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
        expected = "truncated or replaced"
    elif damage == "flip":
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(flipped))
        expected = "fails its SHA-256 check"
    else:
        path.unlink()
        expected = "is missing"
    with pytest.raises(BackupIntegrityError, match=expected) as caught:
        list(iter_segment_batches(storage, "b1", entry))
    assert entry.key in caught.value.message
    problems = check_segment_contents(storage, "b1", entry, "src")
    assert len(problems) == 1
    assert expected in problems[0]


def make_manifest(
    increment: int, run_id: str, previous: str | None, segments: list[SegmentEntry], **source: str
) -> Manifest:
    return Manifest(
        backup_id="b1",
        increment=increment,
        run_id=run_id,
        previous_run_id=previous,
        tool_version="test",
        started_at=utc_now_iso(),
        finished_at=utc_now_iso(),
        source=SourceInfo(cluster_id=source.get("cluster", "src")),
        partitions=[
            PartitionEntry(
                topic="orders",
                partition=2,
                start_offset=0,
                end_offset=300,
                log_start_offset=0,
                record_count=sum(s.record_count for s in segments),
            )
        ],
        segments=segments,
    )


def test_commit_writes_manifest_last_and_once(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    writer = write_records(storage, tmp_path, sample_records(300), SegmentLimits(max_records=100))
    manifest = make_manifest(0, "run-a", None, writer.segments)
    commit_manifest(storage, manifest)
    backup = BackupCatalog(storage).load("b1")
    assert backup.total_records() == 300
    assert [s.first_offset for s in backup.coverage()[("orders", 2)].segments] == [0, 100, 200]
    assert BackupCatalog(storage).backup_ids() == ["b1"]
    with pytest.raises(PreconditionError, match="committed by another run"):
        commit_manifest(storage, manifest)


def test_manifest_refused_when_a_segment_is_missing(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    writer = write_records(storage, tmp_path, sample_records(300), SegmentLimits(max_records=100))
    storage.delete(object_key("b1", writer.segments[1].key))
    with pytest.raises(BackupIntegrityError, match="is missing"):
        commit_manifest(storage, make_manifest(0, "run-a", None, writer.segments))
    assert not storage.exists(manifest_key("b1", 0))
    assert BackupCatalog(storage).backup_ids() == []


def test_segments_without_manifest_do_not_exist(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    write_records(storage, tmp_path, sample_records(10), SegmentLimits())
    catalog = BackupCatalog(storage)
    assert catalog.backup_ids() == []
    with pytest.raises(NotFoundError, match="no backup 'b1'"):
        catalog.load("b1")


def test_increment_chain_is_checked(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    commit_manifest(storage, make_manifest(0, "run-a", None, []))
    commit_manifest(storage, make_manifest(1, "run-b", "run-a", []))
    assert len(BackupCatalog(storage).load("b1").manifests) == 2
    commit_manifest(storage, make_manifest(2, "run-c", "run-x", []))
    with pytest.raises(BackupIntegrityError, match="follows run run-x"):
        BackupCatalog(storage).load("b1")


def test_missing_increment_is_damage(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    commit_manifest(storage, make_manifest(0, "run-a", None, []))
    commit_manifest(storage, make_manifest(2, "run-c", "run-b", []))
    with pytest.raises(BackupIntegrityError, match="manifest of increment 1 is missing"):
        BackupCatalog(storage).load("b1")


def test_source_cluster_must_not_change(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    commit_manifest(storage, make_manifest(0, "run-a", None, []))
    commit_manifest(storage, make_manifest(1, "run-b", "run-a", [], cluster="other"))
    with pytest.raises(BackupIntegrityError, match="source cluster 'other'"):
        BackupCatalog(storage).load("b1")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"{not json", "is not valid JSON"),
        (b"[]", "is not a JSON object"),
        (json.dumps({"format": "other"}).encode(), "is not a kafka-backup manifest"),
        (json.dumps({"format": "kafka-backup", "format_version": 99}).encode(), "format version 99"),
        (json.dumps({"format": "kafka-backup", "format_version": 1}).encode(), "is malformed at backup_id"),
    ],
)
def test_bad_manifests_are_refused_by_name(text: bytes, expected: str) -> None:
    with pytest.raises(BackupIntegrityError, match=expected) as caught:
        parse_manifest(text, "b1/manifests/00000000.json")
    assert "b1/manifests/00000000.json" in caught.value.message


def test_unknown_manifest_fields_are_ignored() -> None:
    manifest = make_manifest(0, "run-a", None, [])
    raw = json.loads(manifest.to_json_bytes())
    raw["added_in_a_later_minor_version"] = {"x": 1}
    raw["source"]["new_field"] = True
    assert parse_manifest(json.dumps(raw).encode(), "m") == manifest


def _hashes_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a segment file is hashed from now on (one entry per SHA-256 taken)."""
    taken: list[int] = []
    real = hashlib.file_digest

    def counting(handle: Any, digest: str) -> Any:
        taken.append(1)
        return real(handle, digest)

    monkeypatch.setattr("kbackup.format.segments.hashlib.file_digest", counting)
    return taken


def test_a_segment_file_checked_and_unchanged_is_not_hashed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore checks every segment before its first record and reads it again to produce: the
    second read of the same, unchanged file skips the SHA-256 (docs/restore.md)."""
    storage = LocalStorage(tmp_path / "store")
    writer = write_records(storage, tmp_path, sample_records(300), SegmentLimits())
    taken = _hashes_counted(monkeypatch)
    first = read_back(storage, writer)
    again = read_back(storage, writer)
    assert again == first
    assert len(taken) == 1


@pytest.mark.parametrize("change", ["flip in place", "replace", "same bytes rewritten"])
def test_a_segment_file_changed_after_its_check_is_hashed_and_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Between the check and the read: bytes changed in place (same size), the file replaced by
    another of the same size, or even rewritten with the same bytes: its identity changed, so it is
    hashed again (and refused when its bytes differ)."""
    storage = LocalStorage(tmp_path / "store")
    writer = write_records(storage, tmp_path, sample_records(300), SegmentLimits())
    entry = writer.segments[0]
    read_back(storage, writer)
    taken = _hashes_counted(monkeypatch)
    path = storage.local_path(object_key("b1", entry.key))
    data = bytearray(path.read_bytes())
    if change != "same bytes rewritten":
        data[len(data) // 2] ^= 0x01
    if change == "replace":
        other = path.with_suffix(".new")
        other.write_bytes(bytes(data))
        other.replace(path)
    else:
        with path.open("r+b") as handle:
            handle.write(bytes(data))
    if change == "same bytes rewritten":
        assert len(read_back(storage, writer)) == 300
    else:
        with pytest.raises(BackupIntegrityError, match="fails its SHA-256 check"):
            list(iter_segment_batches(storage, "b1", entry))
    assert len(taken) == 1
