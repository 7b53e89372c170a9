"""The pure range builder, its Arrow twin and the position look-up, against the brute force."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbackup.mapping.arrow_ranges import INPUT_SCHEMA, scan_batches
from kbackup.offsets.ranges import OffsetRange, PartitionIndex, build_ranges, merge_touching
from tests.support.mapping_oracle import Restored, brute_force_position, brute_force_ranges
from tests.support.restored_partitions import fold, restored_partitions


def restored(target: tuple[str, int], rows: list[tuple[int, str, int, int]]) -> list[Restored]:
    return [Restored(target[0], target[1], *row) for row in rows]


def test_hole_free_partition_is_one_range() -> None:
    ranges = list(build_ranges("orders", 0, ((100 + i, "orders", 0, 12345 + i) for i in range(2656))))
    assert ranges == [OffsetRange("orders", 0, "orders", 0, 12345, 15000, 100, 2755)]
    assert ranges[0].records == 2656


def test_source_gaps_start_new_ranges() -> None:
    # The gap example users know: source 100, 101, 105, 106, 110 restored to target 0..4.
    records = list(zip(range(5), ["t"] * 5, [0] * 5, [100, 101, 105, 106, 110], strict=True))
    assert list(build_ranges("t", 0, records)) == [
        OffsetRange("t", 0, "t", 0, 100, 101, 0, 1),
        OffsetRange("t", 0, "t", 0, 105, 106, 2, 3),
        OffsetRange("t", 0, "t", 0, 110, 110, 4, 4),
    ]


def test_target_hole_and_interleaving_start_new_ranges() -> None:
    records = [(0, "t", 0, 0), (1, "t", 0, 1), (3, "t", 0, 2), (4, "t", 1, 3), (5, "t", 0, 3), (6, "u", 0, 4)]
    assert list(build_ranges("x", 2, records)) == [
        OffsetRange("t", 0, "x", 2, 0, 1, 0, 1),
        OffsetRange("t", 0, "x", 2, 2, 2, 3, 3),
        OffsetRange("t", 1, "x", 2, 3, 3, 4, 4),
        OffsetRange("t", 0, "x", 2, 3, 3, 5, 5),
        OffsetRange("u", 0, "x", 2, 4, 4, 6, 6),
    ]


def test_build_ranges_rejects_unordered_input() -> None:
    with pytest.raises(ValueError, match="must increase"):
        list(build_ranges("t", 0, [(5, "t", 0, 5), (5, "t", 0, 6)]))


def test_range_sides_must_have_equal_length() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        OffsetRange("t", 0, "t", 0, 0, 10, 0, 9)


def test_merge_touching_joins_pieces_and_rejects_overlap() -> None:
    pieces = [OffsetRange("t", 0, "t", 0, 50, 59, 10, 19), OffsetRange("t", 0, "t", 0, 40, 49, 0, 9)]
    assert merge_touching(pieces) == [OffsetRange("t", 0, "t", 0, 40, 59, 0, 19)]
    with pytest.raises(ValueError, match="overlapping"):
        merge_touching([OffsetRange("t", 0, "t", 0, 0, 9, 0, 9), OffsetRange("t", 0, "t", 0, 5, 5, 9, 9)])


# -- generated restores ------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(restored_partitions())
def test_build_ranges_matches_brute_force(records: list[Restored]) -> None:
    ranges = fold(records)
    assert ranges == brute_force_ranges(records)
    assert sum(r.records for r in ranges) == len(records)


def arrow_batch(rows: list[Restored]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [
            {
                "topic": r.target_topic,
                "partition": r.target_partition,
                "offset": r.target_offset,
                "source_topic": r.source_topic,
                "source_partition": r.source_partition,
                "source_offset": r.source_offset,
            }
            for r in rows
        ],
        schema=INPUT_SCHEMA,
    )


def ranges_from_output(batches: list[pa.RecordBatch], kind: str = "range") -> list[OffsetRange]:
    rows = [row for batch in batches for row in batch.to_pylist() if row["kind"] == kind]
    return [
        OffsetRange(
            r["source_topic"],
            r["source_partition"],
            r["target_topic"],
            r["target_partition"],
            r["source_start"],
            r["source_end"],
            r["target_start"],
            r["target_end"],
        )
        for r in rows
    ]


@settings(max_examples=300, deadline=None)
@given(restored_partitions(), st.randoms(use_true_random=False))
def test_arrow_batches_cut_anywhere_merge_to_brute_force(records: list[Restored], rnd: random.Random) -> None:
    # Cut the records into batches at random places, as Spark's batches and partitions would,
    # and hand the batches over in any order: the driver's merge must give back the maximal runs.
    cuts = (
        sorted(rnd.sample(range(1, len(records)), min(len(records) - 1, rnd.randint(0, 5))))
        if records
        else []
    )
    pieces = [records[a:b] for a, b in zip([0, *cuts], [*cuts, len(records)], strict=True) if b > a]
    rnd.shuffle(pieces)
    output = list(scan_batches(iter([arrow_batch(piece) for piece in pieces])))
    assert merge_touching(ranges_from_output(output)) == brute_force_ranges(records)


def test_arrow_scan_reports_malformed_and_unordered_records() -> None:
    batch = pa.RecordBatch.from_pylist(
        [
            {
                "topic": "t",
                "partition": 0,
                "offset": 7,
                "source_topic": "s",
                "source_partition": 0,
                "source_offset": 1,
            },
            {"topic": "t", "partition": 0, "offset": 8, "source_topic": "s", "source_partition": None},
            {
                "topic": "t",
                "partition": 0,
                "offset": 5,
                "source_topic": "s",
                "source_partition": 0,
                "source_offset": 0,
            },
        ],
        schema=INPUT_SCHEMA,
    )
    output = list(scan_batches(iter([batch])))
    malformed = [row for b in output for row in b.to_pylist() if row["kind"] == "malformed"]
    assert [(row["target_start"], row["records"]) for row in malformed] == [(8, 1)]
    unordered = [row for b in output for row in b.to_pylist() if row["kind"] == "unordered"]
    assert [row["records"] for row in unordered] == [1]
    # Out of order costs merging work, never correctness: target offset 6 is a hole.
    assert merge_touching(ranges_from_output(output)) == [
        OffsetRange("s", 0, "t", 0, 0, 0, 5, 5),
        OffsetRange("s", 0, "t", 0, 1, 1, 7, 7),
    ]


# -- positions ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(restored_partitions(), st.data())
def test_position_matches_reference_formula(records: list[Restored], data: st.DataObject) -> None:
    ranges = fold(records)
    targets = sorted({(r.target_topic, r.target_partition) for r in records})
    sources = sorted({(r.source_topic, r.source_partition) for r in records})
    # Committed offsets anywhere: 0, inside holes, past the end; some source partitions left out.
    committed = {
        source: data.draw(st.integers(0, 80)) for source in sources if data.draw(st.booleans(), label="has")
    }
    for target in targets:
        index = PartitionIndex(target, [r for r in ranges if r.target == target])
        got = index.position(committed)
        expected = brute_force_position(records, target, committed)
        assert expected is not None
        assert (got.offset, got.reprocessed, got.skipped) == expected
        assert got.skipped == 0


def test_order_preserving_restore_translates_every_committed_offset_exactly() -> None:
    # Source offsets 10..29 with holes (compaction, markers), restored in order to target 0.. .
    source_offsets = [o for o in range(10, 30) if o not in (13, 14, 20, 27)]
    records = restored(("t", 0), [(i, "s", 0, o) for i, o in enumerate(source_offsets)])
    index = PartitionIndex(("t", 0), fold(records))
    for committed in range(0, 35):  # below the first, inside holes, at and past the end
        got = index.position({("s", 0): committed})
        position, reprocessed, skipped = brute_force_position(records, ("t", 0), {("s", 0): committed}) or (
            -1,
            0,
            0,
        )
        assert got.offset == position
        assert got.reprocessed == reprocessed == 0
        assert got.skipped == skipped == 0
    assert index.position({("s", 0): 99}).offset == len(source_offsets)


def test_repartitioned_position_reports_interleaved_records_to_reread() -> None:
    # Two source partitions interleaved into one target partition.
    records = restored(("t", 0), [(2 * i + p, "s", p, i) for i in range(10) for p in (0, 1)])
    index = PartitionIndex(("t", 0), fold(records))
    got = index.position({("s", 0): 6, ("s", 1): 3})
    assert (got.offset, got.reprocessed, got.skipped) == brute_force_position(
        records, ("t", 0), {("s", 0): 6, ("s", 1): 3}
    )
    assert got.offset == 7  # source 1 offset 3 is at target 7
    assert got.reprocessed > 0
