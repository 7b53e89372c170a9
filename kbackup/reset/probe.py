"""Reading restored records' origins from a target partition, a few records at a time.

The binary search asks "what is the first restored record of source
partition (T, p) at or after target offset t?". Each question costs one small
fetch (read_committed, so transaction markers and aborted records are
skipped by the broker). Everything a fetch returns is remembered, so later
questions about offsets it covered cost nothing: searches for many groups on
the same partition share their probes.
"""

from __future__ import annotations

import bisect
import sys
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from kbackup.core.kafka import Message, PartitionReader
from kbackup.format.origin import parse_origin
from kbackup.offsets.translate import RestoredRecord

#: Bytes per probe fetch: enough for a few hundred small records, small enough to stay cheap.
PROBE_FETCH_BYTES = 256 * 1024
#: Records taken from one probe's fetch and remembered for later probes (a fetch brings at least
#: one whole producer batch, often thousands of small records).
PROBE_BATCH_RECORDS = 2000


def probe_consumer_properties() -> dict[str, object]:
    """librdkafka settings of the consumer that answers probes (the planner's, and the benchmark's)."""
    return {
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        # Probes want one record; small fetches keep each probe cheap.
        # (librdkafka wants fetch.max.bytes >= message.max.bytes, 1 MB by default.)
        "fetch.max.bytes": max(PROBE_FETCH_BYTES, 1_048_576),
        "max.partition.fetch.bytes": PROBE_FETCH_BYTES,
        # librdkafka otherwise keeps fetching ahead after each assign (up to 100,000 records or
        # 64 MiB queued): most of it is thrown away by the next probe's assign. One fetch is enough.
        "queued.min.messages": 1,
        "queued.max.messages.kbytes": PROBE_FETCH_BYTES // 1024,
        # ...and re-checks those limits after this long, 1 s by default: the next probe would wait for it.
        "fetch.queue.backoff.ms": 5,
        # (No long poll at a partition's end: every PartitionReader sets fetch.wait.max.ms low.)
    }


def _target_offset(record: RestoredRecord) -> int:
    return record.target_offset


class _Span(Protocol):
    start: int
    stop: int


S = TypeVar("S", bound=_Span)


class SpansRead(Generic[S]):
    """The spans of a partition already read, each target offsets [start, stop), by start: what a
    search asks first, so that searches of many groups on one partition share their fetches."""

    def __init__(self) -> None:
        self._spans: list[S] = []
        self._starts: list[int] = []

    def starting_at_or_before(self, offset: int) -> S | None:
        """The span read that starts last at or before ``offset`` (it may end before it)."""
        index = bisect.bisect_right(self._starts, offset) - 1
        return self._spans[index] if index >= 0 else None

    def remember(self, span: S) -> S:
        """Keep ``span`` for later searches, unless it is empty."""
        if span.stop > span.start:
            index = bisect.bisect_left(self._starts, span.start)
            self._spans.insert(index, span)
            self._starts.insert(index, span.start)
        return span


@dataclass
class _KnownSpan:
    """Target offsets [start, stop) have been read; the restored records among them, by source
    partition in target order: a probe for one source partition of a repartitioned topic bisects
    that partition's records instead of walking past every other source partition's (planning
    was quadratic in them)."""

    start: int
    stop: int
    by_source: dict[tuple[str, int], list[RestoredRecord]] = field(default_factory=dict)

    @property
    def restored_records(self) -> int:
        """How many restored records the span holds (of every source partition)."""
        return sum(len(records) for records in self.by_source.values())

    def first_of(self, source: tuple[str, int], position: int) -> RestoredRecord | None:
        """The first record of ``source`` at target offset >= ``position`` in this span."""
        records = self.by_source.get(source, [])
        index = bisect.bisect_left(records, position, key=_target_offset)
        return records[index] if index < len(records) else None


