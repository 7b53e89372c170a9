"""A backup read through a retention generation: ``apply_retention`` on hand-made manifests, then
``BackupCatalog.load`` and ``validate_backup`` on a pruned backup in a local folder (no Kafka).

The backup in the folder has real Parquet segments (written by the format's own segment writer),
so the deep validation reads each kept segment; the generation is written the way a prune commits
one: windows at segment boundaries, and the first increment still read.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbackup.backup.inspect import validate_backup
from kbackup.core.errors import BackupIntegrityError, NotFoundError
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.generations import PartitionWindow, RetentionGeneration, apply_retention, retention_key
from kbackup.format.layout import manifest_key, object_key, segment_key
from kbackup.format.manifest import Manifest, PartitionEntry, SegmentEntry, SourceInfo, TopicEntry
from kbackup.format.segments import PartitionSegmentWriter, SegmentLimits
from kbackup.storage import LocalStorage

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Per increment, per partition of topic ``t``: (start, end, [(first, last) of each segment]).
Layout = list[dict[int, tuple[int, int, list[tuple[int, int]]]]]

LAYOUT: Layout = [
    {0: (0, 30, [(0, 9), (10, 19), (20, 29)]), 1: (0, 10, [(0, 4), (5, 9)])},
    {0: (30, 50, [(30, 39), (40, 49)]), 1: (10, 10, [])},
    {0: (50, 60, [(50, 59)]), 1: (10, 20, [(10, 19)])},
    {0: (60, 70, [(60, 69)]), 1: (20, 25, [(20, 24)])},
]


def manifest_of(
    increment: int, partitions: dict[int, tuple[int, int, list[SegmentEntry]]], backup_id: str = "b"
) -> Manifest:
    entries = []
    segments: list[SegmentEntry] = []
    for partition, (start, end, parts) in sorted(partitions.items()):
        segments += parts
        entries.append(
            PartitionEntry(
                topic="t",
                partition=partition,
                start_offset=start,
                end_offset=end,
                log_start_offset=0,
                record_count=sum(s.record_count for s in parts),
                first_offset=parts[0].first_offset if parts else None,
                last_offset=parts[-1].last_offset if parts else None,
                min_timestamp=min(s.min_timestamp for s in parts) if parts else None,
                max_timestamp=max(s.max_timestamp for s in parts) if parts else None,
            )
        )
    return Manifest(
        backup_id=backup_id,
        increment=increment,
        run_id=f"run{increment}",
        previous_run_id=f"run{increment - 1}" if increment else None,
        tool_version="test",
        started_at=f"2026-01-0{increment + 1}T00:00:00.000Z",
        finished_at=f"2026-01-0{increment + 1}T00:01:00.000Z",
        source=SourceInfo(cluster_id="src"),
        settings={"mode": "snapshot"},
        topics=[TopicEntry(name="t", partitions=2)],
        partitions=entries,
        segments=segments,
    )


def synthetic(layout: Layout = LAYOUT) -> list[Manifest]:
    """Manifests whose segments exist only on paper: a record at every offset, 1,000 ms + offset."""
    manifests = []
    for increment, partitions in enumerate(layout):
        run = f"run{increment}"
        manifests.append(
            manifest_of(
                increment,
                {
                    partition: (
                        start,
                        end,
                        [
                            SegmentEntry(
                                key=segment_key("t", partition, first, run),
                                topic="t",
                                partition=partition,
                                first_offset=first,
                                last_offset=last,
                                record_count=last - first + 1,
                                size_bytes=100 * (last - first + 1),
                                sha256="0" * 64,
                                min_timestamp=1_000 + first,
                                max_timestamp=1_000 + last,
                            )
                            for first, last in parts
                        ],
                    )
                    for partition, (start, end, parts) in partitions.items()
                },
            )
        )
    return manifests


def generation(
    windows: dict[int, int],
    first_increment: int = 0,
    *,
    number: int = 1,
    previous_run: str | None = None,
    deleted: bool = False,
    backup_id: str = "b",
) -> RetentionGeneration:
    return RetentionGeneration(
        backup_id=backup_id,
        generation=number,
        created_at="2026-02-01T00:00:00.000Z",
        tool_version="test",
        deleted=deleted,
        first_increment=first_increment,
        first_previous_run_id=previous_run
        if previous_run is not None or not first_increment
        else f"run{first_increment - 1}",
        windows=[PartitionWindow(topic="t", partition=p, start_offset=o) for p, o in sorted(windows.items())],
    )


def spans(manifest: Manifest, partition: int) -> list[tuple[int, int]]:
    return [(s.first_offset, s.last_offset) for s in manifest.segments if s.partition == partition]


def entry(manifest: Manifest, partition: int) -> PartitionEntry:
    [found] = [e for e in manifest.partitions if e.partition == partition]
    return found


# -- apply_retention on manifests ------------------------------------------------------------------


def test_segments_below_a_window_go_and_entries_follow_the_kept_ones() -> None:
    manifests = synthetic()
    seen = apply_retention(manifests, generation({0: 45, 1: 5}))
    assert [m.increment for m in seen] == [0, 1, 2, 3]
    zero, one, two, three = seen
    # Increment 0: partition 0 is wholly below 45, partition 1 loses its segment 0..4.
    assert spans(zero, 0) == []
    assert spans(zero, 1) == [(5, 9)]
    emptied = entry(zero, 0)
    assert (emptied.start_offset, emptied.end_offset, emptied.record_count) == (30, 30, 0)
    assert (emptied.first_offset, emptied.last_offset) == (None, None)
    assert (emptied.min_timestamp, emptied.max_timestamp) == (None, None)
    assert emptied.log_start_offset == 0
    cut = entry(zero, 1)
    assert (cut.start_offset, cut.end_offset, cut.record_count) == (5, 10, 5)
    assert (cut.first_offset, cut.last_offset, cut.min_timestamp, cut.max_timestamp) == (5, 9, 1_005, 1_009)
    # Increment 1: 30..39 goes, 40..49 straddles the window and stays whole: the window holds every
    # record from its first offset on.
    assert spans(one, 0) == [(40, 49)]
    straddled = entry(one, 0)
    assert (straddled.start_offset, straddled.end_offset, straddled.record_count) == (40, 50, 10)
    assert (straddled.first_offset, straddled.last_offset) == (40, 49)
    assert (straddled.min_timestamp, straddled.max_timestamp) == (1_040, 1_049)
    assert entry(one, 1) is entry(manifests[1], 1)  # an empty range above its window: as it was
    # Increments 2 and 3 lie above both windows: the very same objects.
    assert two is manifests[2]
    assert three is manifests[3]
    assert zero is not manifests[0]
    # The manifests given are left as they were.
    assert [len(m.segments) for m in manifests] == [5, 2, 2, 2]
    assert entry(manifests[0], 0).record_count == 30


def test_increments_below_the_first_are_left_out() -> None:
    manifests = synthetic()
    seen = apply_retention(manifests, generation({}, first_increment=2))
    assert len(seen) == 2
    assert seen[0] is manifests[2]
    assert seen[1] is manifests[3]
    seen = apply_retention(manifests, generation({0: 40, 1: 10}, first_increment=1))
    assert [m.increment for m in seen] == [1, 2, 3]
    assert spans(seen[0], 0) == [(40, 49)]
    assert (entry(seen[0], 0).start_offset, entry(seen[0], 0).record_count) == (40, 10)
    assert seen[1] is manifests[2]
    assert apply_retention(manifests, generation({})) == manifests
    assert all(a is b for a, b in zip(apply_retention(manifests, generation({})), manifests, strict=True))


def test_a_window_beyond_the_end_empties_the_partition_at_its_end() -> None:
    manifests = synthetic()
    seen = apply_retention(manifests, generation({1: 1_000}))
    for manifest, original in zip(seen, manifests, strict=True):
        assert spans(manifest, 1) == []
        moved = entry(manifest, 1)
        assert (moved.start_offset, moved.end_offset) == (entry(original, 1).end_offset,) * 2
        assert (moved.record_count, moved.first_offset, moved.last_offset) == (0, None, None)
        assert spans(manifest, 0) == spans(original, 0)
        assert entry(manifest, 0) is entry(original, 0)


def test_coverage_starts_at_the_windows() -> None:
    manifests = synthetic()
    retention = generation({0: 45, 1: 5})
    coverage = Backup("b", apply_retention(manifests, retention), retention).coverage()
    zero, one = coverage[("t", 0)], coverage[("t", 1)]
    assert (zero.start_offset, zero.end_offset, zero.record_count) == (40, 70, 30)  # 40..49 straddles 45
    assert [(s.first_offset, s.last_offset) for s in zero.segments] == [(40, 49), (50, 59), (60, 69)]
    assert (one.start_offset, one.end_offset, one.record_count) == (5, 25, 20)
    unpruned = Backup("b", manifests).coverage()
    assert (unpruned[("t", 0)].start_offset, unpruned[("t", 0)].record_count) == (0, 70)


@FUZZ
@given(
    st.dictionaries(st.sampled_from([0, 1]), st.integers(0, 80), max_size=2),
    st.integers(0, 3),
)
def test_apply_retention_against_its_definition(windows: dict[int, int], first: int) -> None:
    manifests = synthetic()
    seen = apply_retention(manifests, generation(windows, first, previous_run="x"))
    assert [m.increment for m in seen] == list(range(first, 4))
    window = {p: windows.get(p, 0) for p in (0, 1)}
    # A kept segment straddling its window is kept whole: the window then starts at its first offset.
    start = {
        p: min(
            [window[p]]
            + [
                s.first_offset
                for m in manifests[first:]
                for s in m.segments
                if s.partition == p and s.last_offset >= window[p]
            ]
        )
        for p in (0, 1)
    }
    for manifest, original in zip(seen, manifests[first:], strict=True):
        kept = [s for s in original.segments if s.last_offset >= start[s.partition]]
        assert manifest.segments == kept
        untouched = len(kept) == len(original.segments) and all(
            e.start_offset >= start[e.partition] for e in original.partitions
        )
        assert (manifest is original) == untouched
        for before in original.partitions:
            after = entry(manifest, before.partition)
            assert (after.end_offset, after.log_start_offset) == (before.end_offset, before.log_start_offset)
            if before.start_offset >= start[before.partition]:
                assert after == before
                continue
            mine = [s for s in kept if s.partition == before.partition]
            assert after.start_offset == min(start[before.partition], before.end_offset)
            assert after.record_count == sum(s.record_count for s in mine)
            assert after.first_offset == (mine[0].first_offset if mine else None)
            assert after.last_offset == (mine[-1].last_offset if mine else None)


# -- a pruned backup in a folder ---------------------------------------------------------------------

#: Per increment, per partition: the range it copied; segments of at most 5 records.
RANGES = [
    {0: (0, 12), 1: (0, 6)},  # 0..4 5..9 10..11 | 0..4 5
    {0: (12, 20), 1: (6, 6)},  # 12..16 17..19 | -
    {0: (20, 31), 1: (6, 15)},  # 20..24 25..29 30 | 6..10 11..14
    {0: (31, 40), 1: (15, 18)},  # 31..35 36..39 | 15..17
]
#: The prune: partition 0 from 17 (segment 17..19 on), partition 1 from 6 (all of increment 0 goes).
WINDOWS = {0: 17, 1: 6}


class ReadLog(LocalStorage):
    """A local folder that notes every object read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.read: list[str] = []

    def get_bytes(self, key: str) -> bytes:
        self.read.append(key)
        return super().get_bytes(key)


