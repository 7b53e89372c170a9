"""``strategy: timestamp``'s search (kbackup.reset.timestamp_search) over simulated partitions.

A partition here is a list of entries in offset order: data records, transaction markers and
aborted records, each with a timestamp. ListOffsets' answer is the first entry of any kind stamped
at or after the time; the reader returns what a read_committed consumer sees (data records only).
The position wanted is what reading every data record one by one finds."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from kbackup.core.kafka import PartitionReader
from kbackup.reset.timestamp_search import (
    RecordRuns,
    StampedRecord,
    TimestampSearch,
    first_stamped_at_or_after,
)

Kind = Literal["data", "marker", "aborted"]
#: When the restore committed its transactions: far after every record's own timestamp.
NOW = 1_000_000


@dataclass(frozen=True)
class Entry:
    timestamp: int
    kind: Kind = "data"


class Partition:
    """Entries at offsets 0..n-1; reads return up to ``batch`` data records, and are counted."""

    def __init__(self, entries: list[Entry], batch: int = 3) -> None:
        self.entries = entries
        self.batch = batch
        self.reads: list[int] = []
        self._data = [StampedRecord(o, e.timestamp) for o, e in enumerate(entries) if e.kind == "data"]

    @property
    def end(self) -> int:
        return len(self.entries)

    def data(self) -> list[StampedRecord]:
        return self._data

    def run(self, offset: int) -> list[StampedRecord]:
        """The data records a read from ``offset`` returns."""
        first = bisect.bisect_left(self._data, offset, key=lambda r: r.offset)
        return self._data[first : first + self.batch]

    def __call__(self, offset: int) -> list[StampedRecord]:
        self.reads.append(offset)
        return self.run(offset)

    def list_offsets(self, timestamp: int) -> int:
        """Kafka's answer: the first offset (record, marker or aborted record) stamped >= the time."""
        return next((o for o, e in enumerate(self.entries) if e.timestamp >= timestamp), -1)

    def linear(self, start: int, timestamp: int) -> int:
        """Reading the data records one by one from ``start``."""
        return next(
            (r.offset for r in self.data() if r.offset >= start and r.timestamp >= timestamp), self.end
        )

    def search(self, timestamp: int) -> TimestampSearch:
        listed = self.list_offsets(timestamp)
        return first_stamped_at_or_after(self, self.end if listed < 0 else listed, self.end, timestamp)


def transactions(stamps: list[int], per_transaction: int) -> list[Entry]:
    """Records restored in transactions of ``per_transaction`` records, each ended by a commit marker
    stamped NOW."""
    entries: list[Entry] = []
    for first in range(0, len(stamps), per_transaction):
        entries.extend(Entry(stamp) for stamp in stamps[first : first + per_transaction])
        entries.append(Entry(NOW, "marker"))
    return entries


def test_without_markers_the_records_from_list_offsets_answer_it_in_one_read() -> None:
    partition = Partition([Entry(100 + 10 * i) for i in range(50)], batch=1)
    found = partition.search(255)
    assert found.position == 16 == partition.list_offsets(255)
    assert found.record == StampedRecord(16, 260)
    assert found.probes == 1
    assert partition.reads == [16]


def test_a_commit_marker_stamped_at_the_restore_is_not_where_the_group_lands() -> None:
    """10 transactions of 25 records: ListOffsets answers with the first marker (offset 25); the
    record stamped T is record 180, at offset 180 + 7 markers before it."""
    partition = Partition(transactions([1000 + i for i in range(250)], 25), batch=10)
    assert partition.list_offsets(1180) == 25
    found = partition.search(1180)
    assert found.position == 187 == partition.linear(0, 1180)
    assert found.record == StampedRecord(187, 1180)
    assert not found.out_of_order
    assert found.probes <= 2 + math.log2(partition.end - 25)


def test_aborted_records_and_markers_stamped_after_the_time_are_passed_over() -> None:
    """An aborted transaction whose records are stamped after T (another producer's clock): ListOffsets
    answers with its first record, which a read_committed consumer never sees."""
    entries = [Entry(1000 + i) for i in range(10)]  # offsets 0-9
    entries += [Entry(5000, "aborted")] * 4 + [Entry(NOW, "marker")]  # 10-13, the abort marker 14
    entries += [Entry(1010 + i) for i in range(10)]  # 15-24
    partition = Partition(entries, batch=2)
    assert partition.list_offsets(1012) == 10
    found = partition.search(1012)
    assert found.position == 17 == partition.linear(0, 1012)
    assert found.record == StampedRecord(17, 1012)
    # The aborted records' own time: no record a consumer sees is stamped so: the end.
    assert partition.search(5000).position == partition.end == 25


