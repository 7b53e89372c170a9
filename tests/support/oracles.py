"""Test oracles of offset translation, by brute force over restored records (no product code path).

- :func:`reference_position`: the definition of the correct target position for a group on one
  target partition (``shared/reference/offset-translation.md``);
- :func:`ranges_from_records`: a target partition's restored records folded into mapping ranges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kbackup.core.types import TopicPartitionKey
from kbackup.offsets.ranges import OffsetRange, build_ranges
from kbackup.offsets.translate import RestoredRecord


def reference_position(
    records: Iterable[RestoredRecord], committed: Mapping[TopicPartitionKey, int]
) -> int | None:
    """The target position of a group on one target partition (the reference's formula).

    ``records`` are the restored records of one target partition (any order).
    ``committed[(T, p)]`` is the group's committed source offset C on (T, p);
    a source partition missing from ``committed`` counts as "nothing
    processed" (C = 0): every record of it must be consumed.

        position = min { t(r) : o(r) >= C[T(r), p(r)] }, or max { t(r) } + 1 if no such r.

    None when the partition holds no restored record at all.
    """
    first_unprocessed: int | None = None
    last_target: int | None = None
    for record in records:
        last_target = record.target_offset if last_target is None else max(last_target, record.target_offset)
        if record.source_offset >= committed.get(record.source, 0) and (
            first_unprocessed is None or record.target_offset < first_unprocessed
        ):
            first_unprocessed = record.target_offset
    if first_unprocessed is not None:
        return first_unprocessed
    return None if last_target is None else last_target + 1


def ranges_from_records(
    records: Iterable[RestoredRecord], target_topic: str, target_partition: int
) -> list[OffsetRange]:
    """One target partition's restored records (any order) as mapping ranges. Used as an oracle."""
    return list(
        build_ranges(
            target_topic,
            target_partition,
            ((r.target_offset, r.source_topic, r.source_partition, r.source_offset) for r in sorted(records)),
        )
    )
