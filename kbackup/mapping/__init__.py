"""Stage 3, mapping: a Spark job that turns restored records' origin headers into offset ranges.

What it offers (it changes nothing on the target, so it has no plan/execute pair: it runs):

- run: :func:`build_offset_mapping` scans target topics into an :class:`OffsetMapping`;
  :func:`plan_scan` says beforehand which partitions and how many offsets a scan reads.
- the mapping as a file: :func:`write_mapping` and :func:`read_mapping` (JSON, CSV, Parquet).

The file format, its readers and writers, and the position look-ups live in
:mod:`kbackup.format.mapping_file`, below every stage (the reset stage reads mappings too);
they are offered here as well so that a library user needs this one import (docs/mapping.md).
"""

from kbackup.format.mapping_file import OffsetMapping, read_mapping, write_mapping
from kbackup.mapping.build import build_offset_mapping, plan_scan

__all__ = ["OffsetMapping", "build_offset_mapping", "plan_scan", "read_mapping", "write_mapping"]
