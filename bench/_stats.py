"""Small helpers the benchmarks share: who runs first in a round, the warm-up and the rounds of a
comparison, and median with range."""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def rotated(items: Sequence[T], round_: int) -> list[T]:
    """``items`` in the order of round ``round_`` (0-based): each round starts one place further on,
    so over ``len(items)`` rounds every item runs once in every place (a load change that lasts a
    while hits each alike instead of always the same one)."""
    if not items:
        return []
    shift = round_ % len(items)
    return [*items[shift:], *items[:shift]]


@dataclass(frozen=True)
class Spread:
    """The median of some runs and their range."""

    median: float
    low: float
    high: float
    count: int

    def format(self, digits: int = 0, suffix: str = "") -> str:
        """``median (low-high)``; only the median when there was one run."""
        value = f"{self.median:,.{digits}f}{suffix}"
        if self.count < 2:
            return value
        return f"{value} ({self.low:,.{digits}f}-{self.high:,.{digits}f})"


def spread(values: Sequence[float]) -> Spread:
    """Median, minimum and maximum of ``values`` (at least one)."""
    if not values:
        raise ValueError("no values")
    return Spread(statistics.median(values), min(values), max(values), len(values))


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """``numerators[i] / denominators[i]``: the ratio of the two runs of each round."""
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} runs against {len(denominators)}: not one pair per round")
    return [numerator / denominator for numerator, denominator in zip(numerators, denominators, strict=True)]


@dataclass(frozen=True)
class Turn(Generic[T]):
    """One run of a comparison: a side, in a round (None: its warm-up, run but not measured)."""

    side: T
    round_: int | None

    @property
    def measured(self) -> bool:
        return self.round_ is not None


def schedule(sides: Sequence[T], rounds: int, *, warm_up: bool = True) -> list[Turn[T]]:
    """Every run of a comparison in order: first (with ``warm_up``) one unmeasured run of each side,
    so no measured run is anyone's first (JIT, page cache, imports, the broker's first requests of a
    kind); then ``rounds`` rounds of one run of each side, in the order ``rotated`` gives each round.
    Over a multiple of ``len(sides)`` rounds every side runs as often in every place."""
    turns = [Turn(side, None) for side in sides] if warm_up else []
    for round_ in range(rounds):
        turns.extend(Turn(side, round_) for side in rotated(sides, round_))
    return turns


def first_counts(turns: Sequence[Turn[T]]) -> dict[T, int]:
    """How many measured rounds each side went first in."""
    counts: dict[T, int] = {}
    seen: set[int] = set()
    for turn in turns:
        counts.setdefault(turn.side, 0)
        if turn.round_ is not None and turn.round_ not in seen:
            seen.add(turn.round_)
            counts[turn.side] += 1
    return counts


def run_schedule(
    turns: Sequence[Turn[T]], run: Callable[[Turn[T]], R], *, sync: Callable[[], None] | None = None
) -> dict[T, list[R]]:
    """Run every turn in order, ``sync`` (``os.sync``) first each time: the last run's dirty pages
    are written back then, not during the next run; nothing is dropped from the page cache. The
    measured results of each side, in round order; the warm-ups' are left out."""
    results: dict[T, list[R]] = {}
    for turn in turns:
        (sync or os.sync)()
        result = run(turn)
        if turn.measured:
            results.setdefault(turn.side, []).append(result)
    return results
