"""The restore progress record: a restore's progress, stored on the target inside the same transactions
as the records.

The progress topic (``restore.progress_topic``, compacted, partition 0 is the
one used) holds one record per (restore id, source topic, source partition):

- key: ``<restore id>/<source topic>/<source partition>`` (UTF-8);
- value: UTF-8 JSON ``{"format": 1, "restore_id", "backup_id", "source_cluster",
  "source_topic", "source_partition", "target_topic", "next_offset",
  "restored_records", "complete", "updated_at"}`` where every selected record
  with a source offset below ``next_offset`` is on the target, committed, and
  none at or above it is.

A record is produced for every source partition that advanced, in the
transaction that carries that advance, so a transaction commits both or
neither. A re-run reads the topic with ``isolation.level=read_committed`` and
keeps the latest value per key. See docs/restore.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from kbackup.core.config import KAFKA_INT32_MAX, KAFKA_INT64_MAX
from kbackup.core.times import utc_now_iso
from kbackup.format.documents import parse_json, validate

PROGRESS_PARTITION = 0
PROGRESS_FORMAT = 1


@dataclass
class PartitionProgress:
    """How far a restore has got with one source partition."""

    source_topic: str
    source_partition: int
    target_topic: str
    #: Every selected record below this source offset is restored; none at or above it.
    next_offset: int
    #: Records restored from this source partition, over all runs of the restore.
    restored_records: int
    #: The whole selected range of the partition is restored.
    complete: bool = False


def progress_key(restore_id: str, source_topic: str, source_partition: int) -> bytes:
    return f"{restore_id}/{source_topic}/{source_partition}".encode()


def encode_progress(
    restore_id: str, backup_id: str, source_cluster: str, progress: PartitionProgress
) -> bytes:
    value = {
        "format": PROGRESS_FORMAT,
        "restore_id": restore_id,
        "backup_id": backup_id,
        "source_cluster": source_cluster,
        "source_topic": progress.source_topic,
        "source_partition": progress.source_partition,
        "target_topic": progress.target_topic,
        "next_offset": progress.next_offset,
        "restored_records": progress.restored_records,
        "complete": progress.complete,
        "updated_at": utc_now_iso(),
    }
    return json.dumps(value, separators=(",", ":")).encode()


class _ProgressValue(BaseModel):
    model_config = ConfigDict(extra="ignore")

    format: Literal[1]
    source_topic: str = Field(min_length=1)
    source_partition: Annotated[int, Field(ge=0, le=KAFKA_INT32_MAX)]
    target_topic: str = Field(min_length=1)
    next_offset: Annotated[int, Field(ge=0, le=KAFKA_INT64_MAX)]
    restored_records: Annotated[int, Field(ge=0)]
    complete: bool = False


class _NotUnderstood(Exception):
    pass


def decode_progress(value: bytes) -> PartitionProgress | None:
    """A progress record's value, or None for one this release does not understand (another
    format, or not a progress record at all)."""
    try:
        found = validate(_ProgressValue, parse_json(value, _NotUnderstood), _NotUnderstood)
    except _NotUnderstood:
        return None
    return PartitionProgress(**found.model_dump(exclude={"format"}))
