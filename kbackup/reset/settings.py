"""The ``offset_reset`` section of a config file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kbackup.core.config import StrictModel

Strategy = Literal["header-based", "from-mapping", "timestamp", "earliest", "latest", "offset"]


class OffsetResetSettings(StrictModel):
    """How consumer groups are moved (keys follow the seed tool's ``offset_reset:`` section)."""

    strategy: Strategy = "header-based"
    #: The origin cluster id stamped on the restored records.
    source_cluster: str | None = None
    groups: list[str] = Field(default_factory=list)
    #: Records of one source partition may be in any target partition (repartitioned restore).
    scan_all_partitions: bool = False
    mapping_file: str | None = None
    #: For ``strategy: timestamp`` with a fixed time, and ``strategy: offset``.
    timestamp: int | None = None
    offset: int | None = Field(default=None, ge=0)
    parallel_consumers: int = Field(default=4, ge=1, le=256)
    timeout_secs: float = Field(default=3600, gt=0)
    #: Where the groups' source offsets come from: the backup's snapshot, or the live ``source`` cluster.
    source_offsets: Literal["backup", "live"] = "backup"
    #: Source topic -> target topic; defaults to ``restore.topic_mapping`` of the same file.
    topic_mapping: dict[str, str] | None = None
    #: A source partition a group never committed on: start at the first restored record, or leave it.
    uncommitted_partitions: Literal["earliest", "skip"] = "earliest"
    #: Where execute writes rollback snapshots of the offsets it replaces.
    snapshot_dir: str = "offset-snapshots"