def test_records_sharing_the_millisecond_land_on_the_first_of_them() -> None:
    """Every record stamped T is read (again): the position is the first of them, even when they
    straddle markers and reads."""
    stamps = [1000] * 7 + [1001] * 9 + [1002] * 6
    partition = Partition(transactions(stamps, 4), batch=3)
    for timestamp in (1000, 1001, 1002):
        found = partition.search(timestamp)
        assert found.position == partition.linear(0, timestamp)
        assert found.record is not None
        assert found.record.timestamp == timestamp
    # Records 0-3 at offsets 0-3, marker 4, records 4-7 at 5-8: the first record stamped 1001 is at 8.
    assert partition.search(1001).position == 8
    assert (partition.entries[7], partition.entries[8]) == (Entry(1000), Entry(1001))


def test_no_record_stamped_at_or_after_the_time_is_the_end() -> None:
    """Only markers are stamped after the time: ListOffsets answers with one, the group goes to the end."""
    partition = Partition(transactions([1000 + i for i in range(30)], 10), batch=4)
    assert partition.list_offsets(2000) == 10
    found = partition.search(2000)
    assert (found.position, found.record) == (partition.end, None)
    assert partition.search(NOW + 1).probes == 0  # ListOffsets found nothing: no read at all


def test_a_search_starting_at_the_end_reads_nothing() -> None:
    partition = Partition([Entry(1)])
    assert first_stamped_at_or_after(partition, 1, 1, 5) == TimestampSearch(1, None, 0, False)
    assert partition.reads == []


def test_out_of_order_timestamps_in_what_was_read_are_still_answered_exactly() -> None:
    """A record stamped >= T followed by older ones, inside the records of a read: the first such is
    the answer, and the search says it saw timestamps out of order."""
    partition = Partition(
        [Entry(NOW, "marker"), Entry(5), Entry(50), Entry(7), Entry(8), Entry(60)], batch=10
    )
    found = partition.search(20)
    assert found.position == 2 == partition.linear(0, 20)
    assert found.out_of_order


def test_out_of_order_timestamps_between_reads_are_the_documented_case() -> None:
    """docs/reset.md: a record stamped >= T that no read covered, followed by records stamped < T,
    can be before the position (here record 3; ListOffsets' answer 0 would re-read instead). The
    position is still a record stamped >= T right after one stamped < T, and never before ListOffsets'."""
    entries = [Entry(NOW, "marker")] + [Entry(10)] * 16
    entries[3] = Entry(25)  # out of order: the records after it are older
    entries[12:] = [Entry(30)] * 5
    partition = Partition(entries, batch=1)
    found = partition.search(20)
    assert partition.linear(0, 20) == 3
    assert found.position == 12
    assert 3 not in partition.reads  # never read: the search could not know
    assert not found.out_of_order  # what it read was in order
    assert partition.entries[11].timestamp < 20 <= partition.entries[12].timestamp


def test_record_runs_remember_what_a_fetch_read() -> None:
    """The Kafka side of the reader: one fetch per read outside what was read before."""
    reader = FakeReader({o: 100 + o for o in range(0, 40) if o % 5 != 4}, end=40, per_fetch=6)
    runs = RecordRuns(cast(PartitionReader, reader), topic="t", partition=0, end_offset=40)
    assert [r.offset for r in runs(0)] == [0, 1, 2, 3, 5, 6]
    assert [r.offset for r in runs(2)] == [2, 3, 5, 6]  # inside the span read: no fetch
    assert runs.fetches == 1
    assert [r.offset for r in runs(7)] == [7, 8, 10, 11, 12, 13]  # past it: one more fetch
    assert runs.fetches == 2
    assert [r.offset for r in runs(38)] == [38]
    assert runs(39) == []  # the span of the last read reaches the end
    assert runs.fetches == 3


class FakeMessage:
    def __init__(self, offset: int, timestamp: int) -> None:
        self._offset = offset
        self._timestamp = timestamp

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)


