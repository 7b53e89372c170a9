"""The range builder on Arrow batches: what each Spark task of the exact path runs over its Kafka partition.

The exact path is the scan's second pass, for the target partitions whose
first-pass groups (:mod:`kbackup.mapping.offset_groups`) cannot be read as
runs; it used to be the whole scan.

It computes exactly what :func:`kbackup.offsets.ranges.build_ranges` computes,
with vectorised Arrow kernels instead of a Python loop per record, so that a
task keeps up with Spark's Kafka reader. This module imports only pyarrow:
the job ships it to Spark's executors by value, so a Spark cluster needs
pyarrow on its workers but not kafka-backup.

Each input batch holds the restored records of one Spark partition in the
order Spark's Kafka source reads them (offset order within a Kafka
partition). A range never spans two batches here; the driver joins pieces
of one run that were cut at batch or Spark-partition boundaries.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

#: Columns of the batches the job feeds in (the restored records only).
INPUT_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        # Null when the header is missing or not a decimal number (a damaged record).
        pa.field("source_topic", pa.string()),
        pa.field("source_partition", pa.int32()),
        pa.field("source_offset", pa.int64()),
    ]
)

#: What a task returns: ``range`` rows, plus one ``malformed`` row per batch
#: that had restored records with unreadable origin headers (``records`` of
#: them, the first at ``target_start``), and one ``unordered`` row per batch
#: whose offsets did not rise (correctness does not depend on it; speed does).
OUTPUT_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("target_topic", pa.string()),
        pa.field("target_partition", pa.int32()),
        pa.field("source_topic", pa.string()),
        pa.field("source_partition", pa.int32()),
        pa.field("source_start", pa.int64()),
        pa.field("source_end", pa.int64()),
        pa.field("target_start", pa.int64()),
        pa.field("target_end", pa.int64()),
        pa.field("records", pa.int64()),
    ]
)

#: The same schema as a Spark DDL string, for ``mapInArrow``.
OUTPUT_DDL = (
    "kind string, target_topic string, target_partition int, source_topic string, source_partition int, "
    "source_start bigint, source_end bigint, target_start bigint, target_end bigint, records bigint"
)


def _changed(column: pa.Array) -> pa.Array:
    """For rows 1..n-1: whether the value differs from the row before."""
    return pc.not_equal(column.slice(1), column.slice(0, len(column) - 1))


def _not_next(column: pa.Array) -> pa.Array:
    """For rows 1..n-1: whether the value is not the previous value plus one."""
    return pc.not_equal(column.slice(1), pc.add(column.slice(0, len(column) - 1), 1))


def ranges_of_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The maximal runs among consecutive rows of ``batch`` (restored records, none malformed)."""
    rows = batch.num_rows
    if rows == 0:
        return _empty()
    topic = batch.column("topic")
    partition = batch.column("partition")
    offset = batch.column("offset")
    source_topic = batch.column("source_topic")
    source_partition = batch.column("source_partition")
    source_offset = batch.column("source_offset")
    if rows == 1:
        starts = ends = pa.array([0], pa.int64())
    else:
        new_run = _not_next(offset)
        for column in (source_partition, topic, partition, source_topic):
            new_run = pc.or_(new_run, _changed(column))
        new_run = pc.or_(new_run, _not_next(source_offset))
        # Row i+1 starts a run where new_run[i] is true, so row i ends one.
        breaks = pc.indices_nonzero(new_run).cast(pa.int64())
        starts = pa.concat_arrays([pa.array([0], pa.int64()), pc.add(breaks, 1)])
        ends = pa.concat_arrays([breaks, pa.array([rows - 1], pa.int64())])
    target_start = offset.take(starts)
    target_end = offset.take(ends)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(["range"] * len(starts), pa.string()),
            topic.take(starts),
            partition.take(starts),
            source_topic.take(starts),
            source_partition.take(starts),
            source_offset.take(starts),
            source_offset.take(ends),
            target_start,
            target_end,
            pc.add(pc.subtract(target_end, target_start), 1),
        ],
        schema=OUTPUT_SCHEMA,
    )


def _empty() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=OUTPUT_SCHEMA)


def _summary_row(kind: str, batch: pa.RecordBatch, first: int, count: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [
            {
                "kind": kind,
                "target_topic": batch.column("topic")[first].as_py(),
                "target_partition": batch.column("partition")[first].as_py(),
                "target_start": batch.column("offset")[first].as_py(),
                "records": count,
            }
        ],
        schema=OUTPUT_SCHEMA,
    )


def scan_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The function each Spark task runs (``mapInArrow``): ranges and problem reports per batch."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        readable = pc.and_(
            pc.and_(pc.is_valid(batch.column("source_topic")), pc.is_valid(batch.column("source_partition"))),
            pc.is_valid(batch.column("source_offset")),
        )
        unreadable = batch.num_rows - pc.sum(readable.cast(pa.int64())).as_py()
        if unreadable:
            first = pc.index(readable, False).as_py()
            yield _summary_row("malformed", batch, first, unreadable)
            batch = batch.filter(readable)
            if batch.num_rows == 0:
                continue
        if batch.num_rows > 1:
            offset = batch.column("offset")
            same_partition = pc.and_(
                pc.invert(_changed(batch.column("topic"))), pc.invert(_changed(batch.column("partition")))
            )
            falling = pc.and_(
                same_partition, pc.less_equal(offset.slice(1), offset.slice(0, batch.num_rows - 1))
            )
            unordered = pc.sum(falling.cast(pa.int64())).as_py() or 0
            if unordered:
                yield _summary_row("unordered", batch, 0, unordered)
        yield ranges_of_batch(batch)
