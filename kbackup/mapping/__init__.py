"""Stage 3, mapping: a Spark job that turns restored records' origin headers into offset ranges.

The public API (what ``show-offset-mapping``, the three-phase restore and
the reset stage use):

- :func:`build_offset_mapping` scans target topics into an :class:`OffsetMapping`;
- :func:`write_mapping` / :func:`read_mapping` store and load it (JSON, CSV, Parquet);
- :meth:`OffsetMapping.target_positions` / :meth:`OffsetMapping.lookup` translate
  committed source offsets into target positions.
"""

from kbackup.mapping.build import build_offset_mapping, plan_scan
from kbackup.mapping.mapping_file import (
    OffsetMapping,
    ScannedPartition,
    ScanStats,
    read_mapping,
    render,
    write_mapping,
)
from kbackup.mapping.ranges import OffsetRange, TargetPosition

__all__ = [
    "OffsetMapping",
    "OffsetRange",
    "ScanStats",
    "ScannedPartition",
    "TargetPosition",
    "build_offset_mapping",
    "plan_scan",
    "read_mapping",
    "render",
    "write_mapping",
]
