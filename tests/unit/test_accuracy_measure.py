"""The accuracy study's vectorised truth agrees with the reference functions of kbackup.offsets.translate."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.accuracy.measure import RestoredPartition
from bench.accuracy.study import Judged, ScenarioRow, StudyResult, failures
from kbackup.offsets.translate import RestoredRecord, measure
from tests.support.oracles import reference_position


@st.composite
def restored_partitions(draw: st.DrawFn) -> tuple[list[RestoredRecord], dict[int, int]]:
    """Target records of up to three source partitions, interleaved, with holes on both sides."""
    sources = draw(st.integers(min_value=1, max_value=3))
    next_source = [draw(st.integers(0, 5)) for _ in range(sources)]
    records = []
    target = draw(st.integers(0, 5))
    for _ in range(draw(st.integers(0, 60))):
        partition = draw(st.integers(0, sources - 1))
        records.append(RestoredRecord(target, "t", partition, next_source[partition]))
        next_source[partition] += draw(st.integers(1, 3))
        target += draw(st.integers(1, 2))
    committed = {p: draw(st.integers(0, next_source[p] + 2)) for p in range(sources) if draw(st.booleans())}
    return records, committed


def columns(records: list[RestoredRecord]) -> RestoredPartition:
    return RestoredPartition(
        np.asarray([r.target_offset for r in records], dtype=np.int64),
        np.asarray([r.source_partition for r in records], dtype=np.int64),
        np.asarray([r.source_offset for r in records], dtype=np.int64),
    )


@settings(max_examples=300, deadline=None)
@given(restored_partitions(), st.integers(0, 200))
def test_vectorised_truth_matches_the_reference(
    case: tuple[list[RestoredRecord], dict[int, int]], position: int
) -> None:
    records, committed = case
    partition = columns(records)
    thresholds = {("t", p): c for p, c in committed.items()}
    assert partition.reference_position(committed) == reference_position(records, thresholds)
    expected = measure(records, thresholds, position)
    assert partition.judge(committed, position) == (expected.skipped, expected.reprocessed)


def test_pairs_are_one_source_partition_in_target_order() -> None:
    records = [RestoredRecord(0, "t", 0, 10), RestoredRecord(1, "t", 1, 4), RestoredRecord(3, "t", 0, 12)]
    assert list(columns(records).pairs(0)) == [(10, 0), (12, 3)]


def _row(name: str, header: list[Judged], lower_bound: list[int]) -> ScenarioRow:
    row = ScenarioRow(name, len(header), 100, lower_bound=lower_bound)
    row.outcomes = {"header-based": header, "MirrorMaker 2": None, "timestamp": None}
    return row


def test_the_study_fails_when_header_based_is_not_exact() -> None:
    exact = _row("lag 0", [Judged()], [0])
    rereads = _row("lag 1-99", [Judged(reread=3)], [0])
    bound_met = _row("repartitioned 3 -> 6, lag 0", [Judged(reread=7)], [7])
    bound_missed = _row("repartitioned 3 -> 6, lag 1", [Judged(reread=9, skipped=1)], [7])
    result = StudyResult(source=None, rows=[exact, rereads, bound_met, bound_missed], timings={},  # type: ignore[arg-type]
                         header_mismatches=[])  # fmt: skip
    found = failures(result)
    assert found == [
        "lag 1-99: header-based re-read 3 records",
        "repartitioned 3 -> 6, lag 1: header-based skipped 1 records",
        "repartitioned 3 -> 6, lag 1: header-based re-read 9, lower bound 7",
    ]
