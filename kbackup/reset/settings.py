"""The ``offset_reset`` section of a config file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kbackup.core.config import StrictModel

Strategy = Literal["header-based", "from-mapping", "timestamp", "earliest", "latest", "offset"]


class OffsetResetSettings(StrictModel):
    """How consumer groups are moved (keys follow the seed tool's ``offset_reset:`` section)."""

    strategy: Strategy = Field(
        default="header-based",
        description=(
            "How new positions are found: `header-based` (binary search over origin headers), "
            "`from-mapping` (a mapping file), `timestamp`, `earliest`, `latest` or a fixed `offset`."
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
        description="Offset mapping file from `show-offset-mapping` (for `strategy: from-mapping`).",
    )
    timestamp: int | None = Field(
        default=None,
        description=(
            "Accepted for the seed tool's configs but not used: `strategy: timestamp` looks up each "
            "committed record's own timestamp in the backup."
        ),
    )
    offset: int | None = Field(default=None, ge=0, description="The offset for `strategy: offset`.")
    parallel_consumers: int = Field(
        default=4,
        ge=1,
        le=256,
        description=(
            "Accepted for the seed tool's configs but not used yet (`offset-reset-bulk --parallelism` is)."
        ),
    )
    timeout_secs: float = Field(
        default=3600, gt=0, description="Accepted for the seed tool's configs but not used yet."
    )
    source_offsets: Literal["backup", "live"] = Field(
        default="backup",
        description=(
            "Where the groups' source offsets come from: the backup's snapshot, or the live `source` cluster."
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
