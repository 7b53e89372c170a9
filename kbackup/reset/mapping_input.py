"""Reading a mapping file (written by ``show-offset-mapping``) into the planner's range index."""

from __future__ import annotations

from pathlib import Path

from kbackup.mapping.mapping_file import read_mapping
from kbackup.reset.planner import MappingIndex, mapping_index
from kbackup.reset.translate import MappedRange


def load_mapping_index(path: Path, source_cluster: str) -> MappingIndex:
    """Ranges per target partition; refuses a mapping of another source cluster."""
    mapping = read_mapping(path, source_cluster=source_cluster)
    return mapping_index(
        (
            item.target_topic,
            item.target_partition,
            MappedRange(
                source_topic=item.source_topic,
                source_partition=item.source_partition,
                source_start=item.source_start,
                target_start=item.target_start,
                length=item.records,  # the mapping's ends are inclusive
            ),
        )
        for item in mapping.ranges
    )
