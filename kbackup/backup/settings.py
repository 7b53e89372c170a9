"""The ``source`` and ``backup`` sections of a config file."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from kbackup.core.config import KafkaConnection, StrictModel


class TopicSelection(StrictModel):
    """Which topics to back up: full-match regular expressions (a plain topic name matches itself)."""

    include: list[str] = Field(default_factory=lambda: [".*"], min_length=1)
    exclude: list[str] = Field(default_factory=list)

    @field_validator("include", "exclude")
    @classmethod
    def _compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
        return patterns


class SourceSettings(KafkaConnection):
    """The cluster to back up."""

    topics: TopicSelection = Field(default_factory=TopicSelection)


class BackupSettings(StrictModel):
    """How a backup is taken (keys follow the seed tool's ``backup:`` section)."""

    #: Stamped on every record as its origin cluster; defaults to the Kafka cluster id.
    source_cluster_id: str | None = None
    #: Keep origin offsets so that restore can stamp x-kafka-backup-* headers.
    include_offset_headers: bool = True
    compression: Literal["zstd", "lz4", "snappy", "gzip", "none"] = "zstd"
    #: zstd level. 1 compresses Kafka payloads (JSON, random text) within 1% of level 3 at up to
    #: twice the speed (docs/benchmarks.md); higher levels trade backup throughput for size.
    compression_level: int | None = Field(default=1, ge=1, le=22)
    segment_max_bytes: int = Field(default=128 * 1024 * 1024, ge=1024)
    segment_max_records: int = Field(default=1_000_000, ge=1)
    #: A segment open longer than this (wall clock) is closed and uploaded, so that in
    #: ``--follow`` mode data reaches storage steadily and checkpoints stay short.
    segment_max_interval_ms: int = Field(default=60_000, ge=100)
    #: Keep copying after reaching the end offsets (``--follow``).
    continuous: bool = False
    #: In continuous mode: how often an increment (manifest + group snapshot) is committed.
    checkpoint_interval_secs: float = Field(default=30, gt=0)
    include_internal_topics: bool = False
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    #: A selected topic that does not exist: stop with an error, or warn and skip it.
    on_missing_topic: Literal["fail", "warn"] = "fail"
    #: Snapshot the committed offsets of every consumer group on the selected topics.
    consumer_group_snapshot: bool = True
    #: Bytes of records held in memory for Parquet row groups, over all partitions together.
    #: Each partition gets an equal share, at most ``row_group_max_bytes``; memory stays
    #: bounded whatever the topic size or partition count.
    buffer_memory_bytes: int = Field(default=256 * 1024 * 1024, ge=1024 * 1024)
    row_group_max_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024, le=512 * 1024 * 1024)
    #: Segment files open at once (one per partition being written); beyond it the least
    #: recently written one is closed early, which bounds open files and scratch disk.
    max_open_segments: int = Field(default=128, ge=1)
    #: Folder for segment files before upload (default: the system's temporary folder).
    scratch_dir: str | None = None
    #: Timeout of each admin request (group offsets, end offsets, topic configs).
    request_timeout_secs: float = Field(default=30, gt=0, le=3600)
    #: Give up (committing what was copied) when no record and no broker answer arrived
    #: for this long while partitions still had records to copy.
    stall_timeout_secs: float = Field(default=120, gt=0)
