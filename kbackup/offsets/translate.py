"""Offset translation, as ``shared/reference/offset-translation.md`` defines it. Pure functions.

Two things live here (the reference's formula itself, computed by brute force, is a test
oracle: ``tests/support/oracles.py``):

- :func:`measure`: how many records a position skips (data loss) or makes
  the group re-read.
- :func:`search_position`: the header-based translation without a scan. When
  a target partition holds one source partition in order, the origin offset
  of the first restored record at or after target offset ``t`` never
  decreases as ``t`` grows, so the position is found by a binary search
  that reads one record per probe: about log2(n) small fetches.

Positions from a mapping's ranges (repartitioned restores) are
:meth:`kbackup.offsets.ranges.PartitionIndex.position`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kbackup.core.types import TopicPartitionKey


@dataclass(frozen=True, order=True, slots=True)
class RestoredRecord:
    """A record of the restore in a target partition: where it is now, and where it came from."""

    target_offset: int
    source_topic: str
    source_partition: int
    source_offset: int

    @property
    def source(self) -> TopicPartitionKey:
        return (self.source_topic, self.source_partition)


@dataclass(frozen=True)
class Measurement:
    """What committing ``position`` does to a group, counted over the restored records."""

    #: Records the group had not processed on the source that it will never see (data loss).
    skipped: int
    #: Records the group had already processed on the source that it will see again.
    reprocessed: int


def measure(
    records: Iterable[RestoredRecord], committed: Mapping[TopicPartitionKey, int], position: int
) -> Measurement:
    skipped = reprocessed = 0
    for record in records:
        processed = record.source_offset < committed.get(record.source, 0)
        if not processed and record.target_offset < position:
            skipped += 1
        elif processed and record.target_offset >= position:
            reprocessed += 1
    return Measurement(skipped=skipped, reprocessed=reprocessed)


@dataclass(frozen=True)
class SearchResult:
    #: The target offset to commit.
    position: int
    #: The restored record found at the position (None when the position is past the last one).
    record_at_position: RestoredRecord | None
    #: How many probes (single-record fetches) the search made.
    probes: int


#: ``probe(t)`` returns the first restored record of the source partition being
#: searched at target offset >= t (skipping transaction markers, foreign
#: records and records of other source partitions), or None if there is none below the end.
Probe = Callable[[int], RestoredRecord | None]


#: Interpolation probes a search makes before it falls back to plain halving.
MAX_GUESSES = 4


def _slope(first: RestoredRecord, second: RestoredRecord) -> float | None:
    """Target offsets per origin offset between two records of one source partition."""
    if second.source_offset <= first.source_offset:
        return None
    return (second.target_offset - first.target_offset) / (second.source_offset - first.source_offset)


def _guess(
    low_record: RestoredRecord,
    high_record: RestoredRecord | None,
    committed_offset: int,
    pace: float | None = None,
) -> int:
    """Where the record just below ``committed_offset`` should be, if origin and target offsets
    advance together as they did between the two records known (else at ``pace``, else one for one)."""
    steps = committed_offset - 1 - low_record.source_offset
    slope = _slope(low_record, high_record) if high_record is not None else None
    if slope is None:
        slope = pace if pace is not None else 1.0
    return low_record.target_offset + int(steps * slope)


def search_position(
    probe: Probe, start: int, end: int, committed_offset: int, *, learn_pace: bool = False
) -> SearchResult:
    """Search for the first restored record with origin offset >= ``committed_offset``.

    Valid when the restored records of the source partition appear in the
    target partition in origin-offset order (restore keeps order within a
    source partition), which makes ``probe(t).source_offset`` non-decreasing
    in ``t``. ``[start, end)`` is the target partition's offset range.
    Returns the reference position: that record's target offset, or the last
    restored record's target offset + 1 if every record is below
    ``committed_offset`` (the group had processed everything restored).

    The first probes aim where the record just below the committed offset
    should be, interpolating between the records found so far: a restore
    without holes puts it exactly there, and then the search ends with two
    probes a record apart (one fetch). Any probe inside ``[low, high)`` keeps
    the search correct; after ``MAX_GUESSES`` guesses it halves, so it never
    needs more than ``MAX_GUESSES`` probes beyond a plain binary search.

    With ``learn_pace`` the second restored record is probed too, and the first guesses advance
    at the pace of those two: where the source partition shares its target partition with others
    (a repartitioned restore), one for one would aim far past the record.
    """
    probes = 0
    low, high = start, end
    candidate: RestoredRecord | None = None
    below: RestoredRecord | None = None  # the greatest record known with origin < committed_offset
    # The first restored record first: groups that processed nothing of what the backup holds (committed
    # at 0, or below the first backed-up offset) are common, and then one probe answers.
    if low < high:
        first = probe(low)
        probes += 1
        if first is None or first.target_offset >= high:
            high = low  # nothing restored at all
        elif first.source_offset >= committed_offset:
            return SearchResult(position=first.target_offset, record_at_position=first, probes=probes)
        else:
            low = first.target_offset + 1
            below = first
    pace: float | None = None
    if learn_pace and below is not None and low < high:
        second = probe(low)
        probes += 1
        if second is None or second.target_offset >= high:
            high = low  # the first record is the only one
        elif second.source_offset >= committed_offset:
            return SearchResult(position=second.target_offset, record_at_position=second, probes=probes)
        else:
            pace = _slope(below, second)
            low = second.target_offset + 1
            below = second
    guesses = 0
    # Invariant: the answer is in [low, high), or it is `candidate`, or there is none.
    while low < high:
        if below is not None and guesses < MAX_GUESSES:
            guesses += 1
            middle = min(max(_guess(below, candidate, committed_offset, pace), low), high - 1)
        else:
            middle = (low + high) // 2
        record = probe(middle)
        probes += 1
        if record is None or record.target_offset >= high:
            high = middle  # no restored record in [middle, high)
        elif record.source_offset >= committed_offset:
            candidate = record  # nothing restored in [middle, record), so the answer is before middle or this
            high = middle
        else:
            low = record.target_offset + 1  # order: everything up to this record has origin < C
            below = record
    if candidate is not None:
        return SearchResult(position=candidate.target_offset, record_at_position=candidate, probes=probes)
    if below is not None:
        # Every shrink of `high` above `below` found no restored record: it is the last one.
        return SearchResult(position=below.target_offset + 1, record_at_position=None, probes=probes)
    last = last_record_before(probe, start, end)
    probes += last.probes
    position = start if last.record is None else last.record.target_offset + 1
    return SearchResult(position=position, record_at_position=None, probes=probes)


@dataclass(frozen=True)
class _LastRecord:
    record: RestoredRecord | None
    probes: int


def last_record_before(probe: Probe, start: int, end: int) -> _LastRecord:
    """The restored record with the greatest target offset in ``[start, end)``, by binary search."""
    probes = 0
    best: RestoredRecord | None = None
    low, high = start, end
    while low < high:
        middle = (low + high) // 2
        record = probe(middle)
        probes += 1
        if record is None or record.target_offset >= end:
            high = middle
        else:
            best = record
            low = record.target_offset + 1
    return _LastRecord(record=best, probes=probes)


#: ``probe(t, source_partition, limit)``: the first restored record of that source partition (of any,
#: with None) at target offset >= t and below ``limit`` (None: the end), or None.
SourceProbe = Callable[[int, int | None, int | None], RestoredRecord | None]


def merged_search(
    probe: SourceProbe,
    start: int,
    end: int,
    committed: Mapping[int, int],
    sources: Iterable[int],
    processed_to: Mapping[int, int] | None = None,
) -> SearchResult | None:
    """The reference position in a target partition that interleaves several source partitions
    (a repartitioned restore): the earliest restored record the group had not processed, of any
    source partition, else one past the last restored record; None if there is no restored record.

    Each source partition's records are still in origin order, so :func:`search_position` finds its
    first unprocessed record with probes that skip the others'. Each search looks only below the
    earliest record found so far: a restore writes the source partitions one after the other, so a
    target partition holds them in long runs, and a search for a later one from the start would
    read every run before it. A source partition whose ``committed`` offset reaches its
    ``processed_to`` offset (the backup's end: the group had processed every record of it) needs no
    search. ``committed`` lacks a partition the group never committed on: nothing processed.
    """
    bound = end
    earliest: SearchResult | None = None
    probes = 0
    for partition in sources:
        done = committed.get(partition, 0)
        last = (processed_to or {}).get(partition)
        if last is not None and done >= last:
            continue  # every restored record of it was processed: none can be the position
        result = search_position(_restricted(probe, partition, bound), start, bound, done, learn_pace=True)
        probes += result.probes
        if result.record_at_position is not None:
            earliest, bound = result, result.position
    if earliest is not None:
        return SearchResult(earliest.position, earliest.record_at_position, probes)
    found = last_record_before(lambda t: probe(t, None, None), start, end)
    probes += found.probes
    if found.record is None:
        return None
    return SearchResult(found.record.target_offset + 1, None, probes)


def _restricted(probe: SourceProbe, partition: int, limit: int) -> Probe:
    return lambda t: probe(t, partition, limit)
