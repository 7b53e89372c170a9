"""The ``source`` and ``backup`` sections of a config file."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from kbackup.core.config import KafkaConnection, StrictModel, check_patterns
from kbackup.core.durations import Duration, DurationText
from kbackup.core.sizes import SizeBytes


class TopicSelection(StrictModel):
    """Which topics to back up: full-match regular expressions (a plain topic name matches itself)."""

    include: list[str] = Field(
        default_factory=lambda: [".*"],
        min_length=1,
        description="Topics to back up: full-match regular expressions (a plain name matches itself).",
    )
    exclude: list[str] = Field(
        default_factory=list, description="Topics never backed up, even when `include` matches them."
    )

    @field_validator("include", "exclude")
    @classmethod
    def _compile(cls, patterns: list[str]) -> list[str]:
        return check_patterns(patterns)


class SourceSettings(KafkaConnection):
    """The cluster to back up."""

    topics: TopicSelection = Field(default_factory=TopicSelection, description="Which topics to back up.")


class BackupSettings(StrictModel):
    """How a backup is taken (keys follow the seed tool's ``backup:`` section)."""

    source_cluster_id: str | None = Field(
        default=None,
        description=(
            "Stamped on every record as its origin "
            "cluster (`x-kafka-backup-cluster`); unset: the Kafka cluster id."
        ),
    )
    include_offset_headers: bool = Field(
        default=True,
        description=(
            "Recorded in the manifest: a restore that does not set "
            "`restore.include_original_offset_header` stamps `x-kafka-backup-*` origin headers only "
            "if this is true (the backup keeps every origin offset either way)."
        ),
    )
    compression: Literal["zstd", "lz4", "snappy", "gzip", "none"] = Field(
        default="zstd", description="Parquet compression codec of the segment files."
    )
    compression_level: int | None = Field(
        default=1,
        ge=1,
        le=22,
        description=(
            "zstd level; higher levels trade throughput for size (docs/benchmarks.md measures the "
            "default, 1, against lz4 and no compression)."
        ),
    )
    segment_max_bytes: int = Field(
        default=128 * 1024 * 1024, ge=1024, description="A segment file is closed and uploaded at this size."
    )
    segment_max_records: int = Field(
        default=1_000_000, ge=1, description="... or after this many records, whichever comes first."
    )
    segment_max_interval_ms: int = Field(
        default=60_000,
        ge=100,
        description=(
            "A segment open longer than this (wall clock) is closed and uploaded, so that with "
            "`--follow` data reaches storage steadily."
        ),
    )
    continuous: bool = Field(
        default=False, description="Keep copying after reaching the end offsets (the same as `--follow`)."
    )
    checkpoint_interval_secs: float = Field(
        default=30,
        gt=0,
        description="In continuous mode: how often an increment (manifest + group snapshot) is committed.",
    )
    include_internal_topics: bool = Field(
        default=False, description="Also back up topics starting with `__` (Kafka's internal topics)."
    )
    isolation_level: Literal["read_committed", "read_uncommitted"] = Field(
        default="read_committed",
        description="`read_committed` skips aborted transactions; `read_uncommitted` copies them too.",
    )
    on_missing_topic: Literal["fail", "warn"] = Field(
        default="fail",
        description="A selected topic that does not exist: stop with an error, or warn and skip it.",
    )
    consumer_group_snapshot: bool = Field(
        default=True,
        description="Snapshot the committed offsets of every consumer group on the selected topics.",
    )
    group_snapshot_interval: DurationText | None = Field(
        default=None,
        description=(
            "In continuous mode: also read every group's committed offsets this often between "
            "increments (`10s`, `1m`), stored with the next increment as its group history (only what "
            "changed), for positions at a point in time (`describe --groups-history`). Unset: one "
            "snapshot per increment. Needs `consumer_group_snapshot`."
        ),
    )
    buffer_memory_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=1024 * 1024,
        description=(
            "Bytes of records held in memory for Parquet row groups, over all partitions together; "
            "each partition gets an equal share, at most `row_group_max_bytes`."
        ),
    )
    row_group_max_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=64 * 1024,
        le=512 * 1024 * 1024,
        description="Largest Parquet row group of one partition.",
    )
    max_open_segments: int = Field(
        default=128,
        ge=1,
        description=(
            "Segment files open at once; beyond it the least recently written one is closed early, "
            "which bounds open files and scratch disk."
        ),
    )
    scratch_dir: str | None = Field(
        default=None,
        description="Folder for segment files before upload; unset: the system's temporary folder.",
    )
    request_timeout_secs: float = Field(
        default=30,
        gt=0,
        le=3600,
        description="Timeout of each admin request (group offsets, end offsets, topic configs).",
    )
    spark_task_records: int = Field(
        default=2_000_000,
        ge=1,
        description=(
            "engine: spark: the most offsets one Spark task copies; a larger partition is cut into "
            "slices of this many, smaller ones share a task (docs/scaling.md)."
        ),
    )
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        default="auto",
        description=(
            "Worker processes of the local engine, each copying slices of the increment with its own "
            "consumer. `auto`: one per two cores, no more than the partitions (or slices) to copy, and 1 "
            "(this process) for an increment under 2,000,000 records. Ignored with `engine: spark` "
            '(docs/backup.md, "Workers").'
        ),
    )
    stall_timeout_secs: float = Field(
        default=120,
        gt=0,
        description=(
            "Give up (committing what was copied) when no record and no broker answer arrived for "
            "this long while partitions still had records to copy."
        ),
    )
    max_bytes_per_second: SizeBytes | None = Field(
        default=None,
        description=(
            "Rate limit of the copy: bytes of records (keys, values, headers) read from the source a "
            "second, a number or a size (`50MiB`, `200MB`); unset: no limit. On the Spark engine it "
            'is split evenly over the tasks that run at once (docs/backup.md, "Rate limit").'
        ),
    )

    @model_validator(mode="after")
    def _history_needs_snapshots(self) -> BackupSettings:
        if self.group_snapshot_interval is not None and not self.consumer_group_snapshot:
            raise ValueError(
                "backup.group_snapshot_interval reads the groups between increments: it needs "
                "backup.consumer_group_snapshot: true"
            )
        return self

    @property
    def group_snapshot_interval_secs(self) -> float | None:
        """``group_snapshot_interval`` in seconds (None: unset)."""
        interval = self.group_snapshot_interval
        return None if interval is None else Duration.seconds_in(interval)