class PartitionFetches(Generic[S]):
    """One target partition below ``end_offset``, read one fetch at a time with the reset's probe
    consumer (:func:`probe_consumer_properties`), what each read found remembered as a span of
    type ``S``; ``fetches`` counts the reads."""

    def __init__(
        self,
        reader: PartitionReader,
        *,
        topic: str,
        partition: int,
        end_offset: int,
        timeout_secs: float = 30.0,
    ) -> None:
        self.reader = reader
        self.topic = topic
        self.partition = partition
        self.end_offset = end_offset
        self.timeout_secs = timeout_secs
        self.fetches = 0
        self._read: SpansRead[S] = SpansRead()

    def fetch_once(self, offset: int) -> list[Message]:
        """The records of one fetch from ``offset`` on (none at the end); the reader's ``reached``
        and ``at_partition_end`` then say where it stopped."""
        self.fetches += 1
        batches = self.reader.batches(
            self.topic,
            self.partition,
            offset,
            self.end_offset,
            timeout_secs=self.timeout_secs,
            batch_records=PROBE_BATCH_RECORDS,
        )
        return next(batches, [])


class PartitionProbe(PartitionFetches[_KnownSpan]):
    """Answers probes on one target partition for one origin cluster."""

    def __init__(
        self,
        reader: PartitionReader,
        *,
        topic: str,
        partition: int,
        source_cluster: str,
        end_offset: int,
        timeout_secs: float = 30.0,
    ) -> None:
        super().__init__(
            reader, topic=topic, partition=partition, end_offset=end_offset, timeout_secs=timeout_secs
        )
        self.source_cluster = source_cluster
        #: Source partitions seen in this target partition (more than one: repartitioned).
        self.sources_seen: set[tuple[str, int]] = set()

    def first_at_or_after(
        self, offset: int, source_topic: str, source_partition: int | None, limit: int | None = None
    ) -> RestoredRecord | None:
        """The first restored record of (source_topic, source_partition) at target offset >= ``offset``
        (of any partition of ``source_topic`` if ``source_partition`` is None), and below ``limit``:
        a search that only asks whether a record lies before a bound reads no further than it."""
        stop = self.end_offset if limit is None else min(limit, self.end_offset)
        position = offset
        while position < stop:
            before = self._read.starting_at_or_before(position)
            if before is not None and position < before.stop:
                span = before
            else:
                span = self._fetch(self._fetch_start(position, before))
            if source_partition is not None:
                found = span.first_of((source_topic, source_partition), position)
            else:
                candidates = [
                    record
                    for source in span.by_source
                    if source[0] == source_topic and (record := span.first_of(source, position)) is not None
                ]
                found = min(candidates, default=None)
            if found is not None:
                return found if found.target_offset < stop else None
            # (A gap-filling fetch may end before the position.)
            position = max(position, span.stop)
        return None

    @staticmethod
    def _fetch_start(offset: int, before: _KnownSpan | None) -> int:
        """Where to fetch for a probe at ``offset``, not in ``before`` (the span read before it):
        the end of that span, when the gap is shorter than the span. Filling small gaps keeps the
        spans read contiguous, so probes of many groups on one partition find them read instead of
        each fetching its own overlapping span (planning 200 groups x 10 partitions made 1,500
        fetches without this)."""
        if before is not None and offset - before.stop < before.stop - before.start:
            return before.stop
        return offset

    def _fetch(self, offset: int) -> _KnownSpan:
        """One fetch's worth of records from ``offset`` on (the reader keeps the partition assigned,
        so a fetch that continues where the last one stopped costs no new round trip)."""
        span = _KnownSpan(start=offset, stop=offset)
        self._take(self.fetch_once(offset), span)
        # Nothing (more) below the end: the span reaches it.
        span.stop = self.end_offset if self.reader.at_partition_end else max(span.stop, self.reader.reached)
        return self._read.remember(span)

    def _take(self, messages: list[Message], span: _KnownSpan) -> None:
        for message in messages:
            message_offset = message.offset()
            if message_offset is None:
                continue
            headers = message.headers()
            origin = parse_origin(headers if isinstance(headers, list) else None)
            if origin is not None and origin.cluster == self.source_cluster:
                # One string object per topic, not one per remembered record.
                source = (sys.intern(origin.topic), origin.partition)
                self.sources_seen.add(source)
                span.by_source.setdefault(source, []).append(
                    RestoredRecord(message_offset, source[0], origin.partition, origin.offset)
                )
            span.stop = message_offset + 1