def write_backup(storage: LocalStorage, scratch: Path, backup_id: str = "b") -> list[Manifest]:
    manifests = []
    for increment, ranges in enumerate(RANGES):
        parts: dict[int, tuple[int, int, list[SegmentEntry]]] = {}
        for partition, (start, end) in ranges.items():
            writer = PartitionSegmentWriter(
                storage,
                backup_id=backup_id,
                run_id=f"run{increment}",
                source_cluster="src",
                topic="t",
                partition=partition,
                limits=SegmentLimits(max_records=5),
                scratch_dir=scratch,
            )
            for offset in range(start, end):
                writer.append(offset, 1_000 + offset, 0, b"k", b"v%d" % offset, None)
            parts[partition] = (start, end, writer.finish())
        manifest = manifest_of(increment, parts, backup_id)
        storage.put_bytes(manifest_key(backup_id, increment), manifest.to_json_bytes())
        manifests.append(manifest)
    return manifests


def commit(storage: LocalStorage, retention: RetentionGeneration) -> None:
    storage.put_bytes(retention_key(retention.backup_id, retention.generation), retention.to_json_bytes())


def removed_objects(manifests: list[Manifest], windows: dict[int, int]) -> list[str]:
    return [
        object_key("b", s.key)
        for m in manifests
        for s in m.segments
        if s.last_offset < windows.get(s.partition, 0)
    ]


