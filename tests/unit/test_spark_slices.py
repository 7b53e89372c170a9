"""How a Spark backup cuts an increment into tasks, and joins the slices back (pure functions)."""

from __future__ import annotations

import pytest

from kbackup.backup.plan import PartitionPlan
from kbackup.backup.units import MIN_TASK_RECORDS, cut_slices, merge_slices
from kbackup.core.spark import engine_master
from kbackup.format.manifest import PartitionEntry
from tests.support.manifest_entries import segment


def plan(
    partition: int, start: int, end: int, *, topic: str = "t", fetch: int | None = None
) -> PartitionPlan:
    return PartitionPlan(topic, partition, start, 0, start if fetch is None else fetch, end)


def test_a_large_partition_is_cut_into_consecutive_slices_of_at_most_the_task_size() -> None:
    tasks = cut_slices([plan(0, 0, 250_000)], tasks=2, task_records=100_000)
    ranges = sorted((s.start, s.end) for members in tasks for s in members)
    assert ranges == [(0, 100_000), (100_000, 200_000), (200_000, 250_000)]
    assert all(len(members) == 1 for members in tasks)


def test_small_partitions_share_a_task_but_no_task_holds_one_partition_twice() -> None:
    plans = [plan(0, 0, 150_000), *(plan(p, 10, 10 + 20_000) for p in range(1, 6))]
    tasks = cut_slices(plans, tasks=2, task_records=100_000)
    for members in tasks:
        assert len({s.key for s in members}) == len(members)
        assert sum(s.end - s.start for s in members) <= 100_000
    covered = sorted((s.partition, s.start, s.end) for members in tasks for s in members)
    assert covered == [(0, 0, 100_000), (0, 100_000, 150_000)] + [(p, 10, 20_010) for p in range(1, 6)]
    # 250,000 offsets in tasks of at most 100,000: three tasks, not one per partition.
    assert len(tasks) == 3


def test_the_task_size_shrinks_to_use_every_slot_but_not_below_the_minimum() -> None:
    tasks = cut_slices([plan(0, 0, 400_000)], tasks=4, task_records=2_000_000)
    assert sorted(s.end - s.start for members in tasks for s in members) == [100_000] * 4
    small = cut_slices([plan(0, 0, 60_000)], tasks=8, task_records=2_000_000)
    assert [s.end - s.start for members in small for s in members] == [MIN_TASK_RECORDS, 10_000]


def test_nothing_to_copy_makes_no_task_and_fetching_starts_at_the_log_start() -> None:
    assert cut_slices([plan(0, 5, 5), plan(1, 0, 0)], tasks=2, task_records=10) == []
    [[only]] = cut_slices([plan(0, 0, 70_000, fetch=30_000)], tasks=1, task_records=100_000)
    assert (only.start, only.end) == (30_000, 70_000)


def _entry(start: int, end: int) -> PartitionEntry:
    return PartitionEntry(
        topic="t", partition=0, start_offset=start, end_offset=end, log_start_offset=0, record_count=0
    )


def test_slices_join_into_one_entry_from_the_chains_start() -> None:
    joined = merge_slices(
        plan(0, 0, 300, fetch=100),
        [_entry(200, 300), _entry(100, 200)],
        [segment(210, 299, 210, 299), segment(100, 199, 100, 199)],
    )
    assert (joined.start_offset, joined.end_offset, joined.record_count) == (0, 300, 190)
    assert (joined.first_offset, joined.last_offset) == (100, 299)
    assert (joined.min_timestamp, joined.max_timestamp) == (100, 299)


def test_a_gap_between_slices_is_refused() -> None:
    with pytest.raises(AssertionError, match="a slice starts at 250"):
        merge_slices(plan(0, 0, 300), [_entry(0, 200), _entry(250, 300)], [])


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        ("local", "local[1,4]"),
        ("local[2]", "local[2,4]"),
        ("local[*]", "local[*,4]"),
        ("local[2,3]", "local[2,3]"),
        ("spark://127.0.0.1:7077", "spark://127.0.0.1:7077"),
        ("yarn", "yarn"),
    ],
)
def test_a_local_master_retries_tasks_as_a_cluster_does(master: str, expected: str) -> None:
    assert engine_master(master) == expected
