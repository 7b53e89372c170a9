"""Reading a mapping file (written by ``show-offset-mapping``) into the planner's range index."""

from __future__ import annotations

from pathlib import Path

from kbackup.core.errors import PreconditionError
from kbackup.format.mapping_file import read_mapping
from kbackup.reset.planner import MappingIndex, mapping_index


def load_mapping_index(path: Path, source_cluster: str, target_cluster_id: str | None = None) -> MappingIndex:
    """Ranges per target partition; refuses a mapping of another source cluster, or one scanned on
    another target cluster than ``target_cluster_id`` (its offsets would mean nothing there)."""
    mapping = read_mapping(path, source_cluster=source_cluster)
    if (
        target_cluster_id is not None
        and mapping.target_cluster_id is not None
        and mapping.target_cluster_id != target_cluster_id
    ):
        raise PreconditionError(
            f"offset mapping {path} was scanned on cluster {mapping.target_cluster_id}, "
            f"but the target is cluster {target_cluster_id}",
            hint="build the mapping on this target with kafka-backup show-offset-mapping, or fix target:",
        )
    return mapping_index(mapping.ranges)