@pytest.fixture
def pruned(tmp_path: Path) -> tuple[ReadLog, list[Manifest]]:
    """Backup ``b`` with generation 1 committed; nothing deleted yet (as after a crash right there)."""
    storage = ReadLog(tmp_path / "store")
    manifests = write_backup(storage, tmp_path)
    assert len(BackupCatalog(storage).load("b").manifests) == 4
    commit(storage, generation(WINDOWS, first_increment=1))
    storage.read.clear()
    return storage, manifests


def finish_prune(storage: LocalStorage, manifests: list[Manifest]) -> None:
    """What the prune deletes after its commit: increment 0's manifest and the segments below."""
    storage.delete(manifest_key("b", 0))
    for key in removed_objects(manifests, WINDOWS):
        storage.delete(key)


def test_the_segments_below_the_windows_are_the_ones_a_prune_removes(
    pruned: tuple[ReadLog, list[Manifest]],
) -> None:
    _, manifests = pruned
    assert [(m.increment, len(m.segments)) for m in manifests] == [(0, 5), (1, 2), (2, 5), (3, 3)]
    removed = removed_objects(manifests, WINDOWS)
    assert len(removed) == 6
    # The windows lie on segment boundaries, as a prune sets them: no segment straddles one.
    assert not [
        s for m in manifests for s in m.segments if s.first_offset < WINDOWS[s.partition] <= s.last_offset
    ]
    assert all(s.last_offset < WINDOWS[s.partition] for s in manifests[0].segments)


