"""The benchmarks' like-with-like helpers: who runs first in a round (ConsumerPerformance too, in the
backup benchmark), and the median with its range."""

from __future__ import annotations

import pytest

from bench._stats import paired_ratios, rotated, spread
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
