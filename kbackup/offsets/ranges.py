"""Offset ranges: the pure heart of the mapping, with no Spark and no Kafka.

A range says "the records at source offsets ``source_start..source_end`` of
one source partition are, one for one and in order, the records at target
offsets ``target_start..target_end`` of one target partition". Both ends are
**inclusive** (``end`` is the offset of the last record of the run), on both
sides, so a range of one record has ``start == end`` and the two sides of a
range always have the same length.

A range is a maximal run in which the source offset and the target offset
both step by exactly 1 within one (source topic, source partition, target
topic, target partition). Any hole, on either side, starts a new range:
compaction, transaction markers, aborted records, records of another source
partition interleaved by repartitioning, records without origin headers.
So a set of ranges describes every restored record exactly (lossless), and
the number of ranges grows with the holes, not with the records.

This module also answers the question the reset stage asks of a mapping
(see ``shared/reference/offset-translation.md``): given a group's committed
source offsets, the target position of each target partition.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from kbackup.core.types import TopicPartitionKey

#: One restored record as the range builder sees it:
#: (target offset, source topic, source partition, source offset).
OriginRecord = tuple[int, str, int, int]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """A run of restored records; ``*_end`` are inclusive (the last record's offset)."""

    source_topic: str
    source_partition: int
    target_topic: str
    target_partition: int
    source_start: int
    source_end: int
    target_start: int
    target_end: int

    def __post_init__(self) -> None:
        if self.source_end - self.source_start != self.target_end - self.target_start:
            raise ValueError(f"the two sides of a range differ in length: {self}")
        if self.target_end < self.target_start or min(self.source_start, self.target_start) < 0:
            raise ValueError(f"not a range of one or more records at offsets >= 0: {self}")

    @property
    def records(self) -> int:
        """How many records the range holds."""
        return self.target_end - self.target_start + 1

    @property
    def source(self) -> TopicPartitionKey:
        return (self.source_topic, self.source_partition)

    @property
    def target(self) -> TopicPartitionKey:
        return (self.target_topic, self.target_partition)

    def continues_with(self, other: OffsetRange) -> bool:
        """Whether ``other`` starts right after this range on both sides (the two are one run)."""
        return (
            other.target_start == self.target_end + 1
            and other.source_start == self.source_end + 1
            and other.source_partition == self.source_partition
            and other.target_partition == self.target_partition
            and other.source_topic == self.source_topic
            and other.target_topic == self.target_topic
        )


def build_ranges(
    target_topic: str, target_partition: int, records: Iterable[OriginRecord]
) -> Iterator[OffsetRange]:
    """Fold the restored records of one target partition, in target-offset order, into ranges.

    One pass, constant memory: only the open range is held. ``records`` must
    hold only the restored records (those of the wanted source cluster) and
    come in strictly increasing target offset; anything else is a bug in
    the caller and raises ``ValueError``.
    """
    open_range: list[int] | None = None  # [source_start, source_end, target_start, target_end]
    open_source: TopicPartitionKey = ("", -1)
    for target_offset, source_topic, source_partition, source_offset in records:
        if open_range is not None:
            if target_offset <= open_range[3]:
                raise ValueError(
                    f"target offsets of {target_topic}[{target_partition}] must increase: "
                    f"{target_offset} after {open_range[3]}"
                )
            if (
                target_offset == open_range[3] + 1
                and source_offset == open_range[1] + 1
                and (source_topic, source_partition) == open_source
            ):
                open_range[1] = source_offset
                open_range[3] = target_offset
                continue
            yield _range(open_source, target_topic, target_partition, open_range)
        open_range = [source_offset, source_offset, target_offset, target_offset]
        open_source = (source_topic, source_partition)
    if open_range is not None:
        yield _range(open_source, target_topic, target_partition, open_range)


def _range(
    source: TopicPartitionKey, target_topic: str, target_partition: int, bounds: list[int]
) -> OffsetRange:
    return OffsetRange(source[0], source[1], target_topic, target_partition, *bounds)


def target_order(item: OffsetRange) -> tuple[str, int, int]:
    return (item.target_topic, item.target_partition, item.target_start)


def merge_touching(ranges: Iterable[OffsetRange]) -> list[OffsetRange]:
    """Sort ranges by target position and join those that continue each other.

    Pieces of one run cut apart by where the scan split its work (Spark
    partitions, Arrow batches) are joined back; joining two ranges that
    continue each other on both sides is always right, since together they
    are one run by definition. Ranges that overlap on the target side would
    mean a record was read twice, and raise ``ValueError``.
    """
    merged: list[OffsetRange] = []
    for item in sorted(ranges, key=target_order):
        if merged:
            last = merged[-1]
            if last.target == item.target and item.target_start <= last.target_end:
                raise ValueError(f"overlapping target ranges: {last} and {item}")
            if last.continues_with(item):
                merged[-1] = OffsetRange(
                    last.source_topic,
                    last.source_partition,
                    last.target_topic,
                    last.target_partition,
                    last.source_start,
                    item.source_end,
                    last.target_start,
                    item.target_end,
                )
                continue
        merged.append(item)
    return merged


@dataclass(frozen=True)
class TargetPosition:
    """Where a group resumes in one target partition, and what that costs.

    ``offset`` follows ``offset-translation.md``: the smallest target offset
    of a restored record whose source offset is at or after the group's
    committed offset for that record's source partition; if there is none,
    one past the last restored record.
    """

    target_topic: str
    target_partition: int
    offset: int
    #: Restored records at or after ``offset`` that the group had already
    #: processed on the source. 0 for an order-preserving restore; with
    #: repartitioning, the records interleaved from other source partitions.
    reprocessed: int
    #: Restored records before ``offset`` that the group had not processed (data loss; always 0).
    skipped: int
    #: (source topic, source partition, source offset) of the restored record at ``offset``;
    #: None when ``offset`` is past the last one. The reset plan's expected origin.
    origin: tuple[str, int, int] | None = None


class PartitionIndex:
    """The ranges of one target partition, indexed for position look-ups.

    For each source partition, its ranges in target order; when they also
    rise on the source side (any restore that keeps order), a look-up is a
    binary search; otherwise (duplicates, a restore run twice) every range
    is checked, which is still exact.
    """

    def __init__(self, target: TopicPartitionKey, ranges: Iterable[OffsetRange]) -> None:
        self.target = target
        self.by_source: dict[TopicPartitionKey, list[OffsetRange]] = {}
        for item in sorted(ranges, key=target_order):
            if item.target != target:
                raise ValueError(f"range {item} is not in {target[0]}[{target[1]}]")
            self.by_source.setdefault(item.source, []).append(item)
        self._source_ends: dict[TopicPartitionKey, list[int] | None] = {}
        for source, items in self.by_source.items():
            ends = [item.source_end for item in items]
            rising = all(a.source_end < b.source_start for a, b in pairwise(items))
            self._source_ends[source] = ends if rising else None
        self.end = max(
            (item.target_end + 1 for items in self.by_source.values() for item in items), default=0
        )

    def _first_at_or_after(self, source: TopicPartitionKey, committed: int) -> tuple[int, int] | None:
        """(target offset, source offset) of the first record of ``source`` at or after ``committed``."""
        items = self.by_source.get(source, [])
        ends = self._source_ends.get(source)
        if ends is not None:
            index = bisect.bisect_left(ends, committed)
            candidates = items[index : index + 1]
        else:
            candidates = [item for item in items if item.source_end >= committed]
        best: tuple[int, int] | None = None
        for item in candidates:
            step = max(0, committed - item.source_start)
            if best is None or item.target_start + step < best[0]:
                best = (item.target_start + step, item.source_start + step)
        return best

    def position_of_source(self, source: TopicPartitionKey, committed: int) -> TargetPosition:
        """The position for one source partition alone, ignoring the others in this partition."""
        found = self._first_at_or_after(source, committed)
        offset = self.end if found is None else found[0]
        items = self.by_source.get(source, [])
        return TargetPosition(
            self.target[0],
            self.target[1],
            offset,
            sum(_count_processed_at_or_after(item, committed, offset) for item in items),
            sum(_count_unprocessed_before(item, committed, offset) for item in items),
        )

    def position(
        self, committed: Mapping[TopicPartitionKey, int], sources: Collection[TopicPartitionKey] | None = None
    ) -> TargetPosition:
        """The target position for a group with these committed source offsets.

        A source partition missing from ``committed`` counts as "nothing
        processed" (committed offset 0), as the reference asks. ``sources``
        limits the look-up to some source partitions (the reset stage plans
        one source topic at a time; records of other topics in the same
        target partition are another row's business); None: all of them.
        """
        chosen = [source for source in self.by_source if sources is None or source in sources]
        best: tuple[int, tuple[str, int, int]] | None = None
        for source in chosen:
            found = self._first_at_or_after(source, committed.get(source, 0))
            if found is not None and (best is None or found[0] < best[0]):
                best = (found[0], (source[0], source[1], found[1]))
        if best is not None:
            offset = best[0]
        else:  # every record of the chosen sources was processed: one past the last of them
            offset = max((item.target_end + 1 for s in chosen for item in self.by_source[s]), default=0)
        reprocessed, skipped = self.cost_at(offset, committed, chosen)
        return TargetPosition(
            self.target[0], self.target[1], offset, reprocessed, skipped, best[1] if best else None
        )

    def cost_at(
        self, offset: int, committed: Mapping[TopicPartitionKey, int], sources: Collection[TopicPartitionKey]
    ) -> tuple[int, int]:
        """(reprocessed, skipped) for a group resuming at target ``offset``, whatever chose it:
        restored records of ``sources`` at or after it that the group had processed, and before it
        that the group had not. The audit of a committed position."""
        reprocessed = skipped = 0
        for source in sources:
            done = committed.get(source, 0)
            for item in self.by_source.get(source, []):
                reprocessed += _count_processed_at_or_after(item, done, offset)
                skipped += _count_unprocessed_before(item, done, offset)
        return reprocessed, skipped


def _count_processed_at_or_after(item: OffsetRange, committed: int, position: int) -> int:
    """Records of the range with source offset < committed and target offset >= position."""
    last_processed_target = item.target_start + (min(committed - 1, item.source_end) - item.source_start)
    first = max(item.target_start, position)
    return max(0, last_processed_target - first + 1)


def _count_unprocessed_before(item: OffsetRange, committed: int, position: int) -> int:
    """Records of the range with source offset >= committed and target offset < position."""
    first_unprocessed_target = item.target_start + max(0, committed - item.source_start)
    last = min(item.target_end, position - 1)
    return max(0, last - first_unprocessed_target + 1)


def index_by_target(ranges: Sequence[OffsetRange]) -> dict[TopicPartitionKey, PartitionIndex]:
    """A look-up index per target partition."""
    grouped: dict[TopicPartitionKey, list[OffsetRange]] = {}
    for item in ranges:
        grouped.setdefault(item.target, []).append(item)
    return {target: PartitionIndex(target, items) for target, items in grouped.items()}