@pytest.mark.parametrize("crashed", [True, False])
def test_load_reads_from_the_first_increment(pruned: tuple[ReadLog, list[Manifest]], crashed: bool) -> None:
    storage, manifests = pruned
    if crashed:
        # Increment 0's manifest is still there (the prune stopped between commit and deletion);
        # damaged even, it is not read.
        storage.put_bytes(manifest_key("b", 0), b"{not json")
    else:
        finish_prune(storage, manifests)
    backup = BackupCatalog(storage).load("b")
    assert [m.increment for m in backup.manifests] == [1, 2, 3]
    assert backup.retention is not None
    assert backup.retention.generation == 1
    assert manifest_key("b", 0) not in storage.read
    assert manifest_key("b", 1) in storage.read
    assert backup.manifests[1] == manifests[2]  # above both windows: as written
    coverage = backup.coverage()
    zero, one = coverage[("t", 0)], coverage[("t", 1)]
    assert (zero.start_offset, zero.end_offset, zero.record_count) == (17, 40, 23)
    assert [(s.first_offset, s.last_offset) for s in zero.segments][:2] == [(17, 19), (20, 24)]
    assert (one.start_offset, one.end_offset, one.record_count) == (6, 18, 12)
    assert one.segments[0].first_offset == 6
    assert backup.total_records() == 35
    kept = [s for m in manifests for s in m.segments if s.last_offset >= WINDOWS[s.partition]]
    assert backup.total_bytes() == sum(s.size_bytes for s in kept)


