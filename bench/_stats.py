"""Small pure helpers the benchmarks share: who runs first in a round, and median with range."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


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