class FakeReader:
    """PartitionReader.batches over data records at some offsets (the others: markers)."""

    def __init__(self, records: dict[int, int], *, end: int, per_fetch: int) -> None:
        self.records = records
        self.end = end
        self.per_fetch = per_fetch
        self.reached = 0
        self.at_partition_end = False

    def batches(
        self, _topic: str, _partition: int, start: int, end: int, **_: object
    ) -> Iterator[list[FakeMessage]]:
        offsets = [o for o in sorted(self.records) if start <= o < end][: self.per_fetch]
        self.at_partition_end = not offsets or offsets[-1] == max(self.records)
        self.reached = end if self.at_partition_end else offsets[-1] + 1
        if offsets:
            yield [FakeMessage(o, self.records[o]) for o in offsets]


def uniform(low: int, high: int) -> st.SearchStrategy[int]:
    """An integer of [low, high], every one as likely (st.integers draws small ones far more often,
    and small partitions need no search)."""
    return st.sampled_from(range(low, high + 1))


@st.composite
def partitions(draw: st.DrawFn, *, in_order: bool) -> tuple[Partition, int]:
    """A partition of data records, markers and aborted records, and a time to search for. The data
    records' timestamps rise (``in_order``), or rise with some moved by 11-15 ms, or are random."""
    size = draw(uniform(0, 120))
    kinds: list[Kind] = draw(
        st.lists(
            st.sampled_from(["data", "data", "data", "data", "marker", "aborted"]),
            min_size=size,
            max_size=size,
        )
    )
    stamps = sorted(draw(st.lists(uniform(0, 50), min_size=size, max_size=size)))
    order = "sorted" if in_order else draw(st.sampled_from(["jittered", "random"]))
    if order == "jittered":
        moves = draw(st.lists(uniform(-15, 15), min_size=size, max_size=size))
        stamps = [stamp + (move if abs(move) > 10 else 0) for stamp, move in zip(stamps, moves, strict=True)]
    elif order == "random":
        stamps = draw(st.permutations(stamps))
    markers_now = draw(st.booleans()) or draw(st.booleans())
    entries = [
        Entry(NOW if kind == "marker" and markers_now else stamp, kind)
        for stamp, kind in zip(stamps, kinds, strict=True)
    ]
    return Partition(entries, batch=draw(uniform(1, 6))), draw(uniform(0, 52))


@settings(max_examples=200, deadline=None)
@given(partitions(in_order=True))
def test_with_timestamps_in_order_the_search_is_the_linear_scan(case: tuple[Partition, int]) -> None:
    partition, timestamp = case
    found = partition.search(timestamp)
    assert found.position == partition.linear(0, timestamp)
    assert not found.out_of_order
    listed = partition.list_offsets(timestamp)
    distance = partition.end - (partition.end if listed < 0 else listed)
    assert found.probes <= 2 + math.log2(max(distance, 1))


@settings(max_examples=200, deadline=None)
@given(partitions(in_order=False))
def test_with_any_timestamps_the_search_keeps_its_guarantees(case: tuple[Partition, int]) -> None:
    """Never before ListOffsets' answer; on a record stamped >= T right after one stamped < T; every
    record it read before the position stamped < T, and out of order only if those it read were;
    past the linear scan's answer only over a record it did not read, with records stamped < T after
    it."""
    partition, timestamp = case
    found = partition.search(timestamp)
    listed = partition.list_offsets(timestamp)
    start = partition.end if listed < 0 else listed
    assert found.position >= start
    data = {r.offset: r.timestamp for r in partition.data()}
    if found.position < partition.end:
        assert found.record == StampedRecord(found.position, data[found.position])
        assert data[found.position] >= timestamp
    before = [o for o in data if start <= o < found.position]
    if before:
        assert data[max(before)] < timestamp
    seen = {record.offset for offset in partition.reads for record in partition.run(offset)}
    assert all(data[o] < timestamp for o in seen if o < found.position)
    read_stamps = [data[o] for o in sorted(seen)]
    assert found.out_of_order == any(b < a for a, b in itertools.pairwise(read_stamps))
    linear = partition.linear(start, timestamp)
    assert linear == partition.linear(0, timestamp)  # everything before ListOffsets' answer is older
    if found.position != linear:
        assert found.position > linear
        assert linear not in seen
        assert any(data[o] < data[linear] for o in data if linear < o < found.position)
