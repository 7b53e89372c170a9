"""Record filters: what part of a backup a restore replays (offset ranges and a time window), and
the rules of ``restore.filters`` that drop records of it or turn them into tombstones.

Pure functions: the plan uses them to pick segments, the runner to pick records, both vectorised
over Arrow batches of the record schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from kbackup.core.times import iso_of_ms
from kbackup.format.manifest import SegmentEntry
from kbackup.format.record_match import RecordMatcher


def parse_time_ms(value: Any) -> int:
    """Epoch milliseconds from an int, a string of digits, or an ISO-8601 time (no zone means UTC)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"expected epoch milliseconds or an ISO-8601 time like 2026-11-22T03:15:00Z, got {value!r}"
            ) from None
    else:
        raise ValueError(f"expected epoch milliseconds or an ISO-8601 time, got {value!r}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


@dataclass(frozen=True)
class RecordFilter:
    """Records with ``offset_start <= offset < offset_end`` and ``time_start <= timestamp < time_end``."""

    offset_start: int
    offset_end: int
    time_start: int | None = None
    time_end: int | None = None

    @property
    def has_time_window(self) -> bool:
        return self.time_start is not None or self.time_end is not None

    def segment_overlaps(self, segment: SegmentEntry) -> bool:
        """Whether any record of the segment can pass (from the manifest's ranges alone)."""
        return _overlaps(
            segment.first_offset, segment.last_offset, self.offset_start, self.offset_end
        ) and _overlaps(segment.min_timestamp, segment.max_timestamp, self.time_start, self.time_end)

    def segment_inside(self, segment: SegmentEntry) -> bool:
        """Whether every record of the segment passes (its count is then exact without reading it)."""
        return _inside(
            segment.first_offset, segment.last_offset, self.offset_start, self.offset_end
        ) and _inside(segment.min_timestamp, segment.max_timestamp, self.time_start, self.time_end)

    def mask(self, offsets: pa.Array, timestamps: pa.Array, offset_start: int) -> pa.Array | None:
        """Boolean mask of the passing records of a batch, or None when all pass.

        ``offset_start`` may be above ``self.offset_start`` (a resumed restore).
        """
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        conditions = []
        if first < offset_start:
            conditions.append(pc.greater_equal(offsets, offset_start))
        if last >= self.offset_end:
            conditions.append(pc.less(offsets, self.offset_end))
        if self.has_time_window:
            bounds = pc.min_max(timestamps)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if self.time_start is not None and low < self.time_start:
                conditions.append(pc.greater_equal(timestamps, self.time_start))
            if self.time_end is not None and high >= self.time_end:
                conditions.append(pc.less(timestamps, self.time_end))
        if not conditions:
            return None
        mask = conditions[0]
        for condition in conditions[1:]:
            mask = pc.and_(mask, condition)
        return mask

    def count(self, offsets: pa.Array, timestamps: pa.Array, offset_start: int | None = None) -> int:
        """How many records of a batch pass."""
        if len(offsets) == 0:
            return 0
        mask = self.mask(offsets, timestamps, self.offset_start if offset_start is None else offset_start)
        if mask is None:
            return len(offsets)
        return int(pc.sum(mask).as_py() or 0)


def _overlaps(low: int, high: int, start: int | None, end: int | None) -> bool:
    """Whether ``low..high`` (inclusive) meets ``start..end`` (end exclusive; None: unbounded)."""
    return (start is None or high >= start) and (end is None or low < end)


def _inside(low: int, high: int, start: int | None, end: int | None) -> bool:
    """Whether ``low..high`` (inclusive) lies within ``start..end`` (end exclusive; None: unbounded)."""
    return (start is None or low >= start) and (end is None or high < end)


# ---------------------------------------------------------------------------
# Filter rules (``restore.filters``): records of the selection dropped or turned into tombstones.

FilterAction = Literal["drop", "tombstone"]


@dataclass(frozen=True)
class FilterRule:
    """One rule of ``restore.filters`` as a run applies it: the records ``matcher`` matches (any
    record when it is None) with ``time_start <= timestamp < time_end`` are dropped, or produced
    with a null value (key, own headers and origin headers kept)."""

    #: The rule's place in ``restore.filters``, from 1 (a flag's rule follows the file's).
    number: int
    action: FilterAction
    matcher: RecordMatcher | None
    time_start: int | None = None
    time_end: int | None = None

    def may_touch(self, segment: SegmentEntry) -> bool:
        """Whether the rule can match a record of the segment (from the manifest's times alone)."""
        return _overlaps(segment.min_timestamp, segment.max_timestamp, self.time_start, self.time_end)

    def matches(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        """The records of a batch the rule matches (its columns of the record schema, by name: the
        count before a run reads only those it needs)."""
        timestamps = batch.column("timestamp")
        conditions: list[pa.Array] = []
        if self.matcher is not None:
            conditions.append(self.matcher.mask(batch))
        if self.time_start is not None:
            conditions.append(pc.greater_equal(timestamps, self.time_start))
        if self.time_end is not None:
            conditions.append(pc.less(timestamps, self.time_end))
        if not conditions:
            return pa.array([True] * batch.num_rows, pa.bool_())
        mask = conditions[0]
        for condition in conditions[1:]:
            mask = pc.and_(mask, condition)
        # A null (no key) never matches: only a True drops or tombstones a record.
        return pc.fill_null(mask, False)

    def describe(self) -> str:
        """What the rule matches, with counts of keys and headers, never the keys themselves."""
        parts = [self.matcher.describe()] if self.matcher is not None else []
        if self.time_start is not None or self.time_end is not None:
            start = "-" if self.time_start is None else iso_of_ms(self.time_start)
            end = "-" if self.time_end is None else iso_of_ms(self.time_end)
            parts.append(f"timestamps in [{start}, {end})")
        return f"rule {self.number}: {self.action} " + (", ".join(parts) or "every record")


@dataclass(frozen=True)
class FilteredBatch:
    """A batch after the filter rules: the records kept (tombstones with a null value), and counts."""

    batch: pa.RecordBatch
    dropped: int = 0
    tombstoned: int = 0


def apply_rules(rules: Sequence[FilterRule], batch: pa.RecordBatch) -> FilteredBatch:
    """Drop and tombstone the records of ``batch`` the rules match; a record that a drop rule and
    a tombstone rule both match is dropped (the stronger of the two)."""
    if not rules or batch.num_rows == 0:
        return FilteredBatch(batch)
    drop = _any_match([rule for rule in rules if rule.action == "drop"], batch)
    tombstone = _any_match([rule for rule in rules if rule.action == "tombstone"], batch)
    dropped = 0 if drop is None else int(pc.sum(drop).as_py() or 0)
    if dropped:
        assert drop is not None
        keep = pc.invert(drop)
        batch = batch.filter(keep)
        if tombstone is not None:
            tombstone = tombstone.filter(keep)
    tombstoned = 0 if tombstone is None else int(pc.sum(tombstone).as_py() or 0)
    if tombstoned:
        assert tombstone is not None
        index = batch.schema.get_field_index("value")
        values = pc.if_else(tombstone, pa.scalar(None, pa.binary()), batch.column(index))
        batch = batch.set_column(index, batch.schema.field(index), values)
    return FilteredBatch(batch, dropped=dropped, tombstoned=tombstoned)


def _any_match(rules: Sequence[FilterRule], batch: pa.RecordBatch) -> pa.BooleanArray | None:
    if not rules:
        return None
    mask = rules[0].matches(batch)
    for rule in rules[1:]:
        mask = pc.or_(mask, rule.matches(batch))
    return mask
