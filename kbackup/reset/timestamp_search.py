"""``strategy: timestamp``: the first record a consumer sees that is stamped at or after a time.

Kafka's ListOffsets by timestamp answers with the first offset ``X`` stamped at or after the time
``T``, counting every offset of the log: transaction markers and aborted records too. A commit
marker is stamped when the transaction commits, so on a target restored with transactions the
first marker is stamped "now" while the records around it keep their original, older timestamps:
``X`` is that marker, and a group moved there would read again every record from it to the ones
stamped ``T`` (Kafka's ``kafka-consumer-groups --to-datetime`` lands there too).

Every offset before ``X`` is stamped before ``T``, so the position wanted is the first *data record*
(read_committed: no marker, no aborted record) at an offset ``>= X`` stamped ``>= T``, or the
partition's end if there is none. :func:`first_stamped_at_or_after` finds it from ``X`` without
reading the whole partition: it reads the records from ``X`` (one fetch) and answers from them when
one is stamped ``>= T`` (the common case: no marker before it); otherwise it halves the offsets
after them, each probe one fetch, which is right when the records' timestamps do not decrease in
offset order. With timestamps out of order, see :class:`TimestampSearch`.

The search is a pure function over a reader of runs of records (:data:`ReadRun`);
:class:`RecordRuns` is that reader over a Kafka partition.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kbackup.core.kafka import Message
from kbackup.reset.probe import PartitionFetches


@dataclass(frozen=True, order=True, slots=True)
class StampedRecord:
    """A data record as a read_committed consumer sees it: its offset and its timestamp (ms)."""

    offset: int
    timestamp: int


#: ``read(offset)``: the data records a read_committed consumer sees from ``offset`` on, in offset
#: order and with none left out between them (markers and aborted records are not records), as many
#: as one read brings: at least the first data record at or after ``offset`` when there is one below
#: the end, and an empty sequence only when there is none.
ReadRun = Callable[[int], Sequence[StampedRecord]]


@dataclass(frozen=True)
class TimestampSearch:
    """Where :func:`first_stamped_at_or_after` puts a group, and what it cost.

    Whatever the timestamps: ``position >= start``; the record at ``position`` (``record``; None at
    the end) is stamped ``>= T``; every record the search read before ``position`` is stamped
    ``< T``, and so is the data record just before ``position`` when it is at or after ``start``.
    When the data records' timestamps never decrease in offset order, the position is exactly the
    first data record at or after ``start`` stamped ``>= T`` (what reading them one by one finds).
    Otherwise it can be past such a record, only one the search did not read: it lay between two
    probes' reads and records stamped ``< T`` follow it. ``out_of_order`` says whether the records
    the search read show timestamps decreasing (it cannot see the ones it did not read).
    """

    position: int
    record: StampedRecord | None
    #: Reads (calls of the reader) the search made.
    probes: int
    #: Some records read, taken in offset order, had a timestamp below one before them.
    out_of_order: bool


def _decreasing(stamps: dict[int, int]) -> bool:
    """Whether the timestamps of the records read (offset -> timestamp), in offset order, ever go down."""
    ordered = [stamps[offset] for offset in sorted(stamps)]
    return any(later < earlier for earlier, later in itertools.pairwise(ordered))


def first_stamped_at_or_after(read: ReadRun, start: int, end: int, timestamp: int) -> TimestampSearch:
    """The first data record at an offset in ``[start, end)`` stamped ``>= timestamp``, else ``end``.

    ``start`` is ListOffsets' answer for ``timestamp`` (every offset below it is stamped below
    ``timestamp``). Reads the records from ``start`` and answers from them if one is stamped
    ``>= timestamp``; otherwise searches the offsets after them by halves: at most
    ``2 + log2(end - start)`` reads in all. See :class:`TimestampSearch` for what is guaranteed.
    """
    #: Offset -> timestamp of every record read, to tell whether they are in order.
    seen: dict[int, int] = {}
    probes = 0

    def probe(offset: int) -> list[StampedRecord]:
        nonlocal probes
        probes += 1
        run = [record for record in read(offset) if offset <= record.offset < end]
        seen.update((record.offset, record.timestamp) for record in run)
        return run

    def first_hit(run: list[StampedRecord]) -> StampedRecord | None:
        return next((record for record in run if record.timestamp >= timestamp), None)

    def answer(record: StampedRecord | None) -> TimestampSearch:
        return TimestampSearch(
            position=end if record is None else record.offset,
            record=record,
            probes=probes,
            out_of_order=_decreasing(seen),
        )

    if start >= end:
        return answer(None)
    run = probe(start)
    if not run:
        return answer(None)
    hit = first_hit(run)
    if hit is not None:
        return answer(hit)
    # Every record of [start, low) read is stamped < T; the answer is in [low, high]: the first data
    # record at or after `high` (`found`, None for the end) is stamped >= T.
    low, high, found = run[-1].offset + 1, end, None
    while low < high:
        middle = (low + high) // 2
        run = probe(middle)
        if not run:
            high, found = middle, None
        elif run[0].timestamp >= timestamp:
            high, found = middle, run[0]
        elif (hit := first_hit(run)) is not None:
            # The records before it in this run, from `middle` on, are stamped < T.
            return answer(hit)
        else:
            low = min(run[-1].offset + 1, high)
    return answer(found)


@dataclass
class _Span:
    """Offsets [start, stop) were read: ``records`` are every data record among them."""

    start: int
    stop: int
    records: list[StampedRecord]
    #: The read ended at the partition's end: no data record after ``records`` below it.
    to_end: bool


def _stamped(message: Message) -> StampedRecord | None:
    offset = message.offset()
    if offset is None:
        return None
    _kind, stamp = message.timestamp()
    return StampedRecord(offset, stamp)


class RecordRuns(PartitionFetches[_Span]):
    """:data:`ReadRun` over one target partition: each read one fetch with the reset's probe consumer
    (``read_committed``), the records remembered so later searches there reuse them."""

    def __call__(self, offset: int) -> list[StampedRecord]:
        span = self._read.starting_at_or_before(offset)
        if span is not None and offset < span.stop:
            tail = span.records[bisect.bisect_left(span.records, offset, key=lambda r: r.offset) :]
            if tail or span.to_end:
                return tail
        return self._fetch(offset).records

    def _fetch(self, offset: int) -> _Span:
        records = [record for message in self.fetch_once(offset) if (record := _stamped(message)) is not None]
        to_end = self.reader.at_partition_end or self.reader.reached >= self.end_offset
        stop = self.end_offset if to_end else max(self.reader.reached, offset)
        return self._read.remember(_Span(start=offset, stop=stop, records=records, to_end=to_end))