def test_a_wrong_first_previous_run_id_is_an_integrity_error(
    pruned: tuple[ReadLog, list[Manifest]],
) -> None:
    storage, _ = pruned
    commit(storage, generation(WINDOWS, first_increment=1, number=2, previous_run="run7"))
    with pytest.raises(BackupIntegrityError, match="retention generation 2 says increment 0 was run run7"):
        BackupCatalog(storage).load("b")
    report = validate_backup(storage, "b")
    assert not report.ok
    assert "run7" in report.errors[0]


def test_the_newest_generation_is_the_one_read(pruned: tuple[ReadLog, list[Manifest]]) -> None:
    storage, _ = pruned
    commit(storage, generation({0: 20, 1: 6}, first_increment=2, number=2))
    backup = BackupCatalog(storage).load("b")
    assert [m.increment for m in backup.manifests] == [2, 3]
    assert backup.coverage()[("t", 0)].start_offset == 20
    assert backup.coverage()[("t", 1)].start_offset == 6
    # A generation whose content does not match its name is damage, not a newer state.
    storage.put_bytes(retention_key("b", 3), generation({}, number=4).to_json_bytes())
    with pytest.raises(BackupIntegrityError, match="generation 4"):
        BackupCatalog(storage).load("b")


def test_a_deleted_backup_is_gone_for_readers(pruned: tuple[ReadLog, list[Manifest]], tmp_path: Path) -> None:
    storage, _ = pruned
    (tmp_path / "other").mkdir()
    write_backup(storage, tmp_path / "other", backup_id="other")
    catalog = BackupCatalog(storage)
    assert catalog.backup_ids() == ["b", "other"]
    assert catalog.exists("b")
    commit(storage, generation(WINDOWS, first_increment=1, number=2, deleted=True))
    assert catalog.backup_ids() == ["other"]
    assert not catalog.exists("b")
    assert "b" in catalog.stored_ids()
    with pytest.raises(NotFoundError, match="removed by a prune"):
        catalog.load("b")
    with pytest.raises(NotFoundError):
        validate_backup(storage, "b")
    assert len(catalog.load("other").manifests) == 4


@pytest.mark.parametrize("crashed", [True, False])
def test_a_pruned_backup_validates_deeply(pruned: tuple[ReadLog, list[Manifest]], crashed: bool) -> None:
    """Real Parquet segments: the deep check reads each kept one (size, sha256, offsets, rows)."""
    storage, manifests = pruned
    if not crashed:
        finish_prune(storage, manifests)
    report = validate_backup(storage, "b", deep=True)
    assert report.errors == []
    assert (report.increments, report.segments_checked, report.records) == (3, 9, 35)
    if crashed:
        # The segments below the windows are still stored: harmless leftovers, not damage.
        [warning] = report.warnings
        assert warning.startswith("6 object(s)")
    else:
        assert report.warnings == []


def test_validation_still_finds_damage_in_a_pruned_backup(pruned: tuple[ReadLog, list[Manifest]]) -> None:
    storage, manifests = pruned
    finish_prune(storage, manifests)
    kept = manifests[2].segments[0]
    storage.put_bytes(object_key("b", kept.key), b"x" * kept.size_bytes)
    report = validate_backup(storage, "b", deep=True)
    assert len(report.errors) == 1
    assert kept.key in report.errors[0]
    storage.delete(object_key("b", kept.key))
    report = validate_backup(storage, "b")
    assert report.errors == [f"segment {object_key('b', kept.key)} (increment 2) is missing"]


def keys_of(windows: dict[int, int]) -> dict[TopicPartitionKey, int]:
    return {("t", p): o for p, o in windows.items()}


def test_generation_records_its_windows() -> None:
    retention = generation(WINDOWS, first_increment=1)
    assert retention.window_starts() == keys_of(WINDOWS)
    assert retention.first_previous_run_id == "run0"
