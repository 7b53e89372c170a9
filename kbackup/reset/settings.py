"""The ``offset_reset`` section of a config file."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, field_validator, model_validator

from kbackup.core.config import StrictModel
from kbackup.core.times import require_zone

Strategy = Literal["header-based", "from-mapping", "timestamp", "earliest", "latest", "offset", "rewind"]


class OffsetResetSettings(StrictModel):
    """How consumer groups are moved (keys follow the seed tool's ``offset_reset:`` section)."""

    strategy: Strategy = Field(
        default="header-based",
        description=(
            "How new positions are found: `header-based` (binary search over origin headers), "
            "`from-mapping` (a mapping file), `timestamp`, `earliest`, `latest` or a fixed `offset`; "
            "`rewind`: no restore, the groups move back on the cluster the backup was taken from, "
            "to their positions of `as_of` (`offset-reset plan --in-place`)."
        ),
    )
    source_cluster: str | None = Field(
        default=None,
        description="The origin cluster id stamped on the restored records; unset: the backup's.",
    )
    groups: list[str] = Field(
        default_factory=list,
        description="Consumer groups to move; empty: every group in the backup's snapshot.",
    )
    scan_all_partitions: bool = Field(
        default=False,
        description="Records of one source partition may be in any target partition (repartitioned restore).",
    )
    mapping_file: str | None = Field(
        default=None,
        description=(
            "Offset mapping file from `show-offset-mapping` (for `strategy: from-mapping` and "
            "repartitioned topics); unset: the one `three-phase-restore` with this config wrote in "
            "`three_phase.state_dir`, if any."
        ),
    )
    timestamp: int | None = Field(
        default=None,
        description=(
            "With `strategy: timestamp`: a point in time (ms since the epoch); every partition moves "
            "to the first target record at or after it. Unset: each committed record's own timestamp, "
            "read from the backup."
        ),
    )
    offset: int | None = Field(default=None, ge=0, description="The offset for `strategy: offset`.")
    as_of: datetime | None = Field(
        default=None,
        description=(
            "A point in time with its zone (`2026-11-27T13:59:00Z`, `...+01:00`): every group's "
            "committed offsets are taken as they were then, from the backup's group history "
            "(`backup.group_snapshot_interval`) and its increments' snapshots, the latest reading "
            "finished by then (precision: the interval). Unset: the latest snapshot."
        ),
    )
    parallel_consumers: int = Field(
        default=8,
        ge=1,
        le=256,
        description="Groups applied at once by `offset-reset-bulk` when `--parallelism` is not given.",
    )
    timeout_secs: float = Field(
        default=3600,
        gt=0,
        description="Planning stops with an error (exit 6, nothing changed) after this many seconds.",
    )
    source_offsets: Literal["backup", "live"] = Field(
        default="backup",
        description=(
            "Where the groups' source offsets come from: the backup's snapshot, or the live `source` cluster."
        ),
    )
    live_source_cluster_id: str | None = Field(
        default=None,
        description=(
            "With `source_offsets: live`: the Kafka cluster id of the `source` cluster, named to read a "
            "cluster other than the backup's origin (the one the restored records' origin headers name); "
            "the live cluster must answer with this id. Unset: the live cluster must be that origin."
        ),
    )
    topic_mapping: dict[str, str] | None = Field(
        default=None,
        description="Source topic -> target topic; unset: `restore.topic_mapping` of the same file.",
    )
    uncommitted_partitions: Literal["earliest", "skip"] = Field(
        default="earliest",
        description=(
            "A source partition a group never committed on: start at the first restored record, "
            "or leave it without a committed offset."
        ),
    )
    snapshot_dir: str = Field(
        default="offset-snapshots",
        description="Where execute writes rollback snapshots of the offsets it replaces.",
    )

    @field_validator("as_of")
    @classmethod
    def _zoned(cls, value: datetime | None) -> datetime | None:
        return require_zone(value)

    @model_validator(mode="after")
    def _strategy_inputs(self) -> OffsetResetSettings:
        # Checked when the file is read: the planner would otherwise find out only at plan time,
        # in three-phase-restore after the whole restore phase.
        if self.strategy == "offset" and self.offset is None:
            raise ValueError("strategy: offset needs offset (the offset every partition moves to)")
        if self.offset is not None and self.strategy != "offset":
            raise ValueError(f"offset is read only with strategy: offset, and strategy is {self.strategy}")
        if self.timestamp is not None and self.strategy != "timestamp":
            raise ValueError(
                f"timestamp is read only with strategy: timestamp, and strategy is {self.strategy}"
            )
        if self.live_source_cluster_id is not None and self.source_offsets != "live":
            raise ValueError("live_source_cluster_id is read only with source_offsets: live")
        if self.as_of is not None and self.source_offsets == "live":
            raise ValueError("as_of reads the backup's group history: it needs source_offsets: backup")
        if self.strategy == "rewind" and self.source_offsets == "live":
            raise ValueError(
                "strategy: rewind moves groups back to the backup's positions: it needs "
                "source_offsets: backup"
            )
        return self
