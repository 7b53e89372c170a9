"""The first pass's groups, read on the driver: which are ranges, which partitions need the exact path.

The first pass of the scan (:func:`kbackup.mapping.job.offset_groups`)
groups restored records, in the JVM, by (target topic, target partition,
source topic, source partition, target offset minus source offset) and
returns each group's lowest and highest target offset and its record
count, one row per group per Spark task. This module combines those rows
across tasks and decides what they say, with pyarrow only and no Spark, so
it is tested on its own against :func:`kbackup.offsets.ranges.build_ranges`.

Why a group whose count equals its span (``high - low + 1``) is exactly one
maximal run: target offsets within a partition are distinct, so ``count ==
span`` means every target offset ``low..high`` is a record of the group;
all of them have the same source partition and the same difference, so
from one to the next the target offset steps by 1 and so does the source
offset (``source = target - difference``): one run. It is maximal because
the record at ``high + 1`` (and at ``low - 1``), if any, is not in the group
(it would raise the max or lower the min): it has another difference or
another source partition, or is a hole (a foreign, malformed or missing
record), and each of these ends a run.

A group with ``count < span`` ("gappy") holds several runs of the same
difference separated by holes of equal length on both sides (a record
compacted away on the source, a foreign record in its place on the
target). The aggregate cannot tell where they split, so its whole target
partition goes to the exact path instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from kbackup.core.types import TopicPartitionKey
from kbackup.offsets.ranges import OffsetRange

#: What the first pass returns: one row per (Spark task, group). The source
#: columns and ``difference`` are null together for the group of malformed
#: records (restored records whose source topic, partition or offset is
#: missing or not a number), so those are counted and located in the same pass.
GROUPS_SCHEMA = pa.schema(
    [
        pa.field("task", pa.int32()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("source_topic", pa.string()),
        pa.field("source_partition", pa.int32()),
        pa.field("difference", pa.int64()),
        pa.field("low", pa.int64()),
        pa.field("high", pa.int64()),
        pa.field("records", pa.int64()),
        # Set on the rows of records restored from another origin cluster (their source columns
        # are null): counted, so a scan that finds none of the wanted cluster can name the others.
        pa.field("foreign_cluster", pa.string()),
    ]
)

GROUP_KEYS = ["topic", "partition", "source_topic", "source_partition", "difference"]


@dataclass(frozen=True)
class GroupsRead:
    """What the first pass's groups say."""

    #: Exact maximal runs of the target partitions that have no gappy group.
    ranges: list[OffsetRange]
    #: Target partitions with a gappy group: their ranges must come from the exact path.
    gappy_targets: set[TopicPartitionKey]
    #: Malformed restored records, and where the first of them is (target topic, partition, offset).
    malformed_records: int
    first_malformed: tuple[str, int, int] | None
    #: Records of other origin clusters (x-kafka-backup-cluster), by cluster.
    other_clusters: dict[str, int] = field(default_factory=dict)


def read_groups(task_groups: pa.Table) -> GroupsRead:
    """Combine the per-task rows of each group and sort the groups into ranges and gappy partitions."""
    foreign = pc.is_valid(task_groups.column("foreign_cluster"))
    others = task_groups.filter(foreign).group_by("foreign_cluster").aggregate([("records", "sum")])
    other_clusters = dict(
        zip(
            others.column("foreign_cluster").to_pylist(),
            others.column("records_sum").to_pylist(),
            strict=True,
        )
    )
    combined = (
        task_groups.filter(pc.invert(foreign))
        .select([*GROUP_KEYS, "low", "high", "records"])
        .group_by(GROUP_KEYS, use_threads=False)
        .aggregate([("low", "min"), ("high", "max"), ("records", "sum")])
        .rename_columns({"low_min": "low", "high_max": "high", "records_sum": "records"})
    )
    malformed = combined.filter(pc.is_null(combined.column("source_topic")))
    first_malformed = min(
        ((row["topic"], row["partition"], row["low"]) for row in malformed.to_pylist()), default=None
    )
    readable = combined.filter(pc.is_valid(combined.column("source_topic")))
    span = pc.add(pc.subtract(readable.column("high"), readable.column("low")), 1)
    gappy = readable.filter(pc.less(readable.column("records"), span))
    gappy_targets = {
        (row["topic"], row["partition"]) for row in gappy.select(["topic", "partition"]).to_pylist()
    }
    return GroupsRead(
        ranges=list(_runs(readable, gappy_targets)),
        gappy_targets=gappy_targets,
        malformed_records=pc.sum(malformed.column("records")).as_py() or 0,
        first_malformed=first_malformed,
        other_clusters=other_clusters,
    )


def _runs(readable: pa.Table, gappy_targets: set[TopicPartitionKey]) -> Iterator[OffsetRange]:
    for row in readable.to_pylist():
        if (row["topic"], row["partition"]) in gappy_targets:
            continue
        difference = row["difference"]
        yield OffsetRange(
            row["source_topic"],
            row["source_partition"],
            row["topic"],
            row["partition"],
            row["low"] - difference,
            row["high"] - difference,
            row["low"],
            row["high"],
        )
