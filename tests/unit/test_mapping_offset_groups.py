"""The first pass's groups (kbackup.mapping.offset_groups) against the brute force, without Spark.

The JVM aggregation is imitated here with plain dictionaries, per task:
records cut into contiguous slices (as Spark's Kafka source splits a
partition), one row per (slice, group).
"""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kbackup.mapping.offset_groups import GROUPS_SCHEMA, read_groups
from kbackup.offsets.ranges import merge_touching
from tests.support.mapping_oracle import Restored, brute_force_ranges
from tests.support.restored_partitions import fold, restored_partitions

#: A restored record whose origin headers could not be read: (target topic, partition, offset).
Malformed = tuple[str, int, int]


def task_groups(records: list[Restored], malformed: list[Malformed], tasks: list[list[int]]) -> pa.Table:
    """What the JVM's grouped aggregate returns when task ``i`` reads the records at indexes ``tasks[i]``."""
    rows: dict[tuple[object, ...], dict[str, object]] = {}
    everything: list[Restored | Malformed] = [*records, *malformed]
    for task, indexes in enumerate(tasks):
        for index in indexes:
            item = everything[index]
            if isinstance(item, Restored):
                topic, partition, offset = item.target_topic, item.target_partition, item.target_offset
                origin: tuple[object, ...] = (
                    item.source_topic,
                    item.source_partition,
                    item.target_offset - item.source_offset,
                )
            else:
                topic, partition, offset = item
                origin = (None, None, None)
            key = (task, topic, partition, *origin)
            row = rows.setdefault(key, dict(zip(GROUPS_SCHEMA.names[:6], key, strict=True)))
            row["low"] = min(offset, row.get("low", offset))  # type: ignore[call-overload]
            row["high"] = max(offset, row.get("high", offset))  # type: ignore[call-overload]
            row["records"] = row.get("records", 0) + 1  # type: ignore[operator]
    return pa.Table.from_pylist(list(rows.values()), schema=GROUPS_SCHEMA)


def random_tasks(count: int, rnd: random.Random) -> list[list[int]]:
    cuts = sorted(rnd.sample(range(1, count), min(count - 1, rnd.randint(0, 4)))) if count > 1 else []
    return [list(range(a, b)) for a, b in zip([0, *cuts], [*cuts, count], strict=True) if b > a]


def same_difference_twice(records: list[Restored]) -> set[tuple[str, int]]:
    """Target partitions where two maximal runs share source partition and offset difference."""
    seen = Counter(
        (
            r.target_topic,
            r.target_partition,
            r.source_topic,
            r.source_partition,
            r.target_start - r.source_start,
        )
        for r in brute_force_ranges(records)
    )
    return {(key[0], key[1]) for key, count in seen.items() if count > 1}


@settings(max_examples=300, deadline=None)
@given(restored_partitions(), st.randoms(use_true_random=False))
def test_groups_give_the_exact_ranges_or_send_the_partition_to_the_exact_path(
    records: list[Restored], rnd: random.Random
) -> None:
    groups = read_groups(task_groups(records, [], random_tasks(len(records), rnd)))
    # Gappy exactly where one difference holds several runs: never a false alarm, never a miss.
    assert groups.gappy_targets == same_difference_twice(records)
    exact_elsewhere = [r for r in brute_force_ranges(records) if r.target not in groups.gappy_targets]
    assert merge_touching(groups.ranges) == exact_elsewhere
    # With the exact path over the gappy partitions, the whole result is the brute force's.
    second_pass = fold([r for r in records if (r.target_topic, r.target_partition) in groups.gappy_targets])
    assert merge_touching(groups.ranges + second_pass) == brute_force_ranges(records)
    assert groups.malformed_records == 0
    assert groups.first_malformed is None


def test_hole_free_and_source_holes_need_no_second_pass() -> None:
    # Source compaction holes (0-9, 15-19, 40) restored back to back; another source
    # partition interleaved on the target in blocks.
    source_offsets = [*range(10), *range(15, 20), 40]
    records = [Restored("t", 0, index, "s", 0, offset) for index, offset in enumerate(source_offsets)]
    # Each source partition's offsets rise by 1 from block to block, so the difference changes.
    records += [
        Restored("t", 1, index, "s", 1 + index // 5 % 2, index // 10 * 5 + index % 5) for index in range(30)
    ]
    groups = read_groups(task_groups(records, [], random_tasks(len(records), random.Random(3))))
    assert groups.gappy_targets == set()
    assert merge_touching(groups.ranges) == brute_force_ranges(records)
    assert [
        (r.source_start, r.source_end) for r in merge_touching(groups.ranges) if r.target_partition == 0
    ] == [
        (0, 9),
        (15, 19),
        (40, 40),
    ]


def test_equal_holes_on_both_sides_make_the_partition_gappy() -> None:
    # Source offsets 5 and 6 compacted away, two foreign records in their place on the target:
    # both runs have difference 0. Partition 1 is hole-free and stays in the first pass.
    records = [Restored("t", 0, o, "s", 0, o) for o in [*range(5), *range(7, 12)]]
    records += [Restored("t", 1, o, "s", 1, o + 100) for o in range(8)]
    groups = read_groups(task_groups(records, [], [list(range(len(records)))]))
    assert groups.gappy_targets == {("t", 0)}
    assert groups.ranges == [r for r in brute_force_ranges(records) if r.target_partition == 1]


def test_malformed_records_are_counted_and_the_first_located_across_tasks() -> None:
    records = [Restored("t", p, o, "s", p, o) for p in (0, 1) for o in range(6)]
    malformed: list[Malformed] = [("t", 1, 9), ("t", 1, 7), ("t", 0, 12), ("u", 0, 1)]
    everything = list(range(len(records) + len(malformed)))
    groups = read_groups(task_groups(records, malformed, [everything[::2], everything[1::2]]))
    assert groups.malformed_records == 4
    assert groups.first_malformed == ("t", 0, 12)
    # Malformed records are holes, not part of any range; the others still map exactly.
    assert merge_touching(groups.ranges) == brute_force_ranges(records)
