"""The benchmarks' like-with-like helpers: who runs first in a round (ConsumerPerformance too, in the
backup benchmark), and the median with its range."""

from __future__ import annotations

import pytest

from bench._stats import Turn, first_counts, paired_ratios, rotated, run_schedule, schedule, spread
from bench.bench_backup import CONSUMER_PERF, round_order


def test_over_as_many_rounds_as_sides_each_side_runs_once_in_every_place() -> None:
    sides = ["a", "b", "c", "d", "e"]
    orders = [rotated(sides, round_) for round_ in range(len(sides))]
    assert orders[0] == sides
    assert orders[1] == ["b", "c", "d", "e", "a"]
    for place in range(len(sides)):
        assert sorted(order[place] for order in orders) == sides
    assert rotated(sides, 7) == rotated(sides, 2)
    assert rotated([], 3) == []


def test_consumer_performance_takes_its_turn_in_the_backup_rounds() -> None:
    firsts = [round_order(["zstd", "lz4", "none"], attempt)[0] for attempt in range(4)]
    assert firsts == [CONSUMER_PERF, "zstd", "lz4", "none"]
    # With one variant the two simply swap places every round.
    assert [round_order(["backup"], attempt) for attempt in range(2)] == [
        [CONSUMER_PERF, "backup"],
        ["backup", CONSUMER_PERF],
    ]


def test_spread_is_the_median_and_the_range() -> None:
    found = spread([3.0, 1.0, 10.0, 2.0, 4.0])
    assert (found.median, found.low, found.high, found.count) == (3.0, 1.0, 10.0, 5)
    assert spread([1.0, 2.0]).median == 1.5
    assert found.format(1) == "3.0 (1.0-10.0)"
    assert spread([5.0]).format() == "5"
    with pytest.raises(ValueError, match="no values"):
        spread([])


def test_paired_ratios_pair_the_runs_of_one_round() -> None:
    assert paired_ratios([2.0, 3.0], [4.0, 1.0]) == [0.5, 3.0]
    with pytest.raises(ValueError, match="not one pair per round"):
        paired_ratios([1.0], [1.0, 2.0])


def test_a_schedule_warms_up_each_side_once_then_rotates_the_rounds() -> None:
    turns = schedule(["a", "b", "c"], 3)
    assert turns[:3] == [Turn("a", None), Turn("b", None), Turn("c", None)]
    assert [(turn.side, turn.round_) for turn in turns[3:6]] == [("a", 0), ("b", 0), ("c", 0)]
    assert [turn.side for turn in turns[6:9]] == ["b", "c", "a"]
    assert first_counts(turns) == {"a": 1, "b": 1, "c": 1}
    # Over an odd number of rounds two sides cannot go first as often: the count shows it.
    assert first_counts(schedule(["x", "y"], 5)) == {"x": 3, "y": 2}
    assert schedule(["a", "b"], 1, warm_up=False) == [Turn("a", 0), Turn("b", 0)]


def test_a_schedule_runs_after_a_sync_each_time_and_keeps_only_the_measured_runs() -> None:
    log: list[str] = []

    def run(turn: Turn[str]) -> str:
        log.append(f"run {turn.side}")
        return f"{turn.side}{turn.round_}"

    found = run_schedule(schedule(["a", "b"], 2), run, sync=lambda: log.append("sync"))
    assert log == ["sync", "run a", "sync", "run b"] * 2 + ["sync", "run b", "sync", "run a"]
    assert found == {"a": ["a0", "a1"], "b": ["b0", "b1"]}
