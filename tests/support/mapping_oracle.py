"""Brute-force answers the mapping is checked against, computed from the records themselves.

Deliberately written differently from kbackup.mapping: ranges come from
links between neighbouring target offsets (a record is linked to the record
at the next target offset when that record continues it on the source
side), positions straight from the formula in
shared/reference/offset-translation.md, over every record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kbackup.offsets.ranges import OffsetRange
from tests.support.kafka_io import Record

ORIGIN_PREFIX = "x-kafka-backup-"


@dataclass(frozen=True)
class Restored:
    """One restored record: where it is on the target, and where it came from."""

    target_topic: str
    target_partition: int
    target_offset: int
    source_topic: str
    source_partition: int
    source_offset: int


def origin_headers(
    cluster: str, topic: str, partition: int, offset: int, timestamp: int = 0
) -> tuple[tuple[str, bytes], ...]:
    """The headers restore appends, values as ASCII decimal / UTF-8 text."""
    return (
        (f"{ORIGIN_PREFIX}cluster", cluster.encode()),
        (f"{ORIGIN_PREFIX}topic", topic.encode()),
        (f"{ORIGIN_PREFIX}partition", str(partition).encode()),
        (f"{ORIGIN_PREFIX}offset", str(offset).encode()),
        (f"{ORIGIN_PREFIX}timestamp", str(timestamp).encode()),
    )


def restored_from_records(records: Iterable[Record], source_cluster: str) -> list[Restored]:
    """Read origin headers of records consumed from the target; the last header of a name wins."""
    found = []
    for record in records:
        origin: dict[str, bytes | None] = {}
        for key, value in record.headers:
            if key.startswith(ORIGIN_PREFIX):
                origin[key[len(ORIGIN_PREFIX) :]] = value
        if origin.get("cluster") != source_cluster.encode():
            continue
        assert record.topic is not None
        assert record.partition is not None
        assert record.offset is not None
        found.append(
            Restored(
                record.topic,
                record.partition,
                record.offset,
                (origin["topic"] or b"").decode(),
                int(origin["partition"] or b""),
                int(origin["offset"] or b""),
            )
        )
    return found


def brute_force_ranges(records: Iterable[Restored]) -> list[OffsetRange]:
    """Maximal runs, found by linking each record to the one at the next target offset."""
    at = {(r.target_topic, r.target_partition, r.target_offset): r for r in records}

    def next_of(r: Restored) -> Restored | None:
        following = at.get((r.target_topic, r.target_partition, r.target_offset + 1))
        if (
            following is not None
            and following.source_topic == r.source_topic
            and following.source_partition == r.source_partition
            and following.source_offset == r.source_offset + 1
        ):
            return following
        return None

    has_previous = {id(n) for r in at.values() if (n := next_of(r)) is not None}
    ranges = []
    for first in at.values():
        if id(first) in has_previous:
            continue
        last = first
        while (following := next_of(last)) is not None:
            last = following
        ranges.append(
            OffsetRange(
                first.source_topic,
                first.source_partition,
                first.target_topic,
                first.target_partition,
                first.source_offset,
                last.source_offset,
                first.target_offset,
                last.target_offset,
            )
        )
    return sorted(ranges, key=lambda r: (r.target_topic, r.target_partition, r.target_start))


def brute_force_position(
    records: Iterable[Restored], target: tuple[str, int], committed: Mapping[tuple[str, int], int]
) -> tuple[int, int, int] | None:
    """(position, reprocessed, skipped) by the reference's formula; None if no restored record is there."""
    inside = [r for r in records if (r.target_topic, r.target_partition) == target]
    if not inside:
        return None

    def done(r: Restored) -> int:
        return committed.get((r.source_topic, r.source_partition), 0)

    pending = [r.target_offset for r in inside if r.source_offset >= done(r)]
    position = min(pending) if pending else max(r.target_offset for r in inside) + 1
    reprocessed = sum(1 for r in inside if r.source_offset < done(r) and r.target_offset >= position)
    skipped = sum(1 for r in inside if r.source_offset >= done(r) and r.target_offset < position)
    return position, reprocessed, skipped
