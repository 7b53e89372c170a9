"""The translation core against the reference definition, including hypothesis properties."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from kbackup.offsets.translate import (
    MAX_GUESSES,
    RestoredRecord,
    SourceProbe,
    measure,
    merged_search,
    search_position,
)
from tests.support.oracles import reference_position


def restored(
    source_offsets: list[int], *, target_start: int = 0, target_gaps: list[int] | None = None
) -> list[RestoredRecord]:
    """Records of one source partition, in order, at increasing target offsets (optional gaps = markers)."""
    records: list[RestoredRecord] = []
    target = target_start
    for index, origin in enumerate(source_offsets):
        records.append(RestoredRecord(target, "orders", 0, origin))
        target += 1 + (target_gaps[index] if target_gaps else 0)
    return records


def probe_over(records: list[RestoredRecord]) -> Callable[[int], RestoredRecord | None]:
    ordered = sorted(records)
    keys = [r.target_offset for r in ordered]

    def probe(t: int) -> RestoredRecord | None:
        index = bisect.bisect_left(keys, t)
        return ordered[index] if index < len(ordered) else None

    return probe


def test_reference_examples_from_the_contract() -> None:
    # Source 100, 101, 105, 106, 110 (holes at 102-104 and 107-109) restored at 0..4.
    records = restored([100, 101, 105, 106, 110])
    cases = {0: 0, 100: 0, 101: 1, 102: 2, 104: 2, 105: 2, 107: 4, 110: 4, 111: 5, 5000: 5}
    for committed, expected in cases.items():
        position = reference_position(records, {("orders", 0): committed})
        assert position == expected, committed
        assert measure(records, {("orders", 0): committed}, position).skipped == 0
        assert measure(records, {("orders", 0): committed}, position).reprocessed == 0


def test_uncommitted_group_starts_at_first_restored_record() -> None:
    records = restored([7, 8, 9], target_start=40)
    assert reference_position(records, {}) == 40


def test_empty_partition_has_no_position() -> None:
    assert reference_position([], {("orders", 0): 3}) is None


def test_repartitioned_partition_loses_nothing_and_counts_rereads() -> None:
    # Target partition 0 interleaves source partitions 0 and 1.
    records = [
        RestoredRecord(0, "orders", 0, 10),
        RestoredRecord(1, "orders", 1, 50),
        RestoredRecord(2, "orders", 0, 11),
        RestoredRecord(3, "orders", 1, 51),
        RestoredRecord(4, "orders", 0, 12),
    ]
    # Processed on the source: (0, 10), (0, 11); nothing of partition 1.
    committed = {("orders", 0): 12, ("orders", 1): 50}
    position = reference_position(records, committed)
    assert position == 1  # the first unprocessed record is (1, 50) at target offset 1
    result = measure(records, committed, position)
    assert result.skipped == 0
    assert result.reprocessed == 1  # (0, 11) at target 2 was processed but lies after the position
    assert measure(records, committed, 0).reprocessed == 2
    assert measure(records, committed, 2).skipped == 1


def test_measure_counts_skips_when_position_too_far() -> None:
    records = restored([0, 1, 2, 3, 4])
    committed = {("orders", 0): 2}
    assert measure(records, committed, 4).skipped == 2
    assert measure(records, committed, 1).reprocessed == 1


def test_search_answers_with_one_probe_when_nothing_was_processed() -> None:
    records = restored(list(range(100, 10_000)))
    probe = probe_over(records)
    for committed in (0, 99, 100):
        result = search_position(probe, 0, len(records), committed)
        assert (result.position, result.probes) == (0, 1)


def test_search_counts_about_log2_probes() -> None:
    records = restored(list(range(0, 2_000_000, 2)))  # a million records with holes on the source side
    probe = probe_over(records)
    result = search_position(probe, 0, len(records), 1_234_567)
    assert result.position == reference_position(records, {("orders", 0): 1_234_567})
    # log2(n) halvings, the probe of the first record, and one to confirm the last step.
    assert result.probes <= math.ceil(math.log2(len(records))) + 2


def test_search_of_a_hole_free_restore_probes_the_first_record_and_two_neighbours() -> None:
    # Origin 1,000..1,000,999 at target 0..999,999: the guesses land on the answer at once.
    records = restored(list(range(1_000, 1_001_000)))
    probe = probe_over(records)
    probed: list[int] = []

    def recording(t: int) -> RestoredRecord | None:
        probed.append(t)
        return probe(t)

    for committed in (1_001, 2_000, 123_457, 999_999, 1_000_999, 1_001_000, 5_000_000):
        probed.clear()
        result = search_position(recording, 0, len(records), committed)
        assert result.position == reference_position(records, {("orders", 0): committed})
        assert result.probes == len(probed) <= 3, (committed, probed)
        # After the first record, only the answer and the record before it are read: one fetch.
        assert max(probed[1:]) - min(probed[1:]) <= 1, (committed, probed)


source_offsets = st.lists(st.integers(min_value=0, max_value=50), min_size=0, max_size=40, unique=True).map(
    sorted
)


@settings(max_examples=400, deadline=None)
@given(
    origins=source_offsets,
    gaps=st.lists(st.integers(min_value=0, max_value=3), min_size=40, max_size=40),
    target_start=st.integers(min_value=0, max_value=5),
    committed=st.integers(min_value=0, max_value=60),
    trailing=st.integers(min_value=0, max_value=3),
)
def test_search_equals_reference(
    origins: list[int], gaps: list[int], target_start: int, committed: int, trailing: int
) -> None:
    records = restored(origins, target_start=target_start, target_gaps=gaps)
    end = (
        records[-1].target_offset + 1 if records else target_start
    ) + trailing  # markers after the last record
    result = search_position(probe_over(records), 0, end, committed)
    # The guesses never cost more than MAX_GUESSES probes over a binary search.
    assert result.probes <= math.ceil(math.log2(end + 1)) + 2 + MAX_GUESSES
    expected = reference_position(records, {("orders", 0): committed})
    if expected is None:
        assert result.position == 0
        assert result.record_at_position is None
    else:
        assert result.position == expected
        outcome = measure(records, {("orders", 0): committed}, result.position)
        assert (outcome.skipped, outcome.reprocessed) == (0, 0)


from kbackup.offsets.ranges import index_by_target  # noqa: E402
from tests.support.oracles import ranges_from_records  # noqa: E402


@st.composite
def interleaved_partition(draw):  # type: ignore[no-untyped-def]
    """A target partition fed by 1-3 source partitions, each in order, with holes on both sides."""
    sources = draw(st.integers(min_value=1, max_value=3))
    queues = {p: sorted(draw(st.lists(st.integers(0, 40), max_size=15, unique=True))) for p in range(sources)}
    order = [p for p, offsets in queues.items() for _ in offsets]
    order = draw(st.permutations(order))
    records, target, cursor = [], 0, dict.fromkeys(queues, 0)
    for p in order:
        target += draw(st.integers(0, 2))  # markers or foreign records between
        records.append(RestoredRecord(target, "orders", p, queues[p][cursor[p]]))
        cursor[p] += 1
        target += 1
    committed = {("orders", p): draw(st.integers(0, 45)) for p in queues if draw(st.booleans())}
    return records, committed


@settings(max_examples=400, deadline=None)
@given(case=interleaved_partition())
def test_ranges_give_reference_position_and_rereads(case) -> None:  # type: ignore[no-untyped-def]
    records, committed = case
    expected = reference_position(records, committed)
    index = index_by_target(ranges_from_records(records, "orders-restored", 0))
    if not records:
        assert expected is None
        assert not index
        return
    result = index[("orders-restored", 0)].position(committed)
    assert result.offset == expected
    assert expected is not None
    outcome = measure(records, committed, expected)
    assert result.skipped == outcome.skipped == 0
    assert result.reprocessed == outcome.reprocessed
    at_position = [r for r in records if r.target_offset == expected]
    if at_position:
        r = at_position[0]
        assert result.origin == (r.source_topic, r.source_partition, r.source_offset)
    else:
        assert result.origin is None


def source_probe_over(records: list[RestoredRecord]) -> SourceProbe:
    """Answers merged-search probes over one target partition's records, reading them all."""
    ordered = sorted(records)

    def probe(t: int, partition: int | None, limit: int | None) -> RestoredRecord | None:
        return next(
            (
                r
                for r in ordered
                if r.target_offset >= t
                and (limit is None or r.target_offset < limit)
                and (partition is None or r.source_partition == partition)
            ),
            None,
        )

    return probe


