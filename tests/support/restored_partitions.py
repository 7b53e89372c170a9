"""Restored partitions with every kind of hole, drawn by Hypothesis, and the ranges the product builds
of them.
"""

from __future__ import annotations

from hypothesis import strategies as st

from kbackup.offsets.ranges import OffsetRange, build_ranges
from tests.support.mapping_oracle import Restored


@st.composite
def restored_partitions(draw: st.DrawFn) -> list[Restored]:
    """Restored records of up to two target partitions with every kind of hole.

    Target offsets rise with random gaps (transaction markers, foreign
    records); each record comes from one of a few source partitions whose
    offsets mostly rise with gaps (compaction, aborted records), sometimes
    repeat (a restore run twice) or go back (records restored out of order).
    """
    records: list[Restored] = []
    for target_partition in range(draw(st.integers(1, 2))):
        sources = [("orders", p) for p in range(draw(st.integers(1, 3)))] + [("renamed", 0)]
        next_source = {source: draw(st.integers(0, 5)) for source in sources}
        target_offset = draw(st.integers(0, 3))
        for _ in range(draw(st.integers(0, 60))):
            source = draw(st.sampled_from(sources))
            step = draw(st.sampled_from([1, 1, 1, 1, 0, 2, 3, -2]))
            source_offset = max(0, next_source[source] + step - 1)
            next_source[source] = source_offset + 1
            records.append(Restored("target", target_partition, target_offset, *source, source_offset))
            target_offset += draw(st.sampled_from([1, 1, 1, 1, 2, 5]))
    return records


def fold(records: list[Restored]) -> list[OffsetRange]:
    by_target: dict[tuple[str, int], list[Restored]] = {}
    for r in records:
        by_target.setdefault((r.target_topic, r.target_partition), []).append(r)
    ranges: list[OffsetRange] = []
    for (topic, partition), rows in by_target.items():
        origin = ((r.target_offset, r.source_topic, r.source_partition, r.source_offset) for r in rows)
        ranges.extend(build_ranges(topic, partition, origin))
    return sorted(ranges, key=lambda r: (r.target_topic, r.target_partition, r.target_start))
