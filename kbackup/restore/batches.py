"""One Parquet batch of a segment to the records restore produces: selected, routed and stamped.

Column by column (``to_pylist`` per column, never per row): the selection (offset range, time
window), the filter rules of ``restore.filters`` (records dropped, or given a null value), what an
earlier idempotent run already landed, the target partition of each record, and its headers (the
record's own, then the origin headers of :func:`kbackup.format.origin.stamp_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from kbackup.format.origin import Header, stamp_batch
from kbackup.format.schema import RECORD_SCHEMA
from kbackup.restore.partitioner import partition_for_key, partition_for_null_key
from kbackup.restore.plan import PartitionPlan
from kbackup.restore.record_filters import apply_rules
from kbackup.restore.resume import PartitionState

_OFFSET = RECORD_SCHEMA.get_field_index("offset")
_TIMESTAMP = RECORD_SCHEMA.get_field_index("timestamp")
_KEY = RECORD_SCHEMA.get_field_index("key")
_VALUE = RECORD_SCHEMA.get_field_index("value")
_HEADERS = RECORD_SCHEMA.get_field_index("headers")


@dataclass
class BatchRecords:
    """The records of one batch to produce, column by column, in source offset order."""

    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    #: Each record's headers; None when no record has any (origin headers off, none of its own).
    headers: list[list[Header]] | None
    #: Target partition of each record.
    targets: list[int]
    #: Key and value bytes of these records.
    size: int
    #: Selected records found already on the target (an idempotent run continued), not produced.
    already_landed: int = 0
    #: Selected records a filter rule dropped (not produced).
    dropped: int = 0
    #: Selected records a filter rule made tombstones (produced with a null value, unless landed).
    tombstoned: int = 0


def batch_records(
    state: PartitionState, batch: pa.RecordBatch, *, source_cluster: str, stamp: bool
) -> BatchRecords | None:
    """The selected records of ``batch`` after the filter rules (None if none was selected), and
    ``state.next_offset`` moved past the batch, dropped records included: the caller produces every
    record returned before it commits that progress, so a rerun neither repeats nor loses one."""
    plan = state.plan
    offsets_column = batch.column(_OFFSET)
    batch_last = offsets_column[-1].as_py()
    mask = plan.record_filter.mask(offsets_column, batch.column(_TIMESTAMP), state.next_offset)
    if mask is not None:
        batch = batch.filter(mask)
    state.next_offset = max(state.next_offset, min(batch_last + 1, plan.offset_end))
    if batch.num_rows == 0:
        return None
    filtered = apply_rules(plan.rules, batch)
    batch = filtered.batch
    if batch.num_rows == 0:
        return BatchRecords([], [], [], [], None, [], 0, dropped=filtered.dropped)
    offsets: list[int] = batch.column(_OFFSET).to_pylist()
    timestamps: list[int] = batch.column(_TIMESTAMP).to_pylist()
    keys: list[bytes | None] = batch.column(_KEY).to_pylist()
    values: list[bytes | None] = batch.column(_VALUE).to_pylist()
    own = _own_headers(batch.column(_HEADERS))
    targets = _targets(plan, keys, offsets)
    landed = 0
    if state.landed:
        keep = [
            i
            for i, (offset, target) in enumerate(zip(offsets, targets, strict=True))
            if offset > state.landed.get(target, -1)
        ]
        landed = len(offsets) - len(keep)
        if landed:
            offsets = [offsets[i] for i in keep]
            timestamps = [timestamps[i] for i in keep]
            keys = [keys[i] for i in keep]
            values = [values[i] for i in keep]
            targets = [targets[i] for i in keep]
            if own is not None:
                own = [own[i] for i in keep]
            batch = batch.take(pa.array(keep, pa.int64()))
        if not offsets:
            return BatchRecords([], [], [], [], None, [], 0, landed, filtered.dropped, filtered.tombstoned)
    headers = (
        stamp_batch(source_cluster, plan.source_topic, plan.source_partition, offsets, timestamps, own)
        if stamp
        else own
    )
    size = 0
    for column in (batch.column(_KEY), batch.column(_VALUE)):
        size += int(pc.sum(pc.binary_length(column)).as_py() or 0)
    return BatchRecords(
        offsets,
        timestamps,
        keys,
        values,
        headers,
        targets,
        size,
        landed,
        filtered.dropped,
        filtered.tombstoned,
    )


def _targets(plan: PartitionPlan, keys: list[bytes | None], offsets: list[int]) -> list[int]:
    if plan.target_partition is not None:
        return [plan.target_partition] * len(keys)
    count, source = plan.target_partitions, plan.source_partition
    return [
        partition_for_key(key, count) if key is not None else partition_for_null_key(source, offset, count)
        for key, offset in zip(keys, offsets, strict=True)
    ]


def _own_headers(column: pa.Array) -> list[list[Header]] | None:
    """Each record's own headers; None when no record of the batch has any."""
    flat = column.flatten()
    if len(flat) == 0:
        return None
    names: list[str] = flat.field("key").to_pylist()
    values: list[bytes | None] = flat.field("value").to_pylist()
    lengths: list[int] = pc.list_value_length(column).to_pylist()
    result: list[list[Header]] = []
    position = 0
    for length in lengths:
        end = position + length
        result.append(list(zip(names[position:end], values[position:end], strict=True)))
        position = end
    return result