@settings(max_examples=400, deadline=None)
@given(
    data=st.data(),
    sources=st.integers(min_value=1, max_value=4),
    runs=st.booleans(),
    gaps=st.lists(st.integers(min_value=0, max_value=2), min_size=60, max_size=60),
)
def test_merged_search_equals_reference(
    data: st.DataObject, sources: int, runs: bool, gaps: list[int]
) -> None:
    """A target partition interleaving several source partitions (each in origin order, in long
    runs one after the other as a restore writes them, or mixed), with commit markers between
    records: the merged search finds the reference position for any committed offsets."""
    origins = {p: data.draw(source_offsets, label=f"origins of {p}") for p in range(sources)}
    order = [(p, o) for p in range(sources) for o in origins[p]]
    if not runs:
        # Any interleaving that keeps each source partition's order.
        keys = data.draw(st.lists(st.integers(0, 10**6), min_size=len(order), max_size=len(order)))
        by_partition = {p: iter(origins[p]) for p in range(sources)}
        shuffled = sorted(range(len(order)), key=lambda i: keys[i])
        order = [(order[i][0], next(by_partition[order[i][0]])) for i in shuffled]
    records, target = [], 0
    for index, (partition, origin) in enumerate(order):
        records.append(RestoredRecord(target, "orders", partition, origin))
        target += 1 + gaps[index % len(gaps)]
    committed = {
        p: c
        for p in range(sources)
        if (c := data.draw(st.one_of(st.none(), st.integers(0, 60)), label=f"committed {p}")) is not None
    }
    # The backup's end per source partition: past its last record (or the committed offset).
    ends = {p: max(origins[p], default=-1) + 1 + data.draw(st.integers(0, 3)) for p in range(sources)}
    result = merged_search(source_probe_over(records), 0, target, committed, range(sources), ends)
    expected = reference_position(records, {("orders", p): c for p, c in committed.items()})
    if expected is None:
        assert result is None
    else:
        assert result is not None
        assert result.position == expected
        if result.record_at_position is not None:
            assert result.record_at_position.target_offset == expected
